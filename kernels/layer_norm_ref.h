// CPU references of kernels/layer_norm.h. The backward: the same formulas with each row's sums, dw and db accumulated
// in double, the rows in order. The GPU test compares the CUDA kernels with it; mds-train
// --layernorm-backward-fusion runs it on the CPU.
#pragma once

#include "layer_norm.h"

namespace mds::kernels {

void layer_norm_backward_ref(const void* dy, const void* x, const void* w, Dtype dtype, const float* mean,
                             const float* rstd, const LayerNormShape& shape, void* dx, float* dw, float* db,
                             const void* dres = nullptr);

// The forward with the residual sum (layer_norm.h): s rounded to the dtype from the fp32 sum, each row's mean and
// variance of s in double, y in double rounded once to the dtype; mean and rstd stored as fp32.
void residual_layer_norm_forward_ref(const void* a, const void* b, const void* w, const void* bias, Dtype dtype, float eps,
                                     const LayerNormShape& shape, void* s, void* y, float* mean, float* rstd);

}  // namespace mds::kernels
