// safetensors files (Hugging Face's weight container): an 8-byte little-endian header length, a
// JSON header {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the raw little-endian tensor bytes. Used for Hugging Face exports and for exchanging
// weights with the Python cross-checks. Plain bytes: no LibTorch here.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "mds/util/files.h"  // MappedFile, AtomicOutput

namespace mds::ckpt {

enum class DType : std::uint8_t { F64, F32, F16, BF16, I64, I32, I16, I8, U8, Bool };

const char* dtype_name(DType t);  // "F32", "BF16", ... as safetensors spells them
std::size_t dtype_size(DType t);
// Parses a safetensors dtype name; throws mds::Error naming `where` for an unknown one.
DType parse_dtype(const std::string& name, const std::string& where);
// One F32, F16 or BF16 element as a float, and a float stored as one (rounded to nearest even, as
// torch's casts round).
float load_float(DType t, const std::byte* p);
void store_float(DType t, float f, std::byte* p);

struct TensorView {
    std::string name;
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    std::span<const std::byte> bytes;  // into the mapped file
    std::int64_t numel() const;
};

// A mapped, fully validated safetensors file: header JSON syntax, dtypes, shapes × dtype size ==
// byte ranges, ranges in order, non-overlapping and covering the data exactly (the rules of the
// reference implementation). Errors name the file and the tensor or byte offset.
class SafetensorsFile {
public:
    explicit SafetensorsFile(const std::string& path);

    const std::string& path() const { return file_.path(); }
    const std::vector<TensorView>& tensors() const { return tensors_; }  // in file order
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // The tensor called `name`, or an error naming the file.
    const TensorView& at(const std::string& name) const;
    bool contains(const std::string& name) const;

private:
    MappedFile file_;
    std::vector<TensorView> tensors_;
    std::map<std::string, std::size_t> index_;
    std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
    std::string name;
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    const void* data = nullptr;  // numel × dtype_size bytes, little-endian
};

// Writes `tensors` atomically (temporary + rename). Tensors are laid out in the order given;
// the header is padded with spaces to a multiple of 8 bytes as the reference writer does.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The streaming form: the header is written from names, dtypes and shapes, then write_data(i, out)
// is called once per tensor, in order, and must write exactly its numel × dtype size bytes. Peak
// memory is what the callback holds, not the file.
struct TensorEntry {
    std::string name;
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
};
// The bytes a safetensors file starts with (the 8-byte length, then the JSON header padded with
// spaces to a multiple of 8) and where each tensor's data begins in the file: for writers that fill
// the data themselves (mds-ckpt-to-hf's workers write tensors at their offsets in parallel).
// Errors (a duplicate or reserved name, a shape too large) name `path`.
struct SafetensorsLayout {
    std::string header;
    std::vector<std::uint64_t> offsets;  // file offsets, one per tensor
    std::uint64_t file_size = 0;
};
SafetensorsLayout safetensors_layout(const std::string& path, const std::vector<TensorEntry>& tensors,
                                     const std::map<std::string, std::string>& metadata);
void write_safetensors_streamed(const std::string& path, const std::vector<TensorEntry>& tensors,
                                const std::map<std::string, std::string>& metadata,
                                const std::function<void(std::size_t index, AtomicOutput& out)>& write_data);

}  // namespace mds::ckpt
