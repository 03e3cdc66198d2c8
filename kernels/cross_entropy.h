// Fused softmax cross entropy over a vocabulary, one row (token) at a time, as llm.c's fused classifier
// does it: the forward reads each row of logits once (an online max and sum of exponentials) and keeps
// only the row's log-sum-exp; the backward reads the row again and writes the logits' gradient in their
// own dtype. No fp32 copy of the logits, no stored softmax, no separate log-softmax and NLL kernels.
//
//   lse[r]        = log Σ_j exp(x[r, j])                           (fp32)
//   loss[r]       = lse[r] - x[r, target[r]]                       (fp32; NaN when target[r] ∉ [0, vocab))
//   dlogits[r, j] = dloss[r] · (exp(x[r, j] - lse[r]) - [j = target[r]])   (in the logits' dtype)
//
// Logits are rows of `vocab` values `stride` elements apart (stride ≥ vocab); fp32 or bf16. The math is
// fp32 throughout. cross_entropy_ref.h is the CPU reference the tests compare with; libcore's
// model/fused_cross_entropy.cpp is the autograd function around both (mds-train --cross-entropy-loss-fusion).
#pragma once

#include <cstdint>

#include "dtype.h"

namespace mds::kernels {

struct CrossEntropyShape {
    std::int64_t rows = 0;
    std::int64_t vocab = 0;
    std::int64_t stride = 0;  // elements between the starts of two rows of logits (and of dlogits)
};

// Throws std::invalid_argument naming the field when a size is out of range (rows or vocab < 1,
// stride < vocab, vocab ≥ 2^31).
void check_shape(const CrossEntropyShape& s);

// CUDA launchers (cross_entropy.cu; built where the CUDA compiler is). Pointers are device pointers,
// `stream` a cudaStream_t (nullptr: the legacy default stream). They check the shape, launch, and throw
// std::runtime_error with CUDA's message when the launch fails.
void cross_entropy_forward_cuda(const void* logits, Dtype dtype, const CrossEntropyShape& shape,
                                const std::int64_t* targets, float* loss, float* lse, void* stream);
void cross_entropy_backward_cuda(const void* logits, Dtype dtype, const CrossEntropyShape& shape,
                                 const std::int64_t* targets, const float* lse, const float* dloss, void* dlogits,
                                 void* stream);

}  // namespace mds::kernels
