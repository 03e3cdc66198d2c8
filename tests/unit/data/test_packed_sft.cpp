// The decoder-packed SFT index and packing (packed_sft_index.h, packed_sft_dataset.h,
// packed_sft_datasets.h): BMD's greedy packing worked out by hand for edge cases (rows carried over
// epoch boundaries, an example exactly a row long, examples longer than a row, none that fits),
// pack_samples' docstring example, the cache files and their checks, the pair's checks, and the
// dataset builder's usage errors. tests/crosscheck/test_packed_sft.py compares with BMD itself.
#include <doctest/doctest.h>

#include <filesystem>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "mds/data/indexed_dataset_builder.h"
#include "mds/data/numpy_random.h"
#include "mds/data/packed_sft_datasets.h"
#include "mds/util/error.h"
#include "test_support.h"

using mds::test::error_of;

using namespace mds::data;
using I64 = std::vector<std::int64_t>;

namespace {

// A pair whose example k has prompt {1000 + k, ...} and answer {2000 + k, ...} of the given lengths.
void write_pair(const std::string& prefix, const std::vector<int>& prompt_len, const std::vector<int>& answer_len) {
    IndexedDatasetBuilder in(sft_inputs_prefix(prefix), DType::UInt16), tg(sft_targets_prefix(prefix), DType::UInt16);
    for (std::size_t k = 0; k < prompt_len.size(); ++k) {
        std::vector<std::int32_t> p(static_cast<std::size_t>(prompt_len[k]), 1000 + static_cast<int>(k));
        in.add_item(p);
        in.end_document();
    }
    for (std::size_t k = 0; k < answer_len.size(); ++k) {
        std::vector<std::int32_t> a(static_cast<std::size_t>(answer_len[k]), 2000 + static_cast<int>(k));
        tg.add_item(a);
        tg.end_document();
    }
    in.finalize();
    tg.finalize();
}

I64 rows_of(const PackedSftIndex& ix) { return ix.sample_idx; }

}  // namespace

TEST_CASE("two examples per row: the unfinished row of an epoch carries into the next") {
    // Ten examples of 3 tokens, rows of 7: a row takes two (6 <= 7), the third overflows it. The
    // first epoch ends with [8, 10) open; the next example (position 10) closes it.
    const I64 tokens(10, 3);
    const PackedSftIndex ix = build_packed_sft_index(tokens, 4, 7, 1234567890);
    CHECK(ix.epochs == 2);
    CHECK(ix.rows() == 9);
    CHECK(rows_of(ix) == I64{0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14, 16, 16, 18});
    // Epoch 1 is numpy's RandomState(1234567890).permutation(10) (numpy's test vector).
    REQUIRE(ix.shuffle_idx.size() == 20);
    CHECK(I64(ix.shuffle_idx.begin(), ix.shuffle_idx.begin() + 10) == I64{9, 0, 8, 5, 1, 3, 4, 7, 6, 2});
    // Epoch 2 is the next shuffle of the same generator.
    NumpyRandomState rng(1234567890);
    rng.permutation(10);
    const auto second = rng.permutation(10);
    CHECK(I64(ix.shuffle_idx.begin() + 10, ix.shuffle_idx.end()) == second);
    CHECK(ix.skips == 0);
    CHECK(ix.too_long.empty());
    // num_samples = 3: the first epoch's four rows are enough (BMD loops while rows <= num_samples).
    CHECK(build_packed_sft_index(tokens, 3, 7, 1).epochs == 1);
    CHECK(build_packed_sft_index(tokens, 0, 7, 1).rows() == 4);
}

TEST_CASE("an example exactly a row long fits; one token more does not") {
    const PackedSftIndex ix = build_packed_sft_index(I64{7, 7, 7}, 2, 7, 5);
    CHECK(ix.epochs == 2);
    CHECK(rows_of(ix) == I64{0, 1, 1, 2, 2, 3, 3, 4, 4, 5});
    CHECK(ix.too_long.empty());
    const PackedSftIndex longer = build_packed_sft_index(I64{8, 7, 7}, 0, 7, 5);
    CHECK(longer.too_long == I64{0});
}

TEST_CASE("examples longer than a row are skipped every epoch; rows hold only what fits") {
    // Example 0 (20 tokens) never fits in 7; example 1 (3 tokens) does: every row holds copies of
    // example 1 only (two when it ends one epoch and starts the next).
    const I64 tokens{20, 3};
    for (std::uint32_t seed : {1u, 2u, 3u, 1234u}) {
        const PackedSftIndex ix = build_packed_sft_index(tokens, 30, 7, seed);
        CHECK(ix.rows() == 31);
        CHECK(ix.too_long == I64{0});
        CHECK(ix.skips == ix.epochs);  // once per epoch
        for (std::int64_t r = 0; r < ix.rows(); ++r) {
            const auto b = ix.sample_idx[static_cast<std::size_t>(2 * r)], e = ix.sample_idx[static_cast<std::size_t>(2 * r + 1)];
            CHECK(e > b);
            CHECK(e - b <= 2);
            for (auto j = b; j < e; ++j) CHECK(ix.shuffle_idx[static_cast<std::size_t>(j)] == 1);
        }
    }
    // A skipped example between two that fit ends the row before it: [3, 20, 3] in that order (the
    // only orders of 3 elements are permutations; check the invariant on all rows of many seeds).
    for (std::uint32_t seed = 0; seed < 50; ++seed) {
        const I64 t{3, 20, 3, 2};
        const PackedSftIndex ix = build_packed_sft_index(t, 10, 7, seed);
        std::set<std::int64_t> packed;
        for (std::int64_t r = 0; r < ix.rows(); ++r) {
            std::int64_t sum = 0;
            for (auto j = ix.sample_idx[static_cast<std::size_t>(2 * r)]; j < ix.sample_idx[static_cast<std::size_t>(2 * r + 1)]; ++j) {
                const auto ex = ix.shuffle_idx[static_cast<std::size_t>(j)];
                CHECK(ex != 1);
                sum += t[static_cast<std::size_t>(ex)];
            }
            CHECK(sum <= 7);
            // Greedy: the example after the row (when it exists and fits) would not have fitted.
            const auto next = ix.sample_idx[static_cast<std::size_t>(2 * r + 1)];
            const auto ex = ix.shuffle_idx[static_cast<std::size_t>(next)];
            if (ex != 1) CHECK(sum + t[static_cast<std::size_t>(ex)] > 7);
        }
    }
}

TEST_CASE("no example that fits, or none at all: an error where BMD would loop for ever") {
    CHECK(error_of([] { build_packed_sft_index(I64{9, 8, 12}, 1, 7, 1); }).find("none of the 3 examples fits in a row of 7") !=
          std::string::npos);
    CHECK(error_of([] { build_packed_sft_index(I64{}, 1, 7, 1); }).find("no examples") != std::string::npos);
}

TEST_CASE("pack_samples: BMD's docstring example, padding and the overflow error") {
    PackedSample s = start_packed_sample(7, 99);
    std::int64_t used = 0;
    pack_example(s, used, 1, I64{6, 7}, I64{8});
    pack_example(s, used, 2, I64{3, 4}, I64{5});
    CHECK(s.tokens == I64{6, 7, 8, 3, 4, 5, 99});
    CHECK(s.segment_ids == I64{1, 1, 1, 2, 2, 2, 0});
    CHECK(s.is_input == std::vector<std::uint8_t>{1, 1, 0, 1, 1, 0, 0});
    CHECK(used == 6);
    CHECK(error_of([&] { pack_example(s, used, 3, I64{1}, I64{2}); }).find("do not fit in one row") != std::string::npos);
    // A full row has no padding.
    PackedSample f = start_packed_sample(3, 0);
    std::int64_t u = 0;
    pack_example(f, u, 1, I64{5}, I64{6, 7});
    CHECK(f.segment_ids == I64{1, 1, 1});
}

TEST_CASE("cache files: BMD's names, a round trip, and the checks on load") {
    const auto dir = mds::test::scratch_dir("packed-sft-cache");
    const std::string prefix = (dir / "d").string();
    const auto paths = packed_sft_cache_paths(prefix, "train", 4, 1234);
    CHECK(paths.sample_idx == prefix + "_train_indexmap_4ns_1234s_decoder_packed_batch_idx.npy");
    CHECK(paths.shuffle_idx == prefix + "_train_indexmap_4ns_1234s_decoder_packed_shuffle_idx.npy");
    CHECK(packed_sft_cache_paths(prefix, "valid", 4, 1, "_docs5-9").sample_idx ==
          prefix + "_valid_indexmap_4ns_1s_docs5-9_decoder_packed_batch_idx.npy");
    const I64 tokens(10, 3);
    const PackedSftIndex ix = build_packed_sft_index(tokens, 4, 7, 1234);
    CHECK_FALSE(packed_sft_cache_complete(paths));
    save_packed_sft_index(paths, ix);
    CHECK(packed_sft_cache_complete(paths));
    {
        const PackedSftIndexFiles files(paths, tokens, 4, 7);
        CHECK(files.view().rows() == 9);
        CHECK(files.view().row_begin(8) == 16);
        CHECK(files.view().example(3) == ix.shuffle_idx[3]);
        verify_packed_sft_index(paths, files.view(), ix);
        const PackedSftIndex other = build_packed_sft_index(tokens, 4, 7, 99);
        CHECK(error_of([&] { verify_packed_sft_index(paths, files.view(), other); }).find("a fresh build gives") !=
              std::string::npos);
    }
    // Rows made for 7 tokens read with rows of 5: refused, naming the file and the row.
    const std::string stale = error_of([&] { PackedSftIndexFiles(paths, tokens, 4, 5); });
    CHECK(stale.find(paths.sample_idx + ": row 0 packs 6 tokens, more than the 5") != std::string::npos);
    CHECK(stale.find("longer --seq-length") != std::string::npos);
    // Fewer rows than the name promises; other data (more examples than the ids allow).
    CHECK(error_of([&] { PackedSftIndexFiles(paths, tokens, 9, 7); }).find("9 rows, expected more than the 9") !=
          std::string::npos);
    CHECK(error_of([&] { PackedSftIndexFiles(paths, I64(7, 3), 4, 7); }).find("shape is (20,)") != std::string::npos);
    CHECK(error_of([&] { PackedSftIndexFiles(paths, I64(5, 3), 4, 7); }).find("not an example index below 5") !=
          std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE("the pair: aligned, no empty prompt or answer, errors name the file and the example") {
    const auto dir = mds::test::scratch_dir("packed-sft-pair");
    const std::string ok = (dir / "ok").string();
    write_pair(ok, {1, 2, 3}, {2, 2, 1});
    const SftPairDataset pair(ok);
    CHECK(pair.size() == 3);
    CHECK(I64(pair.example_tokens().begin(), pair.example_tokens().end()) == I64{3, 4, 4});
    I64 p, a;
    pair.read(1, p, a);
    CHECK(p == I64{1001, 1001});
    CHECK(a == I64{2001, 2001});

    const std::string uneven = (dir / "uneven").string();
    write_pair(uneven, {1, 2, 3}, {2, 2});
    const std::string e1 = error_of([&] { SftPairDataset x(uneven); });
    CHECK(e1.find(uneven + "_inputs_document.idx holds 3 examples and " + uneven + "_targets_document.idx holds 2") !=
          std::string::npos);
    const std::string empty = (dir / "empty").string();
    write_pair(empty, {1, 2, 3}, {2, 0, 1});
    CHECK(error_of([&] { SftPairDataset x(empty); }).find(empty + "_targets_document.idx: example 1 has an empty answer") !=
          std::string::npos);
    CHECK(error_of([&] { SftPairDataset x((dir / "missing").string()); }).find("_inputs_document") != std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE("a packed dataset: rows of the pair's examples; BMD's split numbering or the split's own documents") {
    const auto dir = mds::test::scratch_dir("packed-sft-dataset");
    const std::string prefix = (dir / "p").string();
    write_pair(prefix, std::vector<int>(10, 1), std::vector<int>(10, 2));
    const SftPairDataset pair(prefix);
    PackedSftDatasetConfig c;
    c.name = "train";
    c.doc_begin = 0;
    c.doc_end = 10;
    c.num_samples = 4;
    c.seq_length = 6;  // rows of 7, as in the first test case
    c.seed = 1234567890;
    c.pad_token = 7;
    const PackedSftDataset ds(pair, c);
    CHECK(ds.status() == PackedIndexStatus::Built);
    CHECK(ds.size() == 9);
    CHECK(ds.epochs() == 2);
    const PackedSample s = ds.get(0);  // examples 9 and 0 (the permutation's first two)
    CHECK(s.tokens == I64{1009, 2009, 2009, 1000, 2000, 2000, 7});
    CHECK(s.segment_ids == I64{1, 1, 1, 2, 2, 2, 0});
    CHECK(s.is_input == std::vector<std::uint8_t>{1, 0, 0, 1, 0, 0, 0});
    CHECK(error_of([&] { ds.get(9); }).find("sample 9 is out of range (9 samples)") != std::string::npos);
    const PackedSftDataset again(pair, c);
    CHECK(again.status() == PackedIndexStatus::Existing);
    CHECK(again.get(4).tokens == ds.get(4).tokens);

    // A split of documents [5, 10): BMD reads examples 0..4; read_split_documents reads 5..9 under its own name.
    c.name = "valid";
    c.doc_begin = 5;
    const PackedSftDataset bmd(pair, c);
    CHECK(bmd.first_example() == 0);
    CHECK(bmd.files().sample_idx == prefix + "_valid_indexmap_4ns_1234567890s_decoder_packed_batch_idx.npy");
    for (std::int64_t i = 0; i < bmd.size(); ++i)
        for (auto t : bmd.get(i).tokens) CHECK((t == 7 || t % 1000 < 5));
    c.read_split_documents = true;
    const PackedSftDataset own(pair, c);
    CHECK(own.first_example() == 5);
    CHECK(own.files().sample_idx == prefix + "_valid_indexmap_4ns_1234567890s_docs5-10_decoder_packed_batch_idx.npy");
    for (std::int64_t i = 0; i < own.size(); ++i)
        for (auto t : own.get(i).tokens) CHECK((t == 7 || t % 1000 >= 5));
    c.doc_end = 11;
    CHECK(error_of([&] { PackedSftDataset x(pair, c); }).find("are not a non-empty range of its 10 examples") !=
          std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE("the datasets builder: --split groups, BMD's numbering warning, usage errors") {
    const auto dir = mds::test::scratch_dir("packed-sft-datasets");
    const std::string a = (dir / "a").string(), b = (dir / "b").string();
    write_pair(a, std::vector<int>(40, 2), std::vector<int>(40, 1));
    write_pair(b, std::vector<int>(3, 2), std::vector<int>(3, 1));
    PackedSftDatasetsOptions o;
    o.data_path = {a};
    o.split = "80,10,10";
    o.seq_length = 8;
    o.pad_token = 0;
    o.num_samples.train_samples = 20;
    o.num_samples.global_batch_size = 2;
    o.num_samples.eval_interval = 5;
    o.num_samples.eval_iters = 1;
    const PackedSftDatasets ds(o);
    CHECK(ds.num_samples() == std::array<std::int64_t, 3>{20, 6, 2});
    REQUIRE(ds.groups(0).size() == 1);
    REQUIRE(ds.groups(1).size() == 1);
    CHECK(ds.groups(1)[0].name == "valid");
    CHECK(ds.groups(1)[0].members[0].doc_begin == 32);
    CHECK(ds.groups(1)[0].members[0].first_example == 0);
    CHECK(ds.train_sample(0).tokens.size() == 9);
    CHECK(ds.size(0) > 20);
    REQUIRE(ds.warnings().size() == 2);  // valid [32, 36) and test [36, 40)
    CHECK(ds.warnings()[0].find("reads examples [0, 4) instead") != std::string::npos);
    CHECK(format_summary(ds).find("valid 'valid'") != std::string::npos);

    auto usage = [&](PackedSftDatasetsOptions x) {
        try {
            PackedSftDatasets d(x);
        } catch (const mds::UsageError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    PackedSftDatasetsOptions no_pad = o;
    no_pad.pad_token = -1;
    CHECK(usage(no_pad).find("pad token") != std::string::npos);
    PackedSftDatasetsOptions no_data = o;
    no_data.data_path.clear();
    CHECK(usage(no_data).find("no fine-tuning data") != std::string::npos);
    PackedSftDatasetsOptions no_seq = o;
    no_seq.seq_length = 0;
    CHECK(usage(no_seq).find("--seq-length") != std::string::npos);
    // Blended, with a split empty for b (3 examples: test gets none) but not for a: BMD's BlendableDataset fails.
    PackedSftDatasetsOptions blend = o;
    blend.data_path = {"1", a, "1", b};
    CHECK(error_of([&] { PackedSftDatasets d(blend); }).find("empty for some datasets but not all") != std::string::npos);
    std::filesystem::remove_all(dir);
}
