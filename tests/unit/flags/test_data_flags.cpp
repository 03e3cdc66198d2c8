// Issue 18's data and loss flags in the flag layer: what they parse into, the checks, and their
// rows (status and the value BMD's args Namespace holds).
#include <doctest/doctest.h>

#include <array>
#include <string>
#include <vector>

#include "mds/flags/flag_table.h"
#include "mds/flags/train_args.h"
#include "mds/util/error.h"
#include "flag_parse.h"

using namespace mds::flags;

namespace {

// A small model's flags and `extra`, parsed and checked.
TrainArgs data_args(std::vector<std::string> extra) {
    std::vector<std::string> argv{"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                  "--seq-length", "128", "--max-position-embeddings", "128", "--lr", "1e-3",
                                  "--train-iters", "10"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    TrainArgs args;
    mds::flags_test::parse(args, std::move(argv));
    validate(args);
    return args;
}

using Ranges = std::vector<std::array<std::int64_t, 2>>;

}  // namespace

TEST_CASE("--skip-train-iteration-range: sorted and merged as BMD's parse_args, bad ranges name the flag") {
    CHECK(data_args({}).data.skip_ranges.empty());
    CHECK(data_args({"--skip-train-iteration-range", "10-12", "1-5", "2-6"}).data.skip_ranges == Ranges{{1, 6}, {10, 12}});
    // Touching but not overlapping ranges stay apart (BMD merges when the previous end >= the next start).
    CHECK(data_args({"--skip-train-iteration-range", "5-5", "6-6"}).data.skip_ranges == Ranges{{5, 5}, {6, 6}});
    CHECK(data_args({"--skip-train-iteration-range", "3-8", "8-9"}).data.skip_ranges == Ranges{{3, 9}});
    CHECK_THROWS_WITH_AS(data_args({"--skip-train-iteration-range", "7-3"}),
                         doctest::Contains("--skip-train-iteration-range 7-3: the range ends (3) before it starts (7)"),
                         mds::UsageError);
    CHECK_THROWS_WITH_AS(data_args({"--skip-train-iteration-range", "7"}), doctest::Contains("START-END"), mds::UsageError);
    CHECK_THROWS_WITH_AS(data_args({"--skip-train-iteration-range", "1-2-3"}), doctest::Contains("expected two whole numbers joined by one '-'"),
                         mds::UsageError);
    CHECK_THROWS_WITH_AS(data_args({"--skip-train-iteration-range", "a-3"}), doctest::Contains("the range start 'a' is not a whole number"),
                         mds::UsageError);
}

TEST_CASE("issue 18 flags: values, statuses and Namespace values") {
    const auto a = data_args({"--eod-mask-loss", "--dataloader-type", "cyclic", "--vocab-extra-ids", "3", "--train-tokens",
                           "1000", "--loss-on-targets-only", "--reweight-loss-based-on-position-frequency",
                           "--reset-position-ids", "--reset-attention-mask"});
    CHECK(a.data.eod_mask_loss);
    CHECK(a.data.reset_position_ids);
    CHECK(a.data.reset_attention_mask);
    CHECK(a.data.dataloader_type == "cyclic");
    CHECK(a.data.vocab_extra_ids == 3);
    CHECK(a.length.train_tokens == 1000);
    const auto d = data_args({});
    CHECK(!d.data.eod_mask_loss);
    CHECK(!d.data.reset_position_ids);
    CHECK(!d.data.reset_attention_mask);
    CHECK(d.data.dataloader_type == "single");
    CHECK_THROWS(data_args({"--dataloader-type", "random"}));
    CHECK_THROWS_WITH_AS(data_args({"--vocab-extra-ids", "-1"}), doctest::Contains("--vocab-extra-ids must not be negative"),
                         mds::UsageError);
    // --loss-on-targets-only takes effect with --sft (issue 25), so it is a supported flag now.
    for (const char* f : {"--eod-mask-loss", "--dataloader-type", "--skip-train-iteration-range", "--vocab-extra-ids",
                          "--reset-position-ids", "--loss-on-targets-only", "--sft"})
        CHECK(find_flag(f)->status == FlagStatus::Supported);
    for (const char* f : {"--train-tokens", "--reweight-loss-based-on-position-frequency", "--reset-attention-mask"})
        CHECK(find_flag(f)->status == FlagStatus::NoEffect);
    for (const char* f : {"--reset-position-ids", "--reset-attention-mask"}) {
        CHECK(namespace_value(*find_flag(f), a).repr() == "True");
        CHECK(namespace_value(*find_flag(f), d).repr() == "False");
    }
    CHECK(namespace_value(*find_flag("--eod-mask-loss"), a).repr() == "True");
    CHECK(namespace_value(*find_flag("--dataloader-type"), a).repr() == "'cyclic'");
    CHECK(namespace_value(*find_flag("--dataloader-type"), d).repr() == "'single'");
    CHECK(namespace_value(*find_flag("--train-tokens"), a).repr() == "1000");
    CHECK(namespace_value(*find_flag("--vocab-extra-ids"), a).repr() == "3");
    CHECK(namespace_value(*find_flag("--loss-on-targets-only"), a).repr() == "True");
}
