// torch.save files (.pt) without LibTorch and without executing anything: the zip container
// (zip_archive.h) holding data.pkl (pickle.h) and one record per storage (data/<key>), as
// specs/checkpoints.md §2 describes. Reading maps the file; tensors are views into it. Writing
// streams storages one by one, so a checkpoint never has to fit in memory twice.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mds/ckpt/pickle.h"
#include "mds/ckpt/safetensors.h"  // DType
#include "mds/ckpt/zip_archive.h"

namespace mds::ckpt {

// The storage class torch.save names for a dtype (torch.FloatStorage, torch.BFloat16Storage, ...)
// and back; an unknown class is an error naming it.
const char* storage_class_name(DType t);
DType dtype_of_storage_class(const std::string& name, const std::string& where);

// A tensor of a torch.save file: _rebuild_tensor_v2(storage, offset, size, stride, ...).
// Its data is checked when first used: bytes() and gather() recompute the CRC-32 of the whole
// storage record and compare it with the zip's, once per storage of a file (a flipped bit in a
// checkpoint is an error naming the file and the tensor, never a silently different weight).
struct TorchTensor {
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape, stride;
    std::int64_t storage_offset = 0;         // in elements
    std::string storage_key;                 // data/<key>
    std::string location;                    // "cpu", "cuda:3", ...
    std::span<const std::byte> storage;      // the whole storage record, not yet verified
    std::string where;                       // "<file>: <tensor>", for errors
    std::uint32_t storage_crc32 = 0;         // as the zip's central directory records it
    std::atomic<bool>* storage_verified = nullptr;  // owned by the TorchFile; null: no check (verify off)
    std::int64_t numel() const;
    bool contiguous() const;                 // row-major strides
    // Checks the storage's CRC-32 unless it was checked before (or checks are off); an error
    // "<file>: tensor '<name>': storage data/<key> is damaged: CRC-32 ..." otherwise.
    void verify() const;
    // The tensor's bytes when it is contiguous (a view into the file, verified); an error otherwise.
    std::span<const std::byte> bytes() const;
    // The tensor's elements in row-major order, copied (any strides; verified).
    std::vector<std::byte> gather() const;
};

// Rebuilds `value` with every tensor (a _rebuild_tensor_v2 object) replaced by fn(tensor, path);
// containers and objects on the way are copied, everything else is shared. Paths name where a
// tensor sits: ".key" for str keys of dicts, OrderedDicts and Namespaces, "[i]" for list and tuple
// items and int keys, ".@args" / ".@state" inside other objects.
using TensorMapper = std::function<PyValue(const PyValue& tensor, const std::string& path)>;
PyValue map_tensors(const PyValue& value, const TensorMapper& fn, const std::string& path = "");

class TorchFile {
public:
    // Opens and validates the zip, reads data.pkl. Errors name the file. With `verify` (the
    // default) the CRC-32 of data.pkl is checked now and each storage's when a tensor's data is
    // first used (TorchTensor::verify); without it nothing is recomputed (the tools' --no-verify).
    explicit TorchFile(const std::string& path, bool verify = true);
    const std::string& path() const { return zip_.path(); }
    const PyValue& root() const { return root_; }
    const ZipArchive& zip() const { return zip_; }
    bool verifies() const { return verified_ != nullptr; }

    static bool is_tensor(const PyValue& v);
    // Resolves a _rebuild_tensor_v2 object against the file's storages, checking that the view
    // (offset, sizes, strides) lies inside its storage and that the record has the storage's size.
    // `what` names it in errors ("layer_03/..."). Reads no tensor data: that is checked on use.
    TorchTensor tensor(const PyValue& v, const std::string& what = "tensor") const;
    // Where the tensors using storage data/<key> sit in root() (map_tensors paths), for messages
    // about a damaged record.
    std::vector<std::string> tensors_in_storage(const std::string& key) const;

private:
    ZipArchive zip_;
    PyValue root_;
    // One flag per zip entry: its CRC-32 was checked. Heap-allocated, so that tensors keep a valid
    // pointer when the TorchFile moves; null when verification is off.
    std::unique_ptr<std::atomic<bool>[]> verified_;
};

// Builds a torch.save file: tensors are registered first (each gets its own storage, offset 0,
// contiguous, as DeepSpeed's cloned tensors are), then the object tree referencing them is
// written with the storages streamed from callbacks.
class TorchSaveWriter {
public:
    // Writes the bytes of one storage; called once, in order, during finish().
    using StorageSource = std::function<void(TorchZipWriter& out)>;

    // `location` is what torch.load will map from (e.g. "cpu"). The archive name is the file's
    // basename without extension, as torch.save(obj, path) does.
    explicit TorchSaveWriter(std::string path, std::string location = "cpu");

    // A tensor of `shape` whose `nbytes` = numel × dtype size bytes come from `source` (which must
    // write exactly that many with out.write()). Returns the value to put in the object tree.
    PyValue add_tensor(DType dtype, const std::vector<std::int64_t>& shape, StorageSource source);
    // The same for bytes already in memory (copied only when written; must outlive finish()).
    PyValue add_tensor(DType dtype, const std::vector<std::int64_t>& shape, std::span<const std::byte> bytes);

    // Writes data.pkl for `root`, then every storage, then the torch records; renames into place.
    void finish(const PyValue& root);

private:
    struct Storage {
        std::string key;
        std::uint64_t nbytes = 0;
        StorageSource source;
    };
    std::string path_, location_;
    std::vector<Storage> storages_;
};

}  // namespace mds::ckpt
