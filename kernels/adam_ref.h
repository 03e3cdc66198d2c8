// CPU reference of kernels/adam.h: the same step (adam_math.h's arithmetic) and the same sums of squares,
// over elements [begin, end) of one tensor (the caller splits the work over threads, by chunk). The GPU test
// compares the CUDA kernels with it; mds-train --adam-step-fusion runs it on the CPU.
#pragma once

#include <cstdint>

#include "adam.h"
#include "adam_math.h"

namespace mds::kernels {

// Σ over elements [begin, end) of (double)(float(grad) · grad_scale)², in element order.
double adam_grad_sumsq_ref(const AdamTensor& t, float grad_scale, std::int64_t begin, std::int64_t end);
void adam_step_ref(const AdamTensor& t, const AdamScalars& s, std::int64_t begin, std::int64_t end);

}  // namespace mds::kernels
