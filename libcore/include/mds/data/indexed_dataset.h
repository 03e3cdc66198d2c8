// Megatron's MMapIndexedDataset: a `.bin` of token ids back to back and an `.idx` with the dtype,
// the per-sequence sizes and byte pointers and the document index (specs/data.md §1). The reader
// maps both files and checks every field before use: a truncated or corrupt `.idx` is an error
// naming the file, the field and the byte offset, never a crash.
#pragma once

#include <cstdint>
#include <cstring>  // memcpy
#include <span>
#include <string>
#include <vector>

#include "mds/util/files.h"

namespace mds::data {

// dtype codes of the `.idx` header (specs/data.md §1.4; code 6/7 are floats, unused for tokens).
enum class DType : std::uint8_t {
    UInt8 = 1, Int8 = 2, Int16 = 3, Int32 = 4, Int64 = 5, Float64 = 6, Double = 7, UInt16 = 8,
};

std::size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Megatron's best_fitting_dtype: uint16 when vocab_size < 65500, else int32.
DType dtype_for_vocab(std::uint64_t vocab_size);

constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::size_t kIndexHeaderBytes = 34;

std::string bin_path(const std::string& prefix);  // prefix + ".bin"
std::string idx_path(const std::string& prefix);  // prefix + ".idx"

// A little-endian array inside a mapped file. The `.idx` arrays start at offset 34, so they are
// not aligned for their type: elements are read with memcpy.
template <class T>
class UnalignedArray {
public:
    UnalignedArray() = default;
    UnalignedArray(const std::byte* p, std::size_t n) : p_(p), n_(n) {}
    T operator[](std::size_t i) const {
        T v;
        std::memcpy(&v, p_ + i * sizeof(T), sizeof(T));
        return v;
    }
    std::size_t size() const { return n_; }
    bool empty() const { return n_ == 0; }
    T back() const { return (*this)[n_ - 1]; }
    std::vector<T> to_vector() const {
        std::vector<T> v(n_);
        if (n_) std::memcpy(v.data(), p_, n_ * sizeof(T));
        return v;
    }

private:
    const std::byte* p_ = nullptr;
    std::size_t n_ = 0;
};

// Parsed, validated view of an `.idx` image; the arrays point into the image.
struct IndexView {
    DType dtype{};
    UnalignedArray<std::int32_t> sizes;     // tokens per sequence
    UnalignedArray<std::int64_t> pointers;  // byte offset of each sequence in .bin
    UnalignedArray<std::int64_t> doc_idx;   // sequence index where each document starts, then N
};

// Validates an `.idx` image (name used in messages). When `bin_bytes` is given (not UINT64_MAX),
// also checks that every sequence lies inside a `.bin` of that size.
IndexView parse_index(std::span<const std::byte> bytes, const std::string& name,
                      std::uint64_t bin_bytes = UINT64_MAX);

class IndexedDataset {
public:
    explicit IndexedDataset(const std::string& prefix);

    const std::string& prefix() const { return prefix_; }
    DType dtype() const { return index_.dtype; }
    std::size_t num_sequences() const { return index_.sizes.size(); }
    std::size_t num_documents() const { return index_.doc_idx.empty() ? 0 : index_.doc_idx.size() - 1; }
    const UnalignedArray<std::int32_t>& sizes() const { return index_.sizes; }
    const UnalignedArray<std::int64_t>& pointers() const { return index_.pointers; }
    const UnalignedArray<std::int64_t>& doc_idx() const { return index_.doc_idx; }
    std::uint64_t num_tokens() const;

    // Tokens [offset, offset+length) of sequence i, widened to int64 (length -1 = to the end).
    void get(std::size_t i, std::vector<std::int64_t>& out, std::size_t offset = 0, std::int64_t length = -1) const;
    // Appends the same, for assembling samples.
    void append(std::size_t i, std::vector<std::int64_t>& out, std::size_t offset = 0, std::int64_t length = -1) const;

private:
    std::string prefix_;
    MappedFile idx_;
    MappedFile bin_;
    IndexView index_;
};

}  // namespace mds::data
