// .npy files as Megatron's GPTDataset caches its index mappings with np.save (specs/data.md §4.6):
// a writer producing the exact bytes of numpy >= 1.14 (format 1.0, header padded with spaces to a
// 64-byte boundary) for 1-D and 2-D int32/uint32/int64 arrays, and a reader that parses the header
// (formats 1.0-3.0, any header length) and maps the data read-only.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mds/data/indexed_dataset.h"  // UnalignedArray
#include "mds/util/files.h"            // MappedFile

namespace mds::data {

enum class NpyDType : std::uint8_t { Int32, UInt32, Int64 };

const char* npy_descr(NpyDType t);      // "<i4", "<u4", "<i8"
const char* npy_dtype_name(NpyDType t);  // "int32", "uint32", "int64"
std::size_t npy_itemsize(NpyDType t);

template <class T>
constexpr NpyDType npy_dtype_of();
template <>
constexpr NpyDType npy_dtype_of<std::int32_t>() { return NpyDType::Int32; }
template <>
constexpr NpyDType npy_dtype_of<std::uint32_t>() { return NpyDType::UInt32; }
template <>
constexpr NpyDType npy_dtype_of<std::int64_t>() { return NpyDType::Int64; }

// Everything np.save writes before the data: magic, version 1.0, header length, the dict
// `{'descr': ..., 'fortran_order': False, 'shape': (...), }`, space padding, '\n'.
std::string npy_header_bytes(NpyDType dtype, std::span<const std::uint64_t> shape);

struct NpyHeader {
    NpyDType dtype{};
    bool fortran_order = false;
    std::vector<std::uint64_t> shape;
    std::size_t data_offset = 0;  // bytes before the data
    std::uint64_t count() const;  // product of shape (1 for a 0-d array)
};

// Parses and validates the header of an .npy image; `name` is used in messages. Checks the magic,
// version, header length, dict syntax and keys, that the dtype is one of NpyDType, that a
// multi-dimensional array is C-ordered, and that the file holds exactly count() items.
NpyHeader parse_npy_header(std::span<const std::byte> bytes, const std::string& name);

// Writes an array atomically (temporary + rename, util/files.h).
void write_npy(const std::string& path, NpyDType dtype, std::span<const std::uint64_t> shape, const void* data);

template <class T>
void write_npy(const std::string& path, std::span<const T> data, std::span<const std::uint64_t> shape) {
    write_npy(path, npy_dtype_of<T>(), shape, data.data());
}
template <class T>
void write_npy_1d(const std::string& path, const std::vector<T>& data) {
    const std::uint64_t shape[1] = {data.size()};
    write_npy(path, npy_dtype_of<T>(), shape, data.data());
}

// A mapped, validated .npy file.
class NpyFile {
public:
    explicit NpyFile(const std::string& path);

    const std::string& path() const { return file_.path(); }
    const NpyHeader& header() const { return header_; }
    NpyDType dtype() const { return header_.dtype; }
    const std::vector<std::uint64_t>& shape() const { return header_.shape; }

    // The data as a flat array of T; an error naming the file when the dtype is not T's.
    template <class T>
    UnalignedArray<T> array() const {
        check_dtype(npy_dtype_of<T>());
        return UnalignedArray<T>(file_.data() + header_.data_offset, static_cast<std::size_t>(header_.count()));
    }
    // Checks dtype and shape against what the caller expects (messages name the file).
    void expect(NpyDType dtype, std::span<const std::uint64_t> shape) const;
    void check_dtype(NpyDType dtype) const;

private:
    MappedFile file_;
    NpyHeader header_;
};

std::string npy_shape_repr(std::span<const std::uint64_t> shape);  // Python repr: "(6,)", "(40721, 2)"

}  // namespace mds::data
