// Internal to libcore/src/ckpt: a cache-blocked transpose whose source rows are given by pointers,
// so that merged TP shards and Megatron's QKV row order (to_hf.cpp) cost no extra pass over the bytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mds::ckpt {

// dst[j * rows + i] = row[i][j] for i < rows, j < cols, elements of `esize` bytes (2: an SSE2
// register transpose where the CPU has it; 1, 4, 8: plain copies), in 64 x 64 cache tiles.
void transpose_rows(const std::byte* const* row, std::byte* out, std::int64_t rows, std::int64_t cols, std::size_t esize);

}  // namespace mds::ckpt
