// Matrix products with cuBLASLt's GeLU epilogues, for mds-train --gelu-epilogue-fusion (fused_linear.h's
// fused_gelu_mlp), on the current CUDA stream: the MLP's first Linear with its bias and GeLU in one product (the
// GeLU's input kept for the backward), and the second Linear's input gradient with GeLU's derivative applied in
// that product (and, as asked, the first Linear's bias gradient from it). cuBLASLt's GeLU is the tanh
// approximation (what PyTorch's _addmm_activation takes it for: its fallback without the epilogue applies
// gelu(x, "tanh")). cuBLASLt's functions are looked up in the process (LibTorch's libcublasLt), not linked
// (fused_linear.cpp says why); the workspace and handle are LibTorch's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace mds::model {

// Empty when a product below can run with these operands (every one, the output and the GeLU's input included):
// CUDA tensors, all fp32 or all bf16, contiguous, 16-byte aligned, every size within cuBLAS's int, the GeLU's
// width (hidden) a multiple of 8 (cuBLASLt's epilogue), and cuBLASLt loaded; else why not.
std::string gelu_gemm_unsupported(std::initializer_list<at::Tensor> operands, std::int64_t gelu_width);
// Empty when cuBLASLt's functions are loaded in this process (always false in a build without CUDA).
std::string gelu_gemm_unavailable();

// pre = x2 wᵀ + b and out = gelu_tanh(pre), for x2 [rows, in], w [hidden, in], b [hidden]; pre and out
// [rows, hidden], allocated by the caller. False, with nothing written, when cuBLASLt has no algorithm for it;
// throws mds::Error when a cuBLASLt call fails.
bool gemm_bias_gelu(const at::Tensor& x2, const at::Tensor& w, const at::Tensor& b, const at::Tensor& out, const at::Tensor& pre);
// dpre = (g2 w2) ⊙ gelu_tanh'(pre), for g2 [rows, out], w2 [out, hidden], pre [rows, hidden]; dpre [rows, hidden],
// allocated by the caller; and, when `dbias` [hidden] (of dpre's dtype) is given, dpre's column sums into it (fc1's
// bias gradient: the DGELU_BGRAD epilogue). False and throws as gemm_bias_gelu.
bool gemm_dgelu(const at::Tensor& g2, const at::Tensor& w2, const at::Tensor& pre, const at::Tensor& dpre,
                const at::Tensor& dbias = {});

}  // namespace mds::model
