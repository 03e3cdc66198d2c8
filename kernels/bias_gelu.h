// Bias + GeLU (tanh approximation, Megatron's bias_gelu / HF "gelu_new"/"gelu_fast"):
//   y = g(x + b),  g(u) = 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3)))
// over rows of `cols` features. CPU reference and CUDA launcher share this header; the launcher
// returns a cudaError_t-compatible int (0 = success) and checks its size preconditions.
#pragma once

#include <cstddef>

namespace mds::kernels {

// out[r*cols + c] = gelu(x[r*cols + c] + bias[c]); out may alias x.
void bias_gelu_forward_cpu(float* out, const float* x, const float* bias, std::size_t rows, std::size_t cols);
// dx = dy * gelu'(x + b).
void bias_gelu_backward_cpu(float* dx, const float* dy, const float* x, const float* bias, std::size_t rows,
                            std::size_t cols);

// CUDA versions on device pointers, enqueued on `stream` (a cudaStream_t). Returns 0 or a CUDA
// error code; a size precondition failure returns -1 without launching.
int bias_gelu_forward_cuda(float* out, const float* x, const float* bias, std::size_t rows, std::size_t cols,
                           void* stream);
int bias_gelu_backward_cuda(float* dx, const float* dy, const float* x, const float* bias, std::size_t rows,
                            std::size_t cols, void* stream);

}  // namespace mds::kernels
