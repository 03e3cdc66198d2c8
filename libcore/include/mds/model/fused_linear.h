// A Linear layer with mds's bias gradient (mds-train --bias-grad-fusion): ATen's forward (at::linear) and the matrix
// products of its backward, kernels/bias_grad.h's column sums for the bias — its CUDA kernels on a GPU, its CPU
// reference on the CPU. The same function and gradients as at::linear, to fp32 rounding.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace mds::model {

// x [..., in], weight [out, in] and bias [out], all of one dtype (fp32 or bf16) → x Wᵀ + b, with autograd to all
// three.
at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// Empty when fused_linear can run tensors of this dtype on this device, else why not.
std::string fused_linear_unsupported(const c10::Device& device, c10::ScalarType dtype);

}  // namespace mds::model
