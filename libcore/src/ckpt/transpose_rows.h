// Internal to libcore/src/ckpt: a cache-blocked transpose whose source rows are given by pointers,
// so that merged TP shards and Megatron's QKV row order (to_hf.cpp) cost no extra pass over the bytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mds::ckpt {

// dst[(j - col_begin) * rows + i] = row[i][j] for i < rows, col_begin <= j < col_end: output rows
// col_begin .. col_end - 1 of the transpose, elements of `esize` bytes (2: SSE2 register transposes
// where the CPU has them; 1, 4, 8: plain copies), in cache tiles.
void transpose_rows(const std::byte* const* row, std::byte* out, std::int64_t rows, std::int64_t col_begin, std::int64_t col_end,
                    std::size_t esize);
// The whole transpose: columns 0 .. cols - 1.
inline void transpose_rows(const std::byte* const* row, std::byte* out, std::int64_t rows, std::int64_t cols, std::size_t esize) {
    transpose_rows(row, out, rows, 0, cols, esize);
}

}  // namespace mds::ckpt
