// A Linear layer with mds's fused backward: ATen's forward (at::linear) and the matrix products of its backward,
// with, as asked,
// - the bias gradient by kernels/bias_grad.h's column sums (mds-train --bias-grad-fusion): its CUDA kernels on a GPU,
//   its CPU reference on the CPU;
// - the weight gradient added straight into the trainer's fp32 main gradient (--gradient-accumulation-fusion,
//   main_grad_sink.h): on a GPU one cuBLAS product with bf16 inputs and the fp32 main gradient as its accumulator;
//   on the CPU the same sum in fp32.
// The same function and gradients as at::linear, to fp32 rounding (the fused weight gradient skips the bf16
// rounding of each micro batch's product, as Megatron's fused accumulation does).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>

#include "mds/model/main_grad_sink.h"

namespace mds::model {

struct LinearFusions {
    bool bias_grad = true;                       // the bias gradient by kernels/bias_grad.h (else ATen's sum)
    c10::intrusive_ptr<MainGradSink> main_grad;  // where the weight's gradient goes (null, or no grad in it: returned)
};

// x [..., in], weight [out, in] and bias [out], all of one dtype (fp32 or bf16) → x Wᵀ + b, with autograd to all
// three.
at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const LinearFusions& fusions = {});

// The MLP of mds-train --gelu-epilogue-fusion: fc2(gelu_tanh(fc1(x))) for x [..., in], w1 [hidden, in], b1 [hidden],
// w2 [out, hidden], b2 [out], all of one dtype (fp32 or bf16), with autograd to all five. On a GPU, fc1's product,
// bias and GeLU are one cuBLASLt product, and GeLU's derivative is applied inside fc2's input-gradient product
// (cuBLASLt's GELU_AUX_BIAS and DGELU epilogues; ATen's steps where cuBLASLt does not take the operands); on the
// CPU, ATen's steps. The weights' and biases' gradients as fused_linear's, by `fusions` (both MLP layers).
struct MlpFusions {
    bool bias_grad = true;
    c10::intrusive_ptr<MainGradSink> fc1_main_grad, fc2_main_grad;
};
at::Tensor fused_gelu_mlp(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1, const at::Tensor& w2,
                          const at::Tensor& b2, const MlpFusions& fusions = {});

// Empty when fused_linear can run tensors of this dtype on this device, else why not.
std::string fused_linear_unsupported(const c10::Device& device, c10::ScalarType dtype);
// Empty when its weight gradients can go into fp32 main gradients on this device (bf16; on a GPU, cuBLAS's
// cublasGemmEx found in the process), else why not.
std::string gradient_accumulation_fusion_unsupported(const c10::Device& device, c10::ScalarType dtype);
// Empty when fused_gelu_mlp can run tensors of this dtype on this device (fp32 or bf16; on a GPU, cuBLASLt's
// functions found in the process), else why not.
std::string gelu_epilogue_fusion_unsupported(const c10::Device& device, c10::ScalarType dtype);

}  // namespace mds::model
