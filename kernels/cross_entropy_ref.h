// CPU reference of kernels/cross_entropy.h: the same three formulas, rows [row_begin, row_end) only (the
// caller splits rows over threads), with a two-pass log-sum-exp accumulated in double. The GPU test
// compares the CUDA kernels with it; mds-train's fused cross entropy runs it on the CPU.
#pragma once

#include <cstdint>

#include "cross_entropy.h"

namespace mds::kernels {

void cross_entropy_forward_ref(const void* logits, Dtype dtype, const CrossEntropyShape& shape,
                               const std::int64_t* targets, float* loss, float* lse, std::int64_t row_begin,
                               std::int64_t row_end);
void cross_entropy_backward_ref(const void* logits, Dtype dtype, const CrossEntropyShape& shape,
                                const std::int64_t* targets, const float* lse, const float* dloss, void* dlogits,
                                std::int64_t row_begin, std::int64_t row_end);

}  // namespace mds::kernels
