// Global gradient-norm clipping as Megatron's clip_grad_norm_fp32 (megatron/optimizer/clip_grads.py,
// megatron-core optimizer/clip_grads.py), the "num zeros" count of the iteration log line
// (count_zeros_fp32) and the non-finite check that drives fp16 overflow skipping.
//
// Precision: Megatron sums squares in fp32 on the GPU (apex/TE multi_tensor_l2norm, whose reduction
// order depends on the kernel's chunking, so no CPU code can reproduce its bits). Here the sum of
// squares is accumulated in double over fp32 values: deterministic for a given order of spans, and
// at least as accurate as fp32. The norm is then sqrt in double, as Megatron takes `.item() ** 0.5`
// in Python, and clip_coeff = max_norm / (norm + 1e-6) in double; gradients are multiplied by the
// coefficient rounded to float (multi_tensor_scale takes a float scale) only when it is < 1.
// A NaN norm never clips (NaN < 1 is false); an infinite norm clips to 0, both as in Megatron.
//
// Distributed use: each rank calls l2_norm_squared on the gradients it owns (tensor-parallel
// duplicates excluded, as Megatron does), the partial sums are all-reduced (sum) over the model-
// parallel group, and total_norm_from_squared gives the norm; count_zeros is summed the same way.
#pragma once

#include <cstdint>
#include <span>

namespace mds::optim {

// Sum over all elements of x², in double.
double l2_norm_squared(std::span<const std::span<const float>> grads);
// sqrt(sum) — Megatron's total_norm ** (1 / norm_type) for norm_type 2.
double total_norm_from_squared(double sum_of_squares);
// Megatron's clip coefficient max_norm / (total_norm + 1e-6).
double clip_coefficient(double total_norm, double max_norm);
// What the gradients are multiplied by: clip_coefficient rounded to the fp32 scalar Megatron's
// multi_tensor_scale takes, and exactly 1 when clipping is off (max_norm <= 0). Gradients are
// scaled only when it is < 1: never for a NaN norm, to 0 for an infinite one. The trainer's
// optimizer and clip_grad_norm below both scale by this.
double clip_factor(double total_norm, double max_norm);
// Multiply every gradient by float(coeff) when coeff < 1; returns whether it did.
bool scale_if_clipping(std::span<const std::span<float>> grads, double coeff);
// Global L2 norm of local gradients, then clipping to max_norm (max_norm <= 0: no clipping).
// Returns the norm before clipping (what Megatron logs as "grad norm").
double clip_grad_norm(std::span<const std::span<float>> grads, double max_norm);
// Number of elements equal to zero (+0 and -0; NaN counts as non-zero, as torch.count_nonzero).
std::int64_t count_zeros(std::span<const std::span<const float>> grads);
// True when any element is NaN or ±Inf.
bool has_inf_or_nan(std::span<const std::span<const float>> grads);

}  // namespace mds::optim
