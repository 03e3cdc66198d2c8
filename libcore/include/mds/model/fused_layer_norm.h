// LayerNorm with mds's backward (mds-train --layernorm-backward-fusion): ATen's forward (native_layer_norm, whose
// per-row mean and rstd it keeps), kernels/layer_norm.h's backward — its CUDA kernels on a GPU, its CPU reference
// on the CPU. The same function and gradients as at::layer_norm, to fp32 rounding.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>
#include <utility>

namespace mds::model {

// x [..., C] (fp32 or bf16), weight and bias [C] of x's dtype → LayerNorm(x), with autograd to all three.
at::Tensor fused_layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);

// The residual sum and the LayerNorm after it in one pass (mds-train --residual-layernorm-fusion): a and b [..., C]
// (fp32 or bf16), weight and bias [C], all of one dtype → {s = a + b, LayerNorm(s)}, by kernels/layer_norm.h's forward
// with the residual sum and its backward; the same values as a + b and at::layer_norm of it (s exactly, the
// LayerNorm to fp32 rounding), with autograd to all four.
std::pair<at::Tensor, at::Tensor> fused_residual_layer_norm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& weight,
                                                             const at::Tensor& bias, double eps);

// Empty when fused_layer_norm and fused_residual_layer_norm can run tensors of this dtype on this device, else why not.
std::string fused_layer_norm_unsupported(const c10::Device& device, c10::ScalarType dtype);

}  // namespace mds::model
