#include "mds/data/indexed_dataset.h"

#include <cstring>

#include "mds/util/error.h"

namespace mds::data {

std::size_t dtype_size(DType t) {
    switch (t) {
        case DType::UInt8: case DType::Int8: return 1;
        case DType::Int16: case DType::UInt16: return 2;
        case DType::Int32: return 4;
        case DType::Int64: case DType::Float64: case DType::Double: return 8;
    }
    return 0;
}

const char* dtype_name(DType t) {
    switch (t) {
        case DType::UInt8: return "uint8";
        case DType::Int8: return "int8";
        case DType::Int16: return "int16";
        case DType::Int32: return "int32";
        case DType::Int64: return "int64";
        case DType::Float64: return "float64";
        case DType::Double: return "double";
        case DType::UInt16: return "uint16";
    }
    return "?";
}

DType dtype_for_vocab(std::uint64_t vocab_size) { return vocab_size < 65500 ? DType::UInt16 : DType::Int32; }

std::string bin_path(const std::string& prefix) { return prefix + ".bin"; }
std::string idx_path(const std::string& prefix) { return prefix + ".idx"; }

namespace {
template <class T>
T load(const std::byte* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
}  // namespace

IndexView parse_index(std::span<const std::byte> bytes, const std::string& name, std::uint64_t bin_bytes) {
    auto fail = [&](std::uint64_t offset, const std::string& what) -> void {
        throw Error(name + ": byte " + std::to_string(offset) + ": " + what);
    };
    const std::uint64_t total = bytes.size();
    if (total < kIndexHeaderBytes)
        fail(total, "truncated index: " + std::to_string(total) + " bytes, the header alone is " +
                        std::to_string(kIndexHeaderBytes));
    const std::byte* p = bytes.data();
    if (std::memcmp(p, kIndexMagic, sizeof kIndexMagic) != 0) {
        if (std::memcmp(p, "TNTIDX\0\0", 8) == 0)
            fail(0, "this is a lazy/cached-format index (magic TNTIDX); only the mmap format is supported");
        fail(0, "not a Megatron mmap index: magic is not MMIDIDX\\0\\0");
    }
    auto version = load<std::uint64_t>(p + 9);
    if (version != 1) fail(9, "unsupported index version " + std::to_string(version) + ", expected 1");
    auto code = static_cast<std::uint8_t>(p[17]);
    if (code < 1 || code > 8) fail(17, "unknown dtype code " + std::to_string(code) + ", expected 1..8");
    IndexView v;
    v.dtype = static_cast<DType>(code);
    auto n = load<std::uint64_t>(p + 18);
    auto d = load<std::uint64_t>(p + 26);
    // Sizes: 34 + 12 N + 8 D, checked without overflow.
    if (n > (total - kIndexHeaderBytes) / 12)
        fail(18, "sequence count " + std::to_string(n) + " does not fit in a " + std::to_string(total) + "-byte index");
    std::uint64_t after_seq = kIndexHeaderBytes + 12 * n;
    if (d > (total - after_seq) / 8)
        fail(26, "document count " + std::to_string(d) + " does not fit in a " + std::to_string(total) + "-byte index");
    std::uint64_t expect = after_seq + 8 * d;
    if (expect != total && expect + n != total)  // + N: megatron-core's optional multimodal modes array
        fail(expect, "index size mismatch: header says " + std::to_string(expect) + " bytes, file has " +
                         std::to_string(total));
    v.sizes = UnalignedArray<std::int32_t>(p + kIndexHeaderBytes, n);
    v.pointers = UnalignedArray<std::int64_t>(p + kIndexHeaderBytes + 4 * n, n);
    v.doc_idx = UnalignedArray<std::int64_t>(p + after_seq, d);
    if (d == 0) fail(26, "document index is empty, expected at least [0]");
    const std::uint64_t item = dtype_size(v.dtype);
    std::uint64_t expected_ptr = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
        std::int32_t s = v.sizes[i];
        if (s < 0) fail(kIndexHeaderBytes + 4 * i, "negative size " + std::to_string(s) + " of sequence " + std::to_string(i));
        std::int64_t ptr = v.pointers[i];
        if (ptr < 0 || static_cast<std::uint64_t>(ptr) != expected_ptr)
            fail(kIndexHeaderBytes + 4 * n + 8 * i, "pointer of sequence " + std::to_string(i) + " is " +
                     std::to_string(ptr) + ", expected " + std::to_string(expected_ptr) + " (sum of previous sizes)");
        expected_ptr += static_cast<std::uint64_t>(s) * item;
    }
    if (bin_bytes != UINT64_MAX && expected_ptr != bin_bytes)
        fail(kIndexHeaderBytes, "the index describes " + std::to_string(expected_ptr) + " bytes of tokens but the .bin has " +
                                    std::to_string(bin_bytes));
    std::int64_t prev = -1;
    for (std::uint64_t i = 0; i < d; ++i) {
        std::int64_t di = v.doc_idx[i];
        if ((i == 0 && di != 0) || di < prev || static_cast<std::uint64_t>(di) > n)
            fail(after_seq + 8 * i, "document index entry " + std::to_string(i) + " is " + std::to_string(di) +
                                        " (must start at 0, not decrease, and stay <= " + std::to_string(n) + ")");
        prev = di;
    }
    if (static_cast<std::uint64_t>(v.doc_idx.back()) != n)
        fail(after_seq + 8 * (d - 1), "last document index entry is " + std::to_string(v.doc_idx.back()) +
                                          ", expected the sequence count " + std::to_string(n));
    return v;
}

IndexedDataset::IndexedDataset(const std::string& prefix)
    : prefix_(prefix), idx_(idx_path(prefix)), bin_(bin_path(prefix)) {
    index_ = parse_index(idx_.bytes(), idx_.path(), bin_.size());
}

std::uint64_t IndexedDataset::num_tokens() const {
    return bin_.size() / dtype_size(index_.dtype);
}

void IndexedDataset::get(std::size_t i, std::vector<std::int64_t>& out, std::size_t offset, std::int64_t length) const {
    out.clear();
    append(i, out, offset, length);
}

void IndexedDataset::append(std::size_t i, std::vector<std::int64_t>& out, std::size_t offset, std::int64_t length) const {
    if (i >= num_sequences())
        throw Error(prefix_ + ": sequence " + std::to_string(i) + " out of range (" + std::to_string(num_sequences()) + " sequences)");
    auto size = static_cast<std::size_t>(index_.sizes[i]);
    if (offset > size) throw Error(prefix_ + ": offset " + std::to_string(offset) + " past sequence " + std::to_string(i));
    std::size_t n = length < 0 ? size - offset : static_cast<std::size_t>(length);
    if (offset + n > size)
        throw Error(prefix_ + ": range [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
                    ") past the end of sequence " + std::to_string(i) + " (" + std::to_string(size) + " tokens)");
    const std::size_t item = dtype_size(index_.dtype);
    const std::byte* p = bin_.data() + index_.pointers[i] + offset * item;
    std::size_t base = out.size();
    out.resize(base + n);
    for (std::size_t k = 0; k < n; ++k, p += item) {
        std::int64_t v = 0;
        switch (index_.dtype) {
            case DType::UInt8: v = load<std::uint8_t>(p); break;
            case DType::Int8: v = load<std::int8_t>(p); break;
            case DType::Int16: v = load<std::int16_t>(p); break;
            case DType::UInt16: v = load<std::uint16_t>(p); break;
            case DType::Int32: v = load<std::int32_t>(p); break;
            case DType::Int64: v = load<std::int64_t>(p); break;
            case DType::Float64: case DType::Double:
                throw Error(prefix_ + ": dtype " + dtype_name(index_.dtype) + " holds no token ids");
        }
        out[base + k] = v;
    }
}

}  // namespace mds::data
