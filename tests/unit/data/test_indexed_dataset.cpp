// MMapIndexedDataset (specs/data.md §1): builder/reader round trips, the exact bytes of §1.8, the
// reader's validation of every field (always mds::Error with the file name and byte offset), merging,
// and the dtype choice.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "mds/data/indexed_dataset.h"
#include "mds/data/indexed_dataset_builder.h"
#include "mds/util/error.h"
#include "test_support.h"

using mds::test::as_bytes;
using mds::test::slurp;
using mds::test::spit;

namespace fs = std::filesystem;
using mds::data::DType;
using mds::data::IndexedDataset;
using mds::data::IndexedDatasetBuilder;

namespace {

using Doc = std::vector<std::vector<std::int32_t>>;  // sequences of one document

std::string from_hex(std::string_view hex) {
    std::string out;
    int hi = -1;
    for (char c : hex) {
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) continue;
        if (hi < 0) {
            hi = v;
        } else {
            out += static_cast<char>(hi * 16 + v);
            hi = -1;
        }
    }
    return out;
}

void build(const std::string& prefix, DType dtype, const std::vector<Doc>& docs) {
    IndexedDatasetBuilder b(prefix, dtype);
    for (const auto& doc : docs) {
        for (const auto& seq : doc) b.add_item(seq);
        b.end_document();
    }
    b.finalize();
}

std::vector<Doc> random_docs(std::mt19937& rng, std::size_t n, std::int32_t max_id) {
    std::vector<Doc> docs(n);
    for (auto& d : docs) {
        std::size_t seqs = rng() % 5 == 0 ? 2 + rng() % 3 : 1;
        for (std::size_t s = 0; s < seqs; ++s) {
            std::vector<std::int32_t> ids(rng() % 50);
            for (auto& id : ids) id = static_cast<std::int32_t>(rng() % (static_cast<std::uint32_t>(max_id) + 1));
            d.push_back(ids);
        }
    }
    return docs;
}

template <class T>
void poke(std::string& image, std::size_t offset, T v) {
    std::memcpy(image.data() + offset, &v, sizeof v);
}

// parse_index must fail with the name and "byte <offset>" in the message; returns the message.
std::string parse_error(const std::string& image, const std::string& name = "test.idx",
                        std::uint64_t bin_bytes = UINT64_MAX) {
    try {
        (void)mds::data::parse_index(as_bytes(image), name, bin_bytes);
    } catch (const mds::Error& e) {
        std::string m = e.what();
        CHECK(m.find(name) != std::string::npos);
        CHECK(m.find("byte ") != std::string::npos);
        return m;
    }
    return "";
}

bool error_at(const std::string& image, std::uint64_t offset, std::uint64_t bin_bytes = UINT64_MAX) {
    std::string m = parse_error(image, "test.idx", bin_bytes);
    INFO("message: " << m);
    CHECK_FALSE(m.empty());
    return m.find("test.idx: byte " + std::to_string(offset) + ":") != std::string::npos;
}

}  // namespace

TEST_CASE("indexed_dataset: dtype table and dtype_for_vocab") {
    using mds::data::dtype_for_vocab;
    CHECK(dtype_for_vocab(0) == DType::UInt16);
    CHECK(dtype_for_vocab(50257) == DType::UInt16);
    CHECK(dtype_for_vocab(50304) == DType::UInt16);
    CHECK(dtype_for_vocab(65499) == DType::UInt16);
    CHECK(dtype_for_vocab(65500) == DType::Int32);  // 65500, not 65536
    CHECK(dtype_for_vocab(65536) == DType::Int32);
    CHECK(dtype_for_vocab(250880) == DType::Int32);
    CHECK(static_cast<int>(DType::UInt16) == 8);
    CHECK(static_cast<int>(DType::Int32) == 4);
    CHECK(mds::data::dtype_size(DType::UInt16) == 2);
    CHECK(mds::data::dtype_size(DType::Int32) == 4);
    CHECK(mds::data::dtype_size(DType::Int64) == 8);
    CHECK(mds::data::dtype_size(DType::UInt8) == 1);
    CHECK(std::string(mds::data::dtype_name(DType::UInt16)) == "uint16");
    CHECK(std::string(mds::data::dtype_name(DType::Int32)) == "int32");
    CHECK(mds::data::bin_path("a/b") == "a/b.bin");
    CHECK(mds::data::idx_path("a/b") == "a/b.idx");
}

TEST_CASE("indexed_dataset: the bytes of the §1.8 worked example") {
    auto dir = mds::test::scratch_dir("ds-worked");
    const std::string prefix = (dir / "P").string();
    build(prefix, DType::UInt16, {{{15496, 995, 50256}}, {{42672, 23484, 12, 31288, 0, 50256}}});
    const std::string idx = from_hex(
        "4d4d 4944 4944 5800 0001 0000 0000 0000"
        "0008 0200 0000 0000 0000 0300 0000 0000"
        "0000 0300 0000 0600 0000 0000 0000 0000"
        "0000 0600 0000 0000 0000 0000 0000 0000"
        "0000 0100 0000 0000 0000 0200 0000 0000"
        "0000");
    const std::string bin = from_hex("883c e303 50c4 b0a6 bc5b 0c00 387a 0000 50c4");
    CHECK(idx.size() == 82);
    CHECK(bin.size() == 18);
    CHECK(slurp(prefix + ".idx") == idx);
    CHECK(slurp(prefix + ".bin") == bin);
    IndexedDataset ds(prefix);
    CHECK(ds.dtype() == DType::UInt16);
    CHECK(ds.num_sequences() == 2);
    CHECK(ds.num_documents() == 2);
    CHECK(ds.num_tokens() == 9);
    std::vector<std::int64_t> v;
    ds.get(1, v);
    CHECK(v == std::vector<std::int64_t>{42672, 23484, 12, 31288, 0, 50256});
    fs::remove_all(dir);
}

TEST_CASE("indexed_dataset: builder/reader round trip") {
    auto dir = mds::test::scratch_dir("ds-roundtrip");
    std::mt19937 rng(42);
    for (DType dtype : {DType::UInt16, DType::Int32}) {
        INFO("dtype " << std::string(mds::data::dtype_name(dtype)));
        const std::int32_t max_id = dtype == DType::UInt16 ? 65535 : 2147483647;
        auto docs = random_docs(rng, 500, max_id);
        docs[0] = {{0, max_id, max_id - 1}};  // the extremes of the type (sequence 0)
        docs[1] = {{}};                       // a zero-length sequence is stored as such
        const std::string prefix = (dir / ("rt_" + std::string(mds::data::dtype_name(dtype)))).string();
        {
            IndexedDatasetBuilder b(prefix, dtype);
            std::uint64_t tokens = 0;
            for (const auto& doc : docs) {
                for (const auto& seq : doc) {
                    b.add_item(seq);
                    tokens += seq.size();
                }
                b.end_document();
            }
            CHECK(b.num_documents() == docs.size());
            CHECK(b.num_tokens() == tokens);
            // Nothing under the final names before finalize.
            CHECK_FALSE(fs::exists(prefix + ".bin"));
            CHECK_FALSE(fs::exists(prefix + ".idx"));
            b.finalize();
        }
        IndexedDataset ds(prefix);
        CHECK(ds.dtype() == dtype);
        CHECK(ds.prefix() == prefix);
        CHECK(ds.num_documents() == docs.size());
        std::size_t seq = 0;
        std::int64_t ptr = 0;
        const auto item = static_cast<std::int64_t>(mds::data::dtype_size(dtype));
        std::vector<std::int64_t> got;
        for (std::size_t d = 0; d < docs.size(); ++d) {
            CHECK(ds.doc_idx()[d] == static_cast<std::int64_t>(seq));
            for (const auto& ids : docs[d]) {
                REQUIRE(seq < ds.num_sequences());
                CHECK(ds.sizes()[seq] == static_cast<std::int32_t>(ids.size()));
                CHECK(ds.pointers()[seq] == ptr);
                ds.get(seq, got);
                CHECK(got == std::vector<std::int64_t>(ids.begin(), ids.end()));
                ptr += static_cast<std::int64_t>(ids.size()) * item;
                ++seq;
            }
        }
        CHECK(ds.doc_idx().back() == static_cast<std::int64_t>(seq));
        CHECK(ds.num_sequences() == seq);
        CHECK(static_cast<std::int64_t>(fs::file_size(prefix + ".bin")) == ptr);
        CHECK(fs::file_size(prefix + ".idx") == 34 + 12 * seq + 8 * (docs.size() + 1));
        CHECK(ds.sizes().to_vector().size() == seq);
        // Partial reads: offset and length, and append.
        ds.get(0, got, 1, 1);
        CHECK(got == std::vector<std::int64_t>{max_id});
        ds.get(0, got, 1);
        CHECK(got == std::vector<std::int64_t>{max_id, max_id - 1});
        ds.get(0, got, 3);
        CHECK(got.empty());
        ds.get(1, got);
        CHECK(got.empty());
        ds.append(0, got, 0, 1);
        ds.append(0, got, 2, 1);
        CHECK(got == std::vector<std::int64_t>{0, max_id - 1});
        CHECK_THROWS_AS(ds.get(ds.num_sequences(), got), mds::Error);
        CHECK_THROWS_AS(ds.get(0, got, 4), mds::Error);
        CHECK_THROWS_AS(ds.get(0, got, 1, 3), mds::Error);
    }
    fs::remove_all(dir);
}

TEST_CASE("indexed_dataset: ids that do not fit the dtype are refused, the builder stays consistent") {
    auto dir = mds::test::scratch_dir("ds-range");
    const std::string prefix = (dir / "r").string();
    {
        IndexedDatasetBuilder b(prefix, DType::UInt16);
        b.add_item(std::vector<std::int32_t>{1, 2});
        CHECK_THROWS_AS(b.add_item(std::vector<std::int32_t>{3, 65536}), mds::Error);
        CHECK_THROWS_AS(b.add_item(std::vector<std::int32_t>{-1}), mds::Error);
        b.end_document();
        b.finalize();
    }
    IndexedDataset ds(prefix);
    CHECK(ds.num_sequences() == 1);
    CHECK(fs::file_size(prefix + ".bin") == 4);
    fs::remove_all(dir);
}

TEST_CASE("indexed_dataset: an empty dataset is a 42-byte .idx and an empty .bin") {
    auto dir = mds::test::scratch_dir("ds-empty");
    const std::string prefix = (dir / "e").string();
    build(prefix, DType::UInt16, {});
    CHECK(fs::file_size(prefix + ".bin") == 0);
    const std::string idx = slurp(prefix + ".idx");
    CHECK(idx == from_hex("4d4d 4944 4944 5800 0001 0000 0000 0000 0008 0000 0000 0000 0000 0100 0000 0000"
                          "0000 0000 0000 0000 0000"));
    CHECK(idx.size() == 42);
    IndexedDataset ds(prefix);
    CHECK(ds.num_sequences() == 0);
    CHECK(ds.num_documents() == 0);
    CHECK(ds.num_tokens() == 0);
    fs::remove_all(dir);
}

TEST_CASE("indexed_dataset: parse_index rejects every truncation of a valid index") {
    auto dir = mds::test::scratch_dir("ds-trunc");
    const std::string prefix = (dir / "t").string();
    build(prefix, DType::UInt16, {{{1, 2, 3}}, {{4}, {5, 6}}, {{7, 8, 9, 10}}});
    const std::string image = slurp(prefix + ".idx");
    REQUIRE(image.size() == 34 + 12 * 4 + 8 * 4);
    CHECK_NOTHROW((void)mds::data::parse_index(as_bytes(image), "test.idx", 20));
    for (std::size_t len = 0; len < image.size(); ++len) {
        INFO("truncated to " << len << " bytes");
        CHECK_FALSE(parse_error(image.substr(0, len)).empty());
    }
    // The same through files: the message names the .idx path.
    const std::string bin = slurp(prefix + ".bin");
    for (std::size_t len : {std::size_t{0}, std::size_t{8}, std::size_t{33}, std::size_t{34}, std::size_t{50},
                            image.size() - 1}) {
        spit(prefix + ".idx", image.substr(0, len));
        try {
            IndexedDataset ds(prefix);
            FAIL_CHECK("no error at length " << len);
        } catch (const mds::Error& e) {
            CHECK(std::string(e.what()).find(prefix + ".idx") != std::string::npos);
        }
    }
    fs::remove_all(dir);
}

TEST_CASE("indexed_dataset: parse_index checks magic, version, dtype, counts, pointers, doc_idx") {
    auto dir = mds::test::scratch_dir("ds-fields");
    const std::string prefix = (dir / "f").string();
    // N = 4 sequences in D-1 = 3 documents.
    build(prefix, DType::UInt16, {{{1, 2, 3}}, {{4}, {5, 6}}, {{7, 8, 9, 10}}});
    const std::string good = slurp(prefix + ".idx");
    const std::size_t n = 4, d = 4, sizes_at = 34, ptr_at = 34 + 4 * n, doc_at = 34 + 12 * n;
    REQUIRE(good.size() == doc_at + 8 * d);

    SUBCASE("magic") {
        for (std::size_t i = 0; i < 9; ++i) {
            std::string img = good;
            img[i] = static_cast<char>(img[i] ^ 0x20);
            CHECK(error_at(img, 0));
        }
        std::string img = good;
        std::memcpy(img.data(), "TNTIDX\0\0", 8);
        CHECK(parse_error(img).find("TNTIDX") != std::string::npos);
    }
    SUBCASE("version") {
        for (std::uint64_t v : {std::uint64_t{0}, std::uint64_t{2}, std::uint64_t{1} << 56}) {
            std::string img = good;
            poke(img, 9, v);
            CHECK(error_at(img, 9));
        }
    }
    SUBCASE("dtype code") {
        for (int code : {0, 9, 200, 255}) {
            std::string img = good;
            img[17] = static_cast<char>(code);
            CHECK(error_at(img, 17));
        }
        // A valid code of another width makes the pointers inconsistent.
        std::string img = good;
        img[17] = 4;  // int32
        CHECK(error_at(img, ptr_at + 8));
    }
    SUBCASE("sequence and document counts") {
        std::string img = good;
        poke(img, 18, std::uint64_t{1} << 62);
        CHECK(error_at(img, 18));
        img = good;
        poke(img, 18, ~std::uint64_t{0});
        CHECK(error_at(img, 18));
        img = good;
        poke(img, 26, ~std::uint64_t{0});
        CHECK(error_at(img, 26));
        img = good;
        poke(img, 26, std::uint64_t{0});  // D = 0: the sizes no longer add up
        CHECK_FALSE(parse_error(img).empty());
        // Counts that fit but disagree with the file size.
        img = good;
        poke(img, 18, std::uint64_t{3});
        CHECK_FALSE(parse_error(img).empty());
        img = good;
        poke(img, 26, std::uint64_t{3});
        CHECK_FALSE(parse_error(img).empty());
        // Extra bytes at the end (other than megatron-core's N-byte modes array).
        CHECK_FALSE(parse_error(good + "x").empty());
        CHECK(parse_error(good + std::string(n, '\0')).empty());
        // An index with no documents at all (D = 0), sizes consistent.
        std::string empty_docs = good.substr(0, 34);
        poke(empty_docs, 18, std::uint64_t{0});
        poke(empty_docs, 26, std::uint64_t{0});
        CHECK(error_at(empty_docs, 26));
    }
    SUBCASE("sizes and pointers") {
        std::string img = good;
        poke(img, sizes_at + 4, std::int32_t{-1});
        CHECK(error_at(img, sizes_at + 4));
        img = good;
        poke(img, sizes_at + 4, std::int32_t{2});  // sequence 1 grows: pointer of sequence 2 is off
        CHECK(error_at(img, ptr_at + 16));
        img = good;
        poke(img, ptr_at, std::int64_t{2});
        CHECK(error_at(img, ptr_at));
        img = good;
        poke(img, ptr_at + 24, std::int64_t{-6});
        CHECK(error_at(img, ptr_at + 24));
        img = good;
        poke(img, ptr_at + 24, std::int64_t{1} << 62);
        CHECK(error_at(img, ptr_at + 24));
        // Sizes that describe more or fewer bytes than the .bin holds.
        CHECK(error_at(good, 34, 19));
        CHECK(error_at(good, 34, 21));
        CHECK(parse_error(good, "test.idx", 20).empty());
        img = good;
        poke(img, sizes_at + 12, std::int32_t{0x7FFFFFFF});  // the last sequence: only the .bin check sees it
        CHECK(error_at(img, 34, 20));
    }
    SUBCASE("document index") {
        std::string img = good;
        poke(img, doc_at, std::int64_t{1});  // must start at 0
        CHECK(error_at(img, doc_at));
        img = good;
        poke(img, doc_at + 16, std::int64_t{0});  // decreasing
        CHECK(error_at(img, doc_at + 16));
        img = good;
        poke(img, doc_at + 8, std::int64_t{5});  // past N
        CHECK(error_at(img, doc_at + 8));
        img = good;
        poke(img, doc_at + 8, std::int64_t{-1});
        CHECK(error_at(img, doc_at + 8));
        img = good;
        poke(img, doc_at + 24, std::int64_t{3});  // the last entry must be N
        CHECK(error_at(img, doc_at + 24));
        // Repeated entries (megatron-core's empty documents) are valid.
        img = good;
        poke(img, doc_at + 16, std::int64_t{1});
        CHECK(parse_error(img).empty());
    }
    fs::remove_all(dir);
}

TEST_CASE("indexed_dataset: random corruption is an error or a valid index, never a crash") {
    auto dir = mds::test::scratch_dir("ds-fuzz");
    const std::string prefix = (dir / "z").string();
    std::mt19937 rng(3);
    build(prefix, DType::UInt16, random_docs(rng, 30, 1000));
    const std::string good = slurp(prefix + ".idx");
    const std::string bin = slurp(prefix + ".bin");
    std::vector<std::int64_t> out;
    int accepted = 0;
    for (int iter = 0; iter < 20000; ++iter) {
        std::string img = good;
        int flips = 1 + static_cast<int>(rng() % 3);
        for (int k = 0; k < flips; ++k) {
            std::size_t pos = rng() % img.size();
            img[pos] = static_cast<char>(rng() % 4 == 0 ? 0xFF : rng() % 256);
        }
        if (rng() % 8 == 0) img.resize(rng() % img.size());
        try {
            auto view = mds::data::parse_index(as_bytes(img), "fuzz.idx", bin.size());
            ++accepted;
            // Whatever was accepted stays inside the .bin.
            std::uint64_t end = 0;
            for (std::size_t i = 0; i < view.sizes.size(); ++i)
                end = std::max<std::uint64_t>(end, static_cast<std::uint64_t>(view.pointers[i]) +
                                                       static_cast<std::uint64_t>(view.sizes[i]) *
                                                           mds::data::dtype_size(view.dtype));
            CHECK(end <= bin.size());
        } catch (const mds::Error& e) {
            std::string m = e.what();
            if (m.rfind("fuzz.idx: byte ", 0) != 0) {
                CHECK(m.rfind("fuzz.idx: byte ", 0) == 0);
                break;
            }
        }
    }
    MESSAGE(accepted << " of 20000 corrupted images were still valid indexes");
    fs::remove_all(dir);
}

TEST_CASE("indexed_dataset: .bin size mismatch and missing files name the file") {
    auto dir = mds::test::scratch_dir("ds-bin");
    const std::string prefix = (dir / "b").string();
    build(prefix, DType::Int32, {{{1, 2, 3}}, {{4, 5}}});
    const std::string bin = slurp(prefix + ".bin");
    auto message = [&] {
        try {
            IndexedDataset ds(prefix);
        } catch (const mds::Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK(message().empty());
    spit(prefix + ".bin", bin.substr(0, bin.size() - 1));
    CHECK(message().find(prefix + ".idx: byte 34:") != std::string::npos);
    spit(prefix + ".bin", bin + std::string(4, '\0'));
    CHECK(message().find(prefix + ".idx") != std::string::npos);
    fs::remove(prefix + ".bin");
    CHECK(message().find(prefix + ".bin") != std::string::npos);
    fs::remove(prefix + ".idx");
    CHECK(message().find(prefix + ".idx") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("indexed_dataset: merging equals one build over the concatenation") {
    auto dir = mds::test::scratch_dir("ds-merge");
    std::mt19937 rng(17);
    for (DType dtype : {DType::UInt16, DType::Int32}) {
        INFO("dtype " << std::string(mds::data::dtype_name(dtype)));
        std::vector<std::vector<Doc>> parts = {random_docs(rng, 100, 50000), {}, random_docs(rng, 1, 50000),
                                               random_docs(rng, 250, 50000)};
        std::vector<Doc> all;
        std::vector<std::string> prefixes;
        for (std::size_t i = 0; i < parts.size(); ++i) {
            prefixes.push_back((dir / ("part" + std::to_string(i))).string());
            build(prefixes.back(), dtype, parts[i]);
            all.insert(all.end(), parts[i].begin(), parts[i].end());
        }
        const std::string single = (dir / "single").string(), merged = (dir / "merged").string();
        build(single, dtype, all);
        mds::data::merge_datasets(prefixes, merged);
        CHECK(slurp(merged + ".bin") == slurp(single + ".bin"));
        CHECK(slurp(merged + ".idx") == slurp(single + ".idx"));
        // Builder-level merge mixed with new documents.
        const std::string mixed = (dir / "mixed").string();
        {
            IndexedDatasetBuilder b(mixed, dtype);
            for (const auto& seq : parts[0][0]) b.add_item(seq);
            b.end_document();
            b.merge(prefixes[3]);
            for (const auto& seq : parts[2][0]) b.add_item(seq);
            b.end_document();
            b.finalize();
        }
        std::vector<Doc> expect = {parts[0][0]};
        expect.insert(expect.end(), parts[3].begin(), parts[3].end());
        expect.push_back(parts[2][0]);
        const std::string expect_prefix = (dir / "expect").string();
        build(expect_prefix, dtype, expect);
        CHECK(slurp(mixed + ".bin") == slurp(expect_prefix + ".bin"));
        CHECK(slurp(mixed + ".idx") == slurp(expect_prefix + ".idx"));
        // Merging a single dataset copies it.
        mds::data::merge_datasets({single}, merged);
        CHECK(slurp(merged + ".idx") == slurp(single + ".idx"));
    }
    fs::remove_all(dir);
}

TEST_CASE("indexed_dataset: merge errors") {
    auto dir = mds::test::scratch_dir("ds-merge-errors");
    const std::string a = (dir / "a").string(), b = (dir / "b").string(), out = (dir / "out").string();
    build(a, DType::UInt16, {{{1, 2}}});
    build(b, DType::Int32, {{{3}}});
    auto message = [](const std::function<void()>& fn) {
        try {
            fn();
        } catch (const mds::Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK(message([&] { mds::data::merge_datasets({a, b}, out); }).find(b + ".idx") != std::string::npos);
    CHECK_FALSE(message([&] { mds::data::merge_datasets({}, out); }).empty());
    CHECK_FALSE(message([&] { mds::data::merge_datasets({a, a}, a); }).empty());
    const std::string missing = (dir / "missing").string();
    CHECK(message([&] { mds::data::merge_datasets({a, missing}, out); }).find(missing) != std::string::npos);
    // Failed merges leave nothing behind, and the inputs are untouched.
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"a.bin", "a.idx", "b.bin", "b.idx"});
    CHECK(IndexedDataset(a).num_sequences() == 1);
    fs::remove_all(dir);
}

TEST_CASE("indexed_dataset: an unfinished builder leaves nothing; finalize replaces old files") {
    auto dir = mds::test::scratch_dir("ds-atomic");
    const std::string prefix = (dir / "x").string();
    {
        IndexedDatasetBuilder b(prefix, DType::UInt16);
        b.add_item(std::vector<std::int32_t>{1, 2, 3});
        b.end_document();
    }
    CHECK(fs::is_empty(dir));
    build(prefix, DType::UInt16, {{{1}}});
    build(prefix, DType::UInt16, {{{7, 8}}, {{9}}});
    IndexedDataset ds(prefix);
    CHECK(ds.num_sequences() == 2);
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"x.bin", "x.idx"});
    fs::remove_all(dir);
}
