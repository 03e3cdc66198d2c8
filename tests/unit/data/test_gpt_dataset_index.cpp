// GPT sample index (specs/data.md §4): split, sample counts, the three mappings, cache files and
// sample reading, against the worked examples of §4.2 and §4.10 (checked with numpy and
// megatron-core's helpers).
#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include "mds/data/gpt_dataset_index.h"
#include "mds/util/error.h"
#include "mds/util/files.h"
#include "test_support.h"

using namespace mds::data;
using V4 = std::array<std::int64_t, 4>;

TEST_CASE("split examples (§4.2)") {
    CHECK(get_train_valid_test_split("949,50,1", 1000) == V4{0, 949, 999, 1000});
    CHECK(get_train_valid_test_split("949,50,1", 10) == V4{0, 10, 10, 10});
    CHECK(get_train_valid_test_split("969, 30, 1", 123456) == V4{0, 119629, 123333, 123456});
    CHECK(get_train_valid_test_split("90/5/5", 11) == V4{0, 9, 10, 11});
    CHECK(get_train_valid_test_split("1", 7) == V4{0, 7, 7, 7});
    CHECK(get_train_valid_test_split("98,2", 100) == V4{0, 98, 100, 100});
    // Python round() is half to even: 0.5 * 5 = 2.5 -> 2, and 0.5 * 7 = 3.5 -> 4.
    CHECK(get_train_valid_test_split("1,1", 5) == V4{0, 3, 5, 5});  // [0, 2, 4, 4] corrected by diff -1
    CHECK(get_train_valid_test_split("1,1", 7) == V4{0, 3, 7, 7});  // [0, 4, 8, 8] corrected by diff +1
    CHECK_THROWS_AS(get_train_valid_test_split("0,0,0", 10), mds::Error);
    CHECK_THROWS_AS(get_train_valid_test_split("9a,1", 10), mds::Error);
    CHECK_THROWS_AS(get_train_valid_test_split("90,,5", 10), mds::Error);
}

TEST_CASE("sample counts (§4.1)") {
    NumSamplesOptions o;
    o.train_iters = 1000;
    o.global_batch_size = 16;
    CHECK(train_valid_test_num_samples(o) == std::array<std::int64_t, 3>{16000, 2 * 100 * 16, 100 * 16});
    o.eval_interval = 100;
    o.eval_iters = 5;
    CHECK(train_valid_test_num_samples(o) == std::array<std::int64_t, 3>{16000, 11 * 5 * 16, 5 * 16});
    NumSamplesOptions s;
    s.train_samples = 1000;
    s.global_batch_size = 32;  // train_iters = 31
    s.eval_interval = 10;
    s.eval_iters = 2;
    CHECK(train_valid_test_num_samples(s) == std::array<std::int64_t, 3>{1000, 4 * 2 * 32, 2 * 32});
    // Ramp-up 16 -> 32 by 16 over 100 samples: batches of 16 while consumed <= 100 (7 iterations,
    // 112 samples), then (1000 - 112) // 32 = 27 more.
    s.rampup_batch_size = std::array<std::int64_t, 3>{16, 16, 100};
    CHECK(train_iters_from_samples(s) == 7 + 27);
    NumSamplesOptions bad;
    bad.global_batch_size = 8;
    CHECK_THROWS_AS(train_valid_test_num_samples(bad), mds::UsageError);
}

TEST_CASE("num_epochs is the smallest E with (E*T - 1) // S >= n") {
    for (std::int64_t t : {2, 3, 25, 1000})
        for (std::int32_t s : {2, 4, 7})
            for (std::int64_t n : {0, 1, 5, 12, 100, 1001}) {
                std::int32_t e = 0;
                std::int64_t tot = 0;
                do {
                    ++e;
                    tot += t;
                } while ((tot - 1) / s < n);
                CHECK(gpt_num_epochs(t, s, n) == e);
            }
}

namespace {
const std::vector<std::int32_t> kToySizes = {5, 3, 7, 4, 6};

std::vector<std::int32_t> rows(std::initializer_list<std::pair<int, int>> r) {
    std::vector<std::int32_t> v;
    for (auto [a, b] : r) {
        v.push_back(a);
        v.push_back(b);
    }
    return v;
}

// Sequence k holds the tokens 100*k, 100*k+1, ...
void toy_reader(std::size_t seq, std::size_t offset, std::int64_t length, std::vector<std::int64_t>& out) {
    const std::size_t n = length < 0 ? static_cast<std::size_t>(kToySizes[seq]) - offset : static_cast<std::size_t>(length);
    REQUIRE(offset + n <= static_cast<std::size_t>(kToySizes[seq]));
    for (std::size_t i = 0; i < n; ++i) out.push_back(static_cast<std::int64_t>(100 * seq + offset + i));
}
}  // namespace

TEST_CASE("toy example, num_samples 4 (§4.10)") {
    IndexPlan p = plan_index_mappings(kToySizes, 0, 5, 4, 4, "toy");
    CHECK(p.tokens_per_epoch == 25);
    CHECK(p.num_epochs == 1);
    CHECK_FALSE(p.separate_last_epoch);
    IndexMappings m = build_index_mappings(kToySizes, p, 1234);
    CHECK(m.doc_idx == std::vector<std::int32_t>{4, 0, 1, 2, 3});
    CHECK(m.sample_idx == rows({{0, 0}, {0, 4}, {1, 2}, {2, 1}, {3, 2}, {3, 6}, {4, 3}}));
    CHECK(m.shuffle_idx == std::vector<std::int64_t>{5, 2, 3, 1, 0, 4});
    std::vector<std::uint32_t> storage;
    SampleIndexView v = view_of(m, storage);
    CHECK(v.size() == 6);
    // dataset[0] = sequence 2 tokens [6:7] ++ sequence 3 tokens [0:4]
    CHECK(read_gpt_sample(v, 0, toy_reader) == std::vector<std::int64_t>{206, 300, 301, 302, 303});
    // Every sample has S+1 tokens and shares its last token with the next sample in flat order.
    for (std::size_t i = 0; i < v.size(); ++i) CHECK(read_gpt_sample(v, i, toy_reader).size() == 5);
    CHECK_THROWS_AS(read_gpt_sample(v, 6, toy_reader), mds::Error);
}

TEST_CASE("toy example, num_samples 12 (§4.10)") {
    IndexPlan p = plan_index_mappings(kToySizes, 0, 5, 12, 4, "toy");
    CHECK(p.num_epochs == 2);
    CHECK(p.samples_from_epochs_minus_one == 6);
    CHECK(p.last_epoch_num_samples == 6);
    CHECK(p.samples_per_epoch == 6);
    CHECK_FALSE(p.separate_last_epoch);  // 6 < int(0.95 * 6) = 5 is false
    IndexMappings m = build_index_mappings(kToySizes, p, 1234);
    CHECK(m.doc_idx == std::vector<std::int32_t>{2, 2, 4, 1, 0, 3, 4, 0, 1, 3});
    CHECK(m.sample_idx == rows({{0, 0}, {0, 4}, {1, 1}, {1, 5}, {2, 2}, {3, 0}, {4, 1}, {5, 0}, {6, 0}, {6, 4}, {7, 2},
                                {8, 1}, {9, 2}}));
    CHECK(m.shuffle_idx == std::vector<std::int64_t>{3, 11, 2, 1, 7, 5, 4, 0, 8, 6, 10, 9});
}

TEST_CASE("separate last epoch draws the shuffles in BS order") {
    // sizes of 10 tokens, S = 4: T = 50 per epoch of 5 documents, 12 samples per epoch.
    std::vector<std::int32_t> sizes(5, 10);
    IndexPlan p = plan_index_mappings(sizes, 0, 5, 26, 4, "sep");
    CHECK(p.num_epochs == 3);
    CHECK(p.samples_from_epochs_minus_one == 24);
    CHECK(p.last_epoch_num_samples == 2);
    CHECK(p.separate_last_epoch);
    IndexMappings m = build_index_mappings(sizes, p, 99);
    NumpyRandomState rng(99);
    std::vector<std::int32_t> first(10), last(5);
    for (int k = 0; k < 10; ++k) first[static_cast<std::size_t>(k)] = k % 5;
    std::iota(last.begin(), last.end(), 0);
    rng.shuffle(first);
    rng.shuffle(last);
    first.insert(first.end(), last.begin(), last.end());
    CHECK(m.doc_idx == first);
    std::vector<std::int64_t> a(24), b(13);
    std::iota(a.begin(), a.end(), 0);
    std::iota(b.begin(), b.end(), 24);
    rng.shuffle(a);
    rng.shuffle(b);
    a.insert(a.end(), b.begin(), b.end());
    CHECK(m.shuffle_idx == a);
    CHECK(p.total_samples() == 37);
}

TEST_CASE("the BS assertion last_epoch_num_samples <= per is an error") {
    // Search small (T, S, n) for a case where the last epoch must give one sample more than an epoch
    // holds (spec §4.3 has one on real data: T=58031, S=512, n=4080).
    bool found = false;
    for (std::int32_t t = 2; t < 40 && !found; ++t)
        for (std::int32_t s = 2; s < 12 && !found; ++s)
            for (std::int64_t n = 1; n < 60 && !found; ++n) {
                std::vector<std::int32_t> sizes = {t};
                std::int32_t e = gpt_num_epochs(t, s, n);
                if (e < 2) continue;
                std::int64_t last = n - ((static_cast<std::int64_t>(e) - 1) * t - 1) / s, per = (t - 1) / s;
                if (last <= per) continue;
                found = true;
                CHECK_THROWS_WITH_AS(plan_index_mappings(sizes, 0, 1, n, s, "P (valid)"),
                                     doctest::Contains("last epoch number of samples exceeded max value"), mds::Error);
            }
    CHECK(found);
    // The spec's case: only T matters, so one sequence of 58031 tokens stands for the 50 documents.
    std::vector<std::int32_t> golden_valid = {58031};
    CHECK_THROWS_WITH_AS(plan_index_mappings(golden_valid, 0, 1, 4080, 512, "P (valid)"),
                         doctest::Contains("provide 114 samples while an epoch holds only 113"), mds::Error);
    CHECK(plan_index_mappings(golden_valid, 0, 1, 1200, 512, "P (valid)").num_epochs == 11);
}

TEST_CASE("plan input checks") {
    CHECK_THROWS_AS(plan_index_mappings(kToySizes, 0, 6, 4, 4, "x"), mds::Error);   // past the end
    CHECK_THROWS_AS(plan_index_mappings(kToySizes, 2, 2, 4, 4, "x"), mds::Error);   // empty
    CHECK_THROWS_AS(plan_index_mappings(kToySizes, 0, 5, 4, 1, "x"), mds::Error);   // seq_length 1
    std::vector<std::int32_t> zeros = {0, 0, 1};
    CHECK_THROWS_WITH_AS(plan_index_mappings(zeros, 0, 3, 4, 4, "x"), doctest::Contains("never ends"), mds::Error);
}

TEST_CASE("zero-length sequences are skipped by build_sample_idx") {
    std::vector<std::int32_t> sizes = {3, 0, 0, 4, 0, 2};
    std::vector<std::int32_t> doc_idx = {0, 1, 2, 3, 4, 5};
    auto s = build_sample_idx(sizes, doc_idx, 2, 1, 9);
    // flat tokens: seq0 [0..3), seq3 [0..4), seq5 [0..2); samples start every 2 tokens
    CHECK(s == rows({{0, 0}, {0, 2}, {3, 1}, {3, 3}, {5, 1}}));
}

TEST_CASE("shuffle dtype switches to int64 at 2^32 - 2 samples") {
    IndexPlan p;
    p.seq_length = 2;
    p.num_epochs = 1;
    p.tokens_per_epoch = 2 * 4294967293LL + 1;  // total = 4294967293
    CHECK(p.shuffle_dtype() == NpyDType::UInt32);
    p.tokens_per_epoch = 2 * 4294967294LL + 1;
    CHECK(p.shuffle_dtype() == NpyDType::Int64);
}

TEST_CASE("cache file names (§4.6)") {
    auto p = index_cache_paths("/d/meg-gpt2_text_document", "train", 40000, 512, 1234);
    CHECK(p.doc_idx == "/d/meg-gpt2_text_document_train_indexmap_40000ns_512sl_1234s_doc_idx.npy");
    CHECK(p.sample_idx == "/d/meg-gpt2_text_document_train_indexmap_40000ns_512sl_1234s_sample_idx.npy");
    CHECK(p.shuffle_idx == "/d/meg-gpt2_text_document_train_indexmap_40000ns_512sl_1234s_shuffle_idx.npy");
}

TEST_CASE("save, load, validate and verify the cache files") {
    auto dir = mds::test::scratch_dir("gpt-index");
    auto paths = index_cache_paths((dir / "toy").string(), "train", 12, 4, 1234);
    CHECK_FALSE(index_cache_complete(paths));
    IndexPlan p = plan_index_mappings(kToySizes, 0, 5, 12, 4, "toy");
    IndexMappings m = build_index_mappings(kToySizes, p, 1234);
    save_index_mappings(paths, m);
    CHECK(index_cache_complete(paths));
    CHECK(mds::file_size(paths.doc_idx) == 128 + 10 * 4);
    CHECK(mds::file_size(paths.sample_idx) == 128 + 13 * 2 * 4);
    CHECK(mds::file_size(paths.shuffle_idx) == 128 + 12 * 4);
    IndexFiles f(paths, p, kToySizes);
    CHECK(f.view().size() == 12);
    CHECK_FALSE(f.view().shuffle_wide);
    std::vector<std::uint32_t> storage;
    for (std::size_t i = 0; i < 12; ++i)
        CHECK(read_gpt_sample(f.view(), i, toy_reader) == read_gpt_sample(view_of(m, storage), i, toy_reader));
    verify_index_files(paths, f.view(), m);
    IndexMappings other = build_index_mappings(kToySizes, p, 4321);
    CHECK_THROWS_WITH_AS(verify_index_files(paths, f.view(), other), doctest::Contains("a fresh build gives"),
                         mds::Error);
    // A plan with another sample count does not match the files' shapes.
    IndexPlan q = plan_index_mappings(kToySizes, 0, 5, 4, 4, "toy");
    CHECK_THROWS_WITH_AS(IndexFiles(paths, q, kToySizes), doctest::Contains("shape is (10,), expected (5,)"),
                         mds::Error);
    // Out-of-range values are caught.
    std::vector<std::int32_t> bad_doc = m.doc_idx;
    bad_doc[3] = 7;
    write_npy_1d(paths.doc_idx, bad_doc);
    CHECK_THROWS_WITH_AS(IndexFiles(paths, p, kToySizes), doctest::Contains("element 3 is 7"), mds::Error);
}

TEST_CASE("split: negative, non-finite and all-zero proportions are usage errors naming --split") {
    // Megatron asserts only sum > 0: "100,-50,50" gives train [0, 100), valid [100, 50), test [50, 100),
    // test documents that are training documents. mds-sample-index and mds-train refuse it.
    const auto message = [](const char* split) -> std::string {
        try {
            (void)mds::data::parse_split(split);
        } catch (const mds::UsageError& e) {
            return e.what();
        }
        return "no error";
    };
    CHECK(message("100,-50,50") == "--split '100,-50,50': the valid proportion is negative; each must be 0 or more");
    CHECK(message("-1,2,0") == "--split '-1,2,0': the train proportion is negative; each must be 0 or more");
    CHECK(message("1,1,-1e-300").find("test proportion is negative") != std::string::npos);
    for (const char* bad : {"nan,1,1", "1,inf,1", "-inf,1,1", "1e400,1,1", "NaN", "Infinity"})
        CHECK(message(bad).find("is not a finite number") != std::string::npos);
    CHECK(message("0,0,0") == "--split '0,0,0': the proportions must add up to more than 0");
    CHECK(message("0") == "--split '0': the proportions must add up to more than 0");
    CHECK(message("1e308,1e308,0").find("add up to more than a double holds") != std::string::npos);
    CHECK_THROWS_AS(get_train_valid_test_split("100,-50,50", 100), mds::UsageError);
    // What Megatron accepts and means stays accepted: signs, whitespace, a fourth part ignored, -0.
    CHECK(mds::data::parse_split(" +949 , 50 ,1 ") == std::array<double, 3>{949, 50, 1});
    CHECK(mds::data::parse_split("98,2,0,5") == std::array<double, 3>{98, 2, 0});
    CHECK(get_train_valid_test_split("-0,1,0", 10) == V4{0, 0, 10, 10});
}

TEST_CASE("gpt_sample_source: the pieces of each sample are its tokens (mds-sample-text's origins)") {
    IndexPlan p = plan_index_mappings(kToySizes, 0, 5, 12, 4, "toy");  // 2 epochs
    IndexMappings m = build_index_mappings(kToySizes, p, 1234);
    std::vector<std::uint32_t> storage;
    SampleIndexView v = view_of(m, storage);
    // dataset[0] of the one-epoch toy is sequence 2 [6, 7) + sequence 3 [0, 4); here shuffle_idx[0] = 3:
    // sample_idx rows 3 and 4 are (1, 5) and (2, 2): doc_idx[1] = 2 from token 5, then doc_idx[2] = 4 to token 2.
    const GptSampleSource s0 = gpt_sample_source(v, 0, kToySizes);
    CHECK(s0.shuffled == 3);
    REQUIRE(s0.pieces.size() == 2);
    CHECK(s0.pieces[0].document == 2);
    CHECK(s0.pieces[0].begin == 5);
    CHECK(s0.pieces[0].end == 7);
    CHECK(s0.pieces[1].document == 4);
    CHECK(s0.pieces[1].begin == 0);
    CHECK(s0.pieces[1].end == 3);
    for (std::size_t i = 0; i < v.size(); ++i) {
        const GptSampleSource s = gpt_sample_source(v, i, kToySizes);
        std::vector<std::int64_t> tokens;
        for (const auto& piece : s.pieces)
            toy_reader(static_cast<std::size_t>(piece.document), static_cast<std::size_t>(piece.begin),
                       piece.end - piece.begin, tokens);
        CHECK(tokens == read_gpt_sample(v, i, toy_reader));
    }
    CHECK_THROWS_AS(gpt_sample_source(v, v.size(), kToySizes), mds::Error);
}
