// LayerNorm's backward in one pass over the rows (as llm.c's layernorm_backward): per row, with
// x̂ = (x - mean) · rstd and g = dy · w,
//   dx = rstd · (g - mean_j(g) - x̂ · mean_j(g · x̂))
// and over the rows dw = Σ dy · x̂, db = Σ dy. The forward is ATen's (its mean and rstd, fp32); ATen's backward
// is a row kernel for dx and a separate, slow column reduction for dw and db (7.7 of 177 ms per GPT-2 124M step
// on an H200): here each warp takes a slab of rows, keeps its columns' sums in shared memory, each block adds
// its warps' sums in a fixed order and a second kernel adds the blocks' (the same result every run on one kind of
// GPU: layer_norm.cu).
//
// Rows of `cols` contiguous values (x, dy and dx of one dtype, fp32 or bf16; w of that dtype too); mean and rstd
// fp32 per row; dw and db fp32. layer_norm_ref.h is the CPU reference; libcore's model/fused_layer_norm.cpp is
// the autograd function around both (mds-train --layernorm-backward-fusion).
#pragma once

#include <cstdint>

#include "dtype.h"

namespace mds::kernels {

using LayerNormShape = RowsShape;  // checked by check_rows("layer norm", shape)

// fp32 scratch the CUDA backward needs for this shape (its blocks' partial sums).
std::int64_t layer_norm_scratch_floats(const LayerNormShape& s);

// The CUDA launcher (layer_norm.cu; built where the CUDA compiler is). Device pointers; `scratch` holds
// layer_norm_scratch_floats(shape) floats; `stream` a cudaStream_t (nullptr: the legacy default stream). Throws
// std::invalid_argument for a shape it cannot take (cols over what shared memory holds: 29,056 on an H100, 20,864 on an A100) and
// std::runtime_error with CUDA's message when a launch fails.
// `dres` (may be null): a gradient of x's dtype and shape that reached x by another path (the residual stream's, for
// a LayerNorm whose input is a residual sum), added to dx before its rounding: dx = LayerNorm's + dres.
void layer_norm_backward_cuda(const void* dy, const void* x, const void* w, Dtype dtype, const float* mean,
                              const float* rstd, const LayerNormShape& shape, void* dx, float* dw, float* db,
                              float* scratch, void* stream, const void* dres = nullptr);

// LayerNorm's forward with the residual sum before it (as llm.c's fused_residual_forward): per row,
//   s = a + b (each sum rounded to the dtype, as an unfused add of two tensors of it gives),
//   y = (s - mean) · rstd · w + bias,  mean and rstd = 1 / sqrt(var + eps) of s in fp32 (var: the biased variance)
// in one pass over a and b where two unfused kernels (ATen's add, then its LayerNorm) write s and read it back.
// `b` null: s = a, y its LayerNorm (`s` is not written). Rows of `cols` contiguous values (a, b, s, y, w and bias of
// one dtype, fp32 or bf16); mean and rstd fp32 per row, ATen's layout, which layer_norm_backward_cuda takes. One warp
// per row; each row's sums in a fixed order (the same result every run). layer_norm_ref.h has the CPU reference.
void residual_layer_norm_forward_cuda(const void* a, const void* b, const void* w, const void* bias, Dtype dtype, float eps,
                                      const LayerNormShape& shape, void* s, void* y, float* mean, float* rstd, void* stream);

}  // namespace mds::kernels
