// CPU reference of kernels/bias_grad.h: each column's sum in double, the rows in order. The GPU test compares the
// CUDA kernels with it; mds-train --bias-grad-fusion runs it on the CPU.
#pragma once

#include "bias_grad.h"

namespace mds::kernels {

void bias_grad_ref(const void* dy, Dtype dtype, const BiasGradShape& shape, float* db);

}  // namespace mds::kernels
