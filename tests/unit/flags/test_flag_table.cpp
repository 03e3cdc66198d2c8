// The flag table (mds/flags/flag_table.h): one row per flag, from which mds-train's parser, the
// checkpoint's args Namespace, the "not supported" list and the docs' flag tables come.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "mds/flags/flag_table.h"
#include "mds/util/error.h"
#include "flag_parse.h"

using namespace mds::flags;
using mds::ckpt::PyValue;

namespace {

TrainArgs parsed(std::vector<std::string> argv) {
    TrainArgs args;
    mds::flags_test::parse(args, std::move(argv));
    return args;
}

const std::vector<std::string> kModel{"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                      "--seq-length", "64", "--max-position-embeddings", "64", "--lr", "1e-3",
                                      "--train-iters", "10"};

std::vector<std::string> model_and(std::vector<std::string> more) {
    auto argv = kModel;
    argv.insert(argv.end(), more.begin(), more.end());
    return argv;
}

std::string repr_of(const FlagRow& row, const TrainArgs& args) { return namespace_value(row, args).repr(); }

}  // namespace

TEST_CASE("flag table: names and Namespace keys are unique; every row says what mds does with it") {
    std::set<std::string> names, keys;
    for (const auto& row : flag_table()) {
        CAPTURE(row.names);
        CHECK(names.insert(row.long_name()).second);
        if (!row.key.empty()) CHECK(keys.insert(row.key).second);
        const bool has_slot = row.slot != nullptr;
        switch (row.status) {
        case FlagStatus::Supported: CHECK(has_slot); break;
        case FlagStatus::NoEffect:
            // Accepted, with a help that says so and the reason mds's numbers do not depend on it: in
            // `why` (the docs' table prints it after the help) or in the row's doc.
            CHECK(row.help.find("no effect") != std::string::npos);
            CHECK((!row.why.empty() || !row.doc.empty()));
            break;
        case FlagStatus::Refused: CHECK(!row.why.empty()); break;
        // Issue 18: every BMD flag is taken, accepted without effect or refused by name.
        case FlagStatus::Undeclared: FAIL_CHECK("a BMD flag is still undeclared"); break;
        }
        // The Namespace writes a Fixed row's value as the table spells it: it must read as Python.
        if (row.py == PyForm::Fixed || (!row.slot && row.py != PyForm::Derived)) CHECK_NOTHROW(python_literal(row.bmd_value));
    }
    CHECK(find_flag("--partition-method") == find_flag("--pp-partition-method"));
    CHECK(find_flag("--no-such-flag") == nullptr);
    CHECK(find_namespace_key("seq_length") == find_flag("--seq-length"));
    CHECK(find_namespace_key("bert_binary_head")->status == FlagStatus::NoEffect);
    CHECK(find_flag("--local-rank") == find_flag("--local_rank"));
}

TEST_CASE("flag table: Python literals") {
    CHECK(python_literal("None").is_none());
    CHECK(python_literal("True").as_bool());
    CHECK(python_literal("128").as_int() == 128);
    CHECK(python_literal("0.0").type() == mds::ckpt::PyType::Float);
    CHECK(python_literal("1e-05").as_float() == doctest::Approx(1e-5));
    CHECK(python_literal("'single'").as_str() == "single");
    CHECK(python_literal("[]").as_list().empty());
    CHECK_THROWS_AS(python_literal("2 ** 32"), mds::Error);
}

TEST_CASE("flag table: a flag's value in the checkpoint's args Namespace") {
    const TrainArgs defaults = parsed(kModel);
    const TrainArgs given = parsed(model_and({"--no-save-optim", "--save", "/c", "--save-interval", "5", "--data-path",
                                             "0.5", "/a", "0.5", "/b", "--log-level", "info"}));
    // store_true with default=None: True or None.
    CHECK(repr_of(*find_flag("--no-save-optim"), defaults) == "None");
    CHECK(repr_of(*find_flag("--no-save-optim"), given) == "True");
    // A string flag: None when not given; a flag with a default: always a str.
    CHECK(repr_of(*find_flag("--save"), defaults) == "None");
    CHECK(repr_of(*find_flag("--save"), given) == "'/c'");
    CHECK(repr_of(*find_flag("--optimizer"), defaults) == "'adam'");
    CHECK(repr_of(*find_flag("--log-level"), defaults) == "None");
    CHECK(repr_of(*find_flag("--log-level"), given) == "'info'");
    CHECK(repr_of(*find_flag("--data-path"), given) == "['0.5', '/a', '0.5', '/b']");
    CHECK(repr_of(*find_flag("--save-interval"), given) == "5");
    CHECK(repr_of(*find_flag("--lr"), defaults) == "0.001");
    // A refused flag and a flag mds accepts without reading it: BMD's value when not given.
    CHECK(repr_of(*find_flag("--inference"), defaults) == "False");
    CHECK(repr_of(*find_flag("--zero-reduce-bucket-size"), defaults) == "0.0");
    CHECK(repr_of(*find_namespace_key("bert_binary_head"), defaults) == "True");
    // Derived attributes belong to the Namespace writer.
    CHECK_THROWS_AS(namespace_value(*find_flag("--ffn-hidden-size"), defaults), mds::Error);
}

TEST_CASE("flag table: --optimizer sgd and rotary positions fail in validate, naming the flag") {
    auto sgd = parsed(model_and({"--optimizer", "sgd"}));
    CHECK_THROWS_WITH_AS(validate(sgd), doctest::Contains("--optimizer sgd"), mds::UsageError);
    auto rotary = parsed(model_and({"--position-embedding-type", "rotary"}));
    CHECK_THROWS_WITH_AS(validate(rotary), doctest::Contains("--position-embedding-type rotary"), mds::UsageError);
    auto alibi = parsed(model_and({"--position-embedding-type", "alibi"}));
    CHECK_NOTHROW(validate(alibi));
    // Accepted for compatibility: parsed, no error.
    auto workers = parsed(model_and({"--num-workers", "8", "--sgd-momentum", "0.5", "--tensorboard-queue-size", "5"}));
    CHECK_NOTHROW(validate(workers));
    CHECK(workers.data.num_workers == 8);
}

TEST_CASE("flag table: another tool declares only the rows it takes") {
    TrainArgs args;
    CLI::App app("mds-sample-index");
    add_table_flags(app, args, kToolSampleIndex);
    CHECK(app.get_option_no_throw("--seq-length") != nullptr);
    CHECK(app.get_option_no_throw("--rampup-batch-size") != nullptr);
    CHECK(app.get_option_no_throw("--num-layers") == nullptr);
    CHECK(app.get_option_no_throw("--glu-activation") == nullptr);
}

TEST_CASE("flag table: the docs' markdown tables") {
    TrainArgs args;
    CLI::App app("mds-train");
    add_train_flags(app, args);
    app.add_flag("--hidden-flag")->group("");
    const std::string md = flags_markdown(app, {{"--seq-length", "(more words)"}});
    CHECK(md.find("### Model\n\n| flag | meaning |\n| --- | --- |\n") != std::string::npos);
    CHECK(md.find("| `-h` `--help` | Print this help message and exit |") != std::string::npos);
    CHECK(md.find("| `--num-layers` | Number of transformer layers (required) [default: 0] |") != std::string::npos);
    CHECK(md.find("| `--seq-length` | Tokens per training sample (required) [default: 0] (more words) |") != std::string::npos);
    CHECK(md.find("| `--pp-partition-method` `--partition-method` |") != std::string::npos);
    CHECK(md.find("| `--batch-size` | not supported: no longer valid in Megatron") != std::string::npos);
    // A flag without effect: its help, then why mds's numbers do not depend on it.
    CHECK(md.find("| `--mmap-warmup` | Read the datasets' index files once before training (no effect in mds): it only "
                  "warms the page cache") != std::string::npos);
    CHECK(md.find("type:transformer\\|embedding") != std::string::npos);  // a | in a cell is escaped
    CHECK(md.find("--hidden-flag") == std::string::npos);
    CHECK(md.find("### Flags of BMD's BERT, T5, ICT, retriever and vision scripts (no effect in mds-train)") !=
          std::string::npos);
}

TEST_CASE("flag table: every add_argument of BigScience's megatron/arguments.py has a row") {
    // Issue 18's check, as far as the table goes: each BMD flag is a row (taken, without effect,
    // refused with a reason, or not declared yet); taking or refusing one is then a row edit.
    const auto path = std::filesystem::path(__FILE__).parent_path() /
                      "../../../../shared/third_party/bigscience-megatron-deepspeed/megatron/arguments.py";
    std::ifstream in(path);
    if (!in) {
        MESSAGE("skipped: no " << path.string());
        return;
    }
    std::stringstream text;
    text << in.rdbuf();
    const std::string src = text.str();
    // Every `add_argument(  '-...'` (or "-..."): the flag's first name. (A scan, not std::regex: GCC 12's <regex>
    // trips -Wmaybe-uninitialized under the sanitizers.)
    int flags = 0, undeclared = 0;
    const std::string call = "add_argument(";
    for (auto at = src.find(call); at != std::string::npos; at = src.find(call, at + 1)) {
        auto q = src.find_first_not_of(" \t\r\n", at + call.size());
        if (q == std::string::npos || (src[q] != '\'' && src[q] != '"') || q + 1 >= src.size() || src[q + 1] != '-') continue;
        const auto end = src.find_first_of("'\"", q + 1);
        if (end == std::string::npos) break;
        const std::string flag = src.substr(q + 1, end - q - 1);
        CAPTURE(flag);
        const FlagRow* row = find_flag(flag);
        CHECK(row != nullptr);
        ++flags;
        if (row && row->status == FlagStatus::Undeclared) ++undeclared;
    }
    CHECK(flags > 180);
    CHECK(undeclared == 0);  // issue 18: none left

}

TEST_CASE("flag table: flags accepted without effect are checked as BMD's parser does and recorded") {
    const TrainArgs defaults = parsed(kModel);
    TrainArgs given = parsed(model_and({"--tile-factor", "4", "--no-masked-softmax-fusion", "--use-cpu-initialization",
                                             "--retriever-report-topk-accuracies", "1", "5", "20", "--DDP-impl", "torch",
                                             "--sample-rate", "0.5", "--log-path", "/logs", "--mmap-warmup"}));
    CHECK_NOTHROW(validate(given));
    // The Namespace holds what BMD's would: the typed value given, or BMD's default.
    CHECK(repr_of(*find_flag("--tile-factor"), given) == "4");
    CHECK(repr_of(*find_flag("--tile-factor"), defaults) == "1");
    CHECK(repr_of(*find_flag("--no-masked-softmax-fusion"), given) == "False");  // store_false
    CHECK(repr_of(*find_flag("--no-masked-softmax-fusion"), defaults) == "True");
    CHECK(repr_of(*find_flag("--use-cpu-initialization"), given) == "True");
    CHECK(repr_of(*find_flag("--use-cpu-initialization"), defaults) == "None");
    CHECK(repr_of(*find_flag("--retriever-report-topk-accuracies"), given) == "[1, 5, 20]");
    CHECK(repr_of(*find_flag("--retriever-report-topk-accuracies"), defaults) == "[]");
    CHECK(repr_of(*find_flag("--DDP-impl"), given) == "'torch'");
    CHECK(repr_of(*find_flag("--sample-rate"), given) == "0.5");
    CHECK(repr_of(*find_flag("--log-path"), given) == "'/logs'");
    CHECK(repr_of(*find_flag("--mmap-warmup"), given) == "True");
    // argparse's type= and choices= still apply.
    CHECK_THROWS_WITH(parsed(model_and({"--tile-factor", "two"})), doctest::Contains("--tile-factor"));
    CHECK_THROWS_WITH(parsed(model_and({"--sample-rate", "half"})), doctest::Contains("--sample-rate"));
    CHECK_THROWS(parsed(model_and({"--DDP-impl", "apex"})));
    CHECK_THROWS(parsed(model_and({"--remote-device", "disk"})));
    // BMD's own checks of flags it then ignores stop mds-train too.
    auto distribute = parsed(model_and({"--distribute-checkpointed-activations"}));
    CHECK_THROWS_WITH_AS(validate(distribute), doctest::Contains("needs --checkpoint-activations"), mds::UsageError);
    auto distribute_ok = parsed(model_and({"--distribute-checkpointed-activations", "--checkpoint-activations"}));
    CHECK_NOTHROW(validate(distribute_ok));
    auto decoder = parsed(model_and({"--decoder-seq-length", "128"}));
    CHECK_THROWS_WITH_AS(validate(decoder), doctest::Contains("--decoder-seq-length 128"), mds::UsageError);
    auto decoder_ok = parsed(model_and({"--decoder-seq-length", "64"}));
    CHECK_NOTHROW(validate(decoder_ok));
}

TEST_CASE("flag table: refused flags say what to use instead") {
    CHECK_THROWS_WITH(parsed(model_and({"--batch-size", "4"})),
                      doctest::Contains("--batch-size: not supported by mds-train: no longer valid in Megatron"));
    CHECK_THROWS_WITH(parsed(model_and({"--batch-size", "4"})), doctest::Contains("use --micro-batch-size"));
    CHECK_THROWS_WITH(parsed(model_and({"--warmup", "0.1"})), doctest::Contains("use --lr-warmup-fraction"));
    CHECK_THROWS_WITH(parsed(model_and({"--model-parallel-size", "2"})), doctest::Contains("use --tensor-model-parallel-size"));
    CHECK_THROWS_WITH(parsed(model_and({"--deepscale_config", "ds.json"})), doctest::Contains("use --deepspeed_config"));
    CHECK_THROWS_WITH(parsed(model_and({"--inference"})), doctest::Contains("--eval-only"));
    CHECK_THROWS_WITH(parsed(model_and({"--encoder-seq-length", "64"})), doctest::Contains("use --seq-length"));
}

TEST_CASE("flag table: --eval-only reads its value as argparse's type=bool; --local_rank is kept") {
    const TrainArgs none = parsed(kModel);
    CHECK_FALSE(none.logging.evaluate_only());
    CHECK(repr_of(*find_flag("--eval-only"), none) == "None");
    const TrainArgs yes = parsed(model_and({"--eval-only", "True"}));
    CHECK(yes.logging.evaluate_only());
    CHECK(repr_of(*find_flag("--eval-only"), yes) == "True");
    // bool("False") is True in Python: BMD evaluates only with --eval-only False too.
    const TrainArgs no = parsed(model_and({"--eval-only", "False"}));
    CHECK(no.logging.evaluate_only());
    const TrainArgs empty = parsed(model_and({"--eval-only", ""}));
    CHECK_FALSE(empty.logging.evaluate_only());
    CHECK(repr_of(*find_flag("--eval-only"), empty) == "False");
    CHECK(parsed(model_and({"--local_rank", "3"})).parallel.local_rank == 3);
    CHECK(parsed(model_and({"--local-rank=2"})).parallel.local_rank == 2);
    CHECK_FALSE(none.parallel.local_rank.has_value());
}
