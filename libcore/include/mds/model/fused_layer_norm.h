// LayerNorm with mds's backward (mds-train --layernorm-backward-fusion): ATen's forward (native_layer_norm, whose
// per-row mean and rstd it keeps), kernels/layer_norm.h's backward — its CUDA kernels on a GPU, its CPU reference
// on the CPU. The same function and gradients as at::layer_norm, to fp32 rounding.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace mds::model {

// x [..., C] (fp32 or bf16), weight and bias [C] of x's dtype → LayerNorm(x), with autograd to all three.
at::Tensor fused_layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);

// Empty when fused_layer_norm can run tensors of this dtype on this device, else why not.
std::string fused_layer_norm_unsupported(const c10::Device& device, c10::ScalarType dtype);

}  // namespace mds::model
