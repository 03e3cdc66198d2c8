// CPU reference of kernels/layer_norm.h: the same formulas with each row's sums, dw and db accumulated in
// double, the rows in order. The GPU test compares the CUDA kernels with it; mds-train
// --layernorm-backward-fusion runs it on the CPU.
#pragma once

#include "layer_norm.h"

namespace mds::kernels {

void layer_norm_backward_ref(const void* dy, const void* x, const void* w, Dtype dtype, const float* mean,
                             const float* rstd, const LayerNormShape& shape, void* dx, float* dw, float* db);

}  // namespace mds::kernels
