// Fuzzes mds::data::parse_index (data/indexed_dataset.h) on arbitrary `.idx` images.
// Invariants: only mds::Error escapes, with or without a `.bin` size; an image rejected without a
// size is rejected with any size; on success every array lies inside the image (the input is
// copied to an exact-size heap block, so AddressSanitizer sees any read past it), the document
// index runs from 0 to N without decreasing, every sequence lies inside a `.bin` of the size the
// index describes (checked against a heap block of that size) and the parse with that size
// succeeds, one byte more fails; IndexedDataset over real files reads back the same tokens.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "mds/data/indexed_dataset.h"

namespace {

using mds::data::DType;

std::int64_t load_token(DType t, const std::byte* p) {
    auto get = [p](auto v) {
        std::memcpy(&v, p, sizeof v);
        return static_cast<std::int64_t>(v);
    };
    switch (t) {
        case DType::UInt8: return get(std::uint8_t{});
        case DType::Int8: return get(std::int8_t{});
        case DType::Int16: return get(std::int16_t{});
        case DType::UInt16: return get(std::uint16_t{});
        case DType::Int32: return get(std::int32_t{});
        case DType::Int64: case DType::Float64: case DType::Double: return get(std::int64_t{});
    }
    return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::vector<std::byte> image(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
    const std::span<const std::byte> bytes(image.data(), image.size());
    mds::data::IndexView v;
    const bool ok = mds::fuzz::only_mds_errors([&] { v = mds::data::parse_index(bytes, "fuzz.idx"); });
    if (!ok) {
        for (std::uint64_t bin : {std::uint64_t{0}, std::uint64_t{size}})
            MDS_FUZZ_CHECK(!mds::fuzz::only_mds_errors([&] { mds::data::parse_index(bytes, "fuzz.idx", bin); }));
        return 0;
    }

    const std::size_t n = v.sizes.size(), d = v.doc_idx.size();
    MDS_FUZZ_CHECK(v.pointers.size() == n);
    MDS_FUZZ_CHECK(mds::data::kIndexHeaderBytes + 12 * n + 8 * d <= size);
    const std::vector<std::int32_t> sizes = v.sizes.to_vector();
    const std::vector<std::int64_t> pointers = v.pointers.to_vector();
    const std::vector<std::int64_t> doc_idx = v.doc_idx.to_vector();
    MDS_FUZZ_CHECK(d >= 1 && doc_idx.front() == 0 && doc_idx.back() == static_cast<std::int64_t>(n));
    for (std::size_t i = 1; i < d; ++i) MDS_FUZZ_CHECK(doc_idx[i - 1] <= doc_idx[i]);

    const std::uint64_t item = mds::data::dtype_size(v.dtype);
    MDS_FUZZ_CHECK(item > 0);
    std::uint64_t bin_bytes = 0;
    for (std::size_t i = 0; i < n; ++i) {
        MDS_FUZZ_CHECK(sizes[i] >= 0 && pointers[i] >= 0);
        MDS_FUZZ_CHECK(static_cast<std::uint64_t>(pointers[i]) == bin_bytes);
        bin_bytes += static_cast<std::uint64_t>(sizes[i]) * item;
    }
    MDS_FUZZ_CHECK(mds::fuzz::only_mds_errors([&] { mds::data::parse_index(bytes, "fuzz.idx", bin_bytes); }));
    MDS_FUZZ_CHECK(!mds::fuzz::only_mds_errors([&] { mds::data::parse_index(bytes, "fuzz.idx", bin_bytes + 1); }));
    if (bin_bytes > (std::uint64_t{1} << 16)) return 0;

    // Every token of every sequence, through the parsed arrays, from an exact-size .bin block.
    std::vector<std::byte> bin(bin_bytes);
    for (std::size_t k = 0; k < bin.size(); ++k) bin[k] = static_cast<std::byte>(k * 37 + 11);
    std::vector<std::vector<std::int64_t>> tokens(n);
    for (std::size_t i = 0; i < n; ++i) {
        const std::byte* p = bin.data() + v.pointers[i];
        for (std::int32_t k = 0; k < v.sizes[i]; ++k, p += item) tokens[i].push_back(load_token(v.dtype, p));
    }

    // The same through IndexedDataset, which maps the files.
    static const std::string prefix = mds::fuzz::scratch_path("ds");
    mds::fuzz::write_bytes(mds::data::idx_path(prefix), image.data(), image.size());
    mds::fuzz::write_bytes(mds::data::bin_path(prefix), bin.data(), bin.size());
    const bool float_type = v.dtype == DType::Float64 || v.dtype == DType::Double;
    MDS_FUZZ_CHECK(mds::fuzz::only_mds_errors([&] {
        mds::data::IndexedDataset ds(prefix);
        MDS_FUZZ_CHECK(ds.num_sequences() == n && ds.num_documents() == d - 1);
        std::vector<std::int64_t> got;
        for (std::size_t i = 0; i < n; ++i) {
            bool read = mds::fuzz::only_mds_errors([&] { ds.get(i, got); });
            MDS_FUZZ_CHECK(read == (!float_type || sizes[i] == 0));  // floats hold no token ids
            if (read) MDS_FUZZ_CHECK(got == tokens[i]);
            const auto len = static_cast<std::size_t>(sizes[i]);
            MDS_FUZZ_CHECK(!mds::fuzz::only_mds_errors([&] { ds.get(i, got, len + 1); }));
            MDS_FUZZ_CHECK(!mds::fuzz::only_mds_errors([&] { ds.get(i, got, 0, static_cast<std::int64_t>(len) + 1); }));
        }
        MDS_FUZZ_CHECK(!mds::fuzz::only_mds_errors([&] { ds.get(n, got); }));
    }));
    return 0;
}
