// Per-token cross entropy with a fused backward (mds-train --cross-entropy-loss-fusion): kernels/cross_entropy.h's
// CUDA kernels on a GPU, its CPU reference on the CPU. The forward keeps only each row's log-sum-exp; the backward
// writes the logits' gradient in their dtype in one pass over them. The same function as
// at::cross_entropy_loss(logits.float(), labels, reduction none), to fp32 rounding.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace mds::model {

// logits [rows, vocab] (fp32 or bf16; rows may be strided, each row contiguous), labels [rows] (any integer
// dtype) → losses [rows], fp32, with autograd to the logits. A label outside [0, vocab) gives a NaN loss.
at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& labels);

// Empty when fused_cross_entropy can run logits of this dtype on this device, else why not
// ("bf16 or fp32 logits only, not ...", "this mds-train was built without CUDA kernels").
std::string fused_cross_entropy_unsupported(const c10::Device& device, c10::ScalarType dtype);

}  // namespace mds::model
