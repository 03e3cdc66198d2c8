// A torch.save file (specs/checkpoints.md §2) written in three steps: tensors declared, the object
// tree pickled, then every storage streamed in declaration order, in pieces of any size. Unlike
// TorchSaveWriter (torch_file.h), which pulls each storage from a callback inside finish(), the
// caller pushes the bytes, so several output files can be fed from one tensor held in memory: the
// reshaper writes one global tensor's TP shards (or its DP fragments) into all of them before it
// moves on to the next tensor.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mds/ckpt/pickle.h"
#include "mds/ckpt/safetensors.h"  // DType
#include "mds/ckpt/zip_archive.h"

namespace mds::ckpt {

class TorchStreamWriter {
public:
    // Creates the temporary output; `location` is the device torch.load will map from ("cpu").
    explicit TorchStreamWriter(std::string path, std::string location = "cpu");

    // A contiguous tensor with its own storage; returns the value to place in the object tree.
    // Only before begin().
    PyValue declare(DType dtype, const std::vector<std::int64_t>& shape);
    // Pickles `root` as data.pkl. After this, write() fills the declared storages in order.
    void begin(const PyValue& root);
    // Appends to the current storage (the first one not yet full). A chunk may not run past the
    // end of that storage; empty storages are passed over by themselves.
    void write(std::span<const std::byte> chunk);
    // Zero bytes into the current storage.
    void write_zeros(std::uint64_t nbytes);
    // Bytes still missing from the current storage (0 when all are complete).
    std::uint64_t remaining_in_storage() const;
    // Checks that every storage is complete, adds torch's records, renames the file into place.
    void finish();

    const std::string& path() const { return path_; }

private:
    void open_next();

    std::string path_, location_;
    TorchZipWriter out_;
    std::vector<std::uint64_t> sizes_;  // per storage, in declaration order
    std::size_t next_ = 0;              // storages begun so far
    bool open_ = false, begun_ = false;
    std::uint64_t left_ = 0;            // bytes missing from the open storage
};

}  // namespace mds::ckpt
