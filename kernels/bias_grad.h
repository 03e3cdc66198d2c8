// A linear layer's bias gradient, db[c] = Σ_r dy[r, c], in one pass over dy (as llm.c's
// matmul_backward_bias): autograd's sum over the rows of each Linear's output gradient is ATen's column
// reduction, 7.0 of 177 ms per GPT-2 124M step on an H200 (bench/RESULTS.md). Each block here takes a slab of
// rows and a tile of columns, its lanes 16-byte loads along a row, and writes its partial sums; a second kernel
// adds the slabs' sums in a fixed order in double. The slabs depend only on the shape: the same result on every
// run and every GPU.
//
// dy: rows of `cols` contiguous values, fp32 or bf16; db: fp32. bias_grad_ref.h is the CPU reference; libcore's
// model/fused_linear.cpp is the autograd function around both (mds-train --bias-grad-fusion).
#pragma once

#include <cstdint>

#include "dtype.h"

namespace mds::kernels {

using BiasGradShape = RowsShape;  // checked by check_rows("bias grad", shape)

// fp32 scratch the CUDA kernels need for this shape (the slabs' partial sums).
std::int64_t bias_grad_scratch_floats(const BiasGradShape& s);

// The CUDA launcher (bias_grad.cu; built where the CUDA compiler is). Device pointers; `scratch` holds
// bias_grad_scratch_floats(shape) floats; `stream` a cudaStream_t (nullptr: the legacy default stream). Throws
// std::runtime_error with CUDA's message when a launch fails.
void bias_grad_cuda(const void* dy, Dtype dtype, const BiasGradShape& shape, float* db, float* scratch, void* stream);

}  // namespace mds::kernels
