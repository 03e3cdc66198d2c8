// The second pass of the kernels that reduce over rows (kernels/layer_norm.h's dw and db, kernels/bias_grad.h's db):
// their first kernel leaves one partial sum per column for each block or slab of rows, a [parts, width] fp32
// matrix; this adds its rows column by column, in double, in an order fixed by the shape alone (the same result on
// every run and every GPU). 32 columns per block, 32 groups of threads per block each adding every 32nd part, then
// one thread per column adding the groups' sums in order: many loads in flight at once, where one thread per column
// waited on each of several hundred parts in turn (2026-11-30 on an H200: 36 µs per LayerNorm backward at GPT-2
// 124M, as long as its row kernel, and 12 µs per bias gradient; 5.9 of 136 ms per step).
#pragma once

#include <cstdint>

namespace mds::kernels {

// Columns j < split go to out_a[j], the rest to out_b[j - split] (out_b may be null when split == width). Device
// pointers; `stream` a cudaStream_t. Throws std::runtime_error (naming `op`) when the launch fails.
void column_sums_cuda(const float* parts_data, std::int64_t parts, int width, float* out_a, int split, float* out_b,
                      void* stream, const char* op);

}  // namespace mds::kernels
