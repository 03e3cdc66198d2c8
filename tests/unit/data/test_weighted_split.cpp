// Megatron-DeepSpeed's data loading Mode 2: --(train|valid|test)-weighted-split-paths[-path].
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../test_support.h"
#include "mds/data/gpt_datasets.h"
#include "mds/data/indexed_dataset_builder.h"
#include "mds/data/weighted_split.h"
#include "mds/util/error.h"
#include "test_support.h"

using mds::test::contains;

using namespace mds::data;

namespace {

std::string error_kind_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const mds::UsageError& e) {
        return std::string("usage: ") + e.what();
    } catch (const mds::Error& e) {
        return std::string("error: ") + e.what();
    }
    return "";
}

std::string write(const std::filesystem::path& dir, const std::string& name, const std::string& text) {
    const auto p = (dir / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
}

// A dataset of `docs` documents of 5..40 tokens (one sequence each), ids from `seed`.
std::string make_dataset(const std::filesystem::path& dir, const std::string& name, int docs, unsigned seed) {
    const std::string prefix = (dir / name).string();
    IndexedDatasetBuilder b(prefix, DType::UInt16);
    std::mt19937 rng(seed);
    for (int d = 0; d < docs; ++d) {
        std::vector<std::int32_t> ids(5 + rng() % 36);
        for (auto& id : ids) id = static_cast<std::int32_t>(rng() % 500);
        b.add_item(ids);
        b.end_document();
    }
    b.finalize();
    return prefix;
}

}  // namespace

TEST_CASE("groups parse as BMD's parse_data_paths keeps them") {
    // The shape BigScience's load_ratios_meg_ds_format.py writes for tr11-176B-ml.
    auto g = parse_weighted_split_paths("--valid-weighted-split-paths",
                                        {"valid: 0.3 0.950:1.0 /d/ar_text_document, 0.7 0.950:1.0 /d/ca_text_document",
                                         "valid_ar: 1 0.950:1.0 /d/ar_text_document"});
    REQUIRE(g.size() == 2);
    CHECK(g[0].name == "valid");
    CHECK(g[0].weights == std::vector<std::string>{"0.3", "0.7"});
    CHECK(g[0].splits == std::vector<std::string>{"0.950:1.0", "0.950:1.0"});
    CHECK(g[0].paths == std::vector<std::string>{"/d/ar_text_document", "/d/ca_text_document"});
    CHECK(g[1].name == "valid_ar");
    CHECK(g[1].paths == std::vector<std::string>{"/d/ar_text_document"});
    // The name is everything before the first ':' (kept as written); paths may hold ':'.
    auto h = parse_weighted_split_paths("--train-weighted-split-paths", {"my set:1 0:0.5 /d/a:b"});
    CHECK(h[0].name == "my set");
    CHECK(h[0].paths == std::vector<std::string>{"/d/a:b"});
}

TEST_CASE("BMD's format checks are usage errors naming the flag, the group and the dataset") {
    const std::string t = "--train-weighted-split-paths";
    auto e = error_kind_of([&] { parse_weighted_split_paths(t, {"A: 1 0:1 /a", "B: 1 0:1 /b"}); });
    CHECK(contains(e, "usage: --train-weighted-split-paths"));
    CHECK(contains(e, "only 1 dataset group"));
    e = error_kind_of([&] { parse_weighted_split_paths("--valid-weighted-split-paths", {"A: 1 0:1 /a, 0.5 0:1"}); });
    CHECK(contains(e, "usage: --valid-weighted-split-paths"));
    CHECK(contains(e, "dataset 2 '0.5 0:1': 2 words instead of 3"));
    e = error_kind_of([&] { parse_weighted_split_paths(t, {"A /a"}, "from f.txt line 1"); });
    CHECK(contains(e, "--train-weighted-split-paths (from f.txt line 1), group 1 'A /a': no ':'"));
    CHECK(contains(error_kind_of([&] { parse_weighted_split_paths(t, {"A: 1 0.5 /a"}); }), "is not START:END"));
    CHECK(contains(error_kind_of([&] { parse_weighted_split_paths(t, {"A: 1 0:x /a"}); }), "not a finite number"));
    CHECK(contains(error_kind_of([&] { parse_weighted_split_paths(t, {"A: 1 0.5:0.5 /a"}); }), "is empty"));
    CHECK(contains(error_kind_of([&] { parse_weighted_split_paths(t, {"A: 1 0.5:1.2 /a"}); }), "ends after 1"));
    CHECK(contains(error_kind_of([&] { parse_weighted_split_paths(t, {"A: 1 -0.5:1 /a"}); }), "starts before 0"));
    // A group of one dataset: BMD never reads its weight as a number.
    CHECK(parse_weighted_split_paths(t, {"A: any 0:1 /a"})[0].weights[0] == "any");
}

TEST_CASE("the -path file: one line of double-quoted groups ending in a newline") {
    const auto dir = mds::test::scratch_dir("weighted-split-file");
    const std::string f = "--valid-weighted-split-paths-path";
    auto v = read_weighted_split_paths_file(f, write(dir, "ok.txt", "\"valid: 1 0:1 /a, 2 0:1 /b\" \"valid_a: 1 0:1 /a\"\n"));
    CHECK(v == std::vector<std::string>{"valid: 1 0:1 /a, 2 0:1 /b", "valid_a: 1 0:1 /a"});
    auto e = error_kind_of([&] { read_weighted_split_paths_file(f, write(dir, "two.txt", "\"a: 1 0:1 /a\"\n\"b: 1 0:1 /b\"\n")); });
    CHECK(contains(e, "usage: --valid-weighted-split-paths-path"));
    CHECK(contains(e, "two.txt: 2 lines"));
    CHECK(contains(error_kind_of([&] { read_weighted_split_paths_file(f, write(dir, "nl.txt", "\"a: 1 0:1 /a\"")); }),
                   "must start with '\"' and end with '\"' and a newline"));
    CHECK(contains(error_kind_of([&] { read_weighted_split_paths_file(f, write(dir, "q.txt", "a: 1 0:1 /a\n")); }),
                   "must start with"));
    CHECK(contains(error_kind_of([&] { read_weighted_split_paths_file(f, (dir / "missing.txt").string()); }),
                   "missing.txt: cannot open"));
}

TEST_CASE("get_split_by_range rounds half to even, as Python's round") {
    CHECK(get_split_by_range("0:0.5", 5, "x") == std::array<std::int64_t, 2>{0, 2});    // 2.5 -> 2
    CHECK(get_split_by_range("0.5:1", 7, "x") == std::array<std::int64_t, 2>{4, 7});    // 3.5 -> 4
    CHECK(get_split_by_range("0.95:1.0", 100, "x") == std::array<std::int64_t, 2>{95, 100});
    CHECK(get_split_by_range("0:0.950", 39, "x") == std::array<std::int64_t, 2>{0, 37});  // 37.05
    CHECK_THROWS_AS(get_split_by_range("0:1.5", 7, "x"), mds::UsageError);
}

TEST_CASE("a group's datasets are Mode 1's: one range is a split, several paths blend by weight") {
    const auto dir = mds::test::scratch_dir("weighted-split-data");
    const auto a = make_dataset(dir, "a", 40, 1), b = make_dataset(dir, "b", 30, 2);
    NumSamplesOptions ns;
    ns.train_iters = 20;
    ns.global_batch_size = 4;
    ns.eval_interval = 5;
    ns.eval_iters = 2;

    WeightedSplitOptions w;
    w.seq_length = 16;
    w.seed = 7;
    w.num_samples = ns;
    // Named "train" and "valid", the groups' index files have Mode 1's names: Mode 1 with the
    // same documents (split 9,1,0 of 40 and 30 documents = ranges 0:0.9 and 0.9:1) verifies them.
    w.groups[0] = parse_weighted_split_paths("--train-weighted-split-paths", {"train: 0.3 0:0.9 " + a + ", 0.7 0:0.9 " + b});
    w.groups[1] = parse_weighted_split_paths("--valid-weighted-split-paths",
                                             {"valid: 0.3 0.9:1 " + a + ", 0.7 0.9:1 " + b, "valid_a: 1 0.9:1 " + a});
    WeightedSplitDatasets ws(w);
    CHECK(ws.train_iters() == 20);
    CHECK(ws.num_samples() == std::array<std::int64_t, 3>{80, 40, 8});  // (20 // 5 + 1) * 2 * 4 validation samples
    REQUIRE(ws.groups(1).size() == 2);
    CHECK(ws.groups(0)[0].blended);
    CHECK(ws.groups(0)[0].members[0].doc_end == 36);  // round(0.9 * 40)
    CHECK(ws.groups(0)[0].members[1].doc_end == 27);  // round(0.9 * 30)
    CHECK(ws.groups(1)[1].name == "valid_a");
    CHECK_FALSE(ws.groups(1)[1].blended);
    CHECK(ws.groups(1)[1].members[0].num_samples == 40);  // no 1.005 surplus for a group of one
    CHECK(ws.groups(1)[0].members[0].num_samples == 13);  // ceil(40 * 0.3 * 1.005)

    GptDatasetsOptions m;
    m.data_path = {"0.3", a, "0.7", b};
    m.split = "9,1,0";
    m.seq_length = 16;
    m.seed = 7;
    m.num_samples = ns;
    m.verify = true;  // rebuilds every index in memory and compares it with the files Mode 2 wrote
    GptDatasets mode1(m);
    CHECK(mode1.summary().sizes[0] == ws.groups(0)[0].size);
    for (std::int64_t n = 0; n < 80; n += 7) CHECK(ws.sample(0, 0, n) == mode1.sample(0, n));
    for (std::int64_t n = 0; n < 40; n += 3) CHECK(ws.sample(1, 0, n) == mode1.sample(1, n));

    // A group of one path is that dataset's GPTDataset, unblended.
    GptDatasetsOptions one = m;
    one.data_path = {a};
    one.split = "9,1,0";
    auto w1 = w;
    w1.groups[1] = parse_weighted_split_paths("--valid-weighted-split-paths", {"valid: 1 0.9:1 " + a});
    WeightedSplitDatasets ws1(w1);
    GptDatasets single(one);
    for (std::int64_t n = 0; n < ws1.groups(1)[0].size; ++n) CHECK(ws1.sample(1, 0, n) == single.sample(1, n));

    CHECK(contains(error_kind_of([&] { (void)ws.sample(1, 1, ws.groups(1)[1].size); }), "out of range"));
    auto empty = w;
    empty.groups[1] = parse_weighted_split_paths("--valid-weighted-split-paths", {"tiny: 1 0.99:1 " + a});
    CHECK(contains(error_kind_of([&] { WeightedSplitDatasets x(empty); }), "documents [40, 40) of 40 is empty"));
    auto bad_weight = w;
    bad_weight.groups[0] = parse_weighted_split_paths("--train-weighted-split-paths", {"t: x 0:1 " + a + ", 1 0:1 " + b});
    CHECK(contains(error_kind_of([&] { WeightedSplitDatasets x(bad_weight); }), "usage: --train-weighted-split-paths group 't'"));
}
