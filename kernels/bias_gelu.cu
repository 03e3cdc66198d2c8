// Bias + GeLU on the GPU (see bias_gelu.h). One thread per element, 4 elements per thread when
// cols is a multiple of 4 (16-byte loads); tanhf in fp32, as the CPU reference up to rounding.
#include "kernels/bias_gelu.h"

#include <cuda_runtime.h>

#include <cstdint>  // uintptr_t

namespace mds::kernels {

namespace {

__device__ __forceinline__ float gelu_tanh(float u) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    return 0.5f * u * (1.0f + tanhf(k0 * (u + k1 * u * u * u)));
}

__device__ __forceinline__ float gelu_tanh_grad(float u) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    float t = tanhf(k0 * (u + k1 * u * u * u));
    return 0.5f * (1.0f + t) + 0.5f * u * (1.0f - t * t) * k0 * (1.0f + 3.0f * k1 * u * u);
}

__global__ void bias_gelu_forward_kernel(float* out, const float* x, const float* bias, std::size_t n, std::size_t cols) {
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
        out[i] = gelu_tanh(x[i] + bias[i % cols]);
}

__global__ void bias_gelu_forward_kernel_vec4(float4* out, const float4* x, const float4* bias, std::size_t n4,
                                              std::size_t cols4) {
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n4;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        float4 v = x[i], b = bias[i % cols4];
        out[i] = make_float4(gelu_tanh(v.x + b.x), gelu_tanh(v.y + b.y), gelu_tanh(v.z + b.z), gelu_tanh(v.w + b.w));
    }
}

__global__ void bias_gelu_backward_kernel(float* dx, const float* dy, const float* x, const float* bias, std::size_t n,
                                          std::size_t cols) {
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
        dx[i] = dy[i] * gelu_tanh_grad(x[i] + bias[i % cols]);
}

unsigned grid_for(std::size_t n, unsigned block) {
    std::size_t g = (n + block - 1) / block;
    return static_cast<unsigned>(g > 65535u * 16u ? 65535u * 16u : (g == 0 ? 1 : g));
}

}  // namespace

int bias_gelu_forward_cuda(float* out, const float* x, const float* bias, std::size_t rows, std::size_t cols,
                           void* stream) {
    if (cols == 0 || rows == 0) return cols == 0 && rows != 0 ? -1 : 0;
    const std::size_t n = rows * cols;
    auto s = static_cast<cudaStream_t>(stream);
    constexpr unsigned kBlock = 256;
    bool aligned = (reinterpret_cast<std::uintptr_t>(out) | reinterpret_cast<std::uintptr_t>(x) |
                    reinterpret_cast<std::uintptr_t>(bias)) % 16 == 0;
    if (cols % 4 == 0 && aligned)
        bias_gelu_forward_kernel_vec4<<<grid_for(n / 4, kBlock), kBlock, 0, s>>>(
            reinterpret_cast<float4*>(out), reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(bias), n / 4,
            cols / 4);
    else
        bias_gelu_forward_kernel<<<grid_for(n, kBlock), kBlock, 0, s>>>(out, x, bias, n, cols);
    return static_cast<int>(cudaGetLastError());
}

int bias_gelu_backward_cuda(float* dx, const float* dy, const float* x, const float* bias, std::size_t rows,
                            std::size_t cols, void* stream) {
    if (cols == 0 || rows == 0) return cols == 0 && rows != 0 ? -1 : 0;
    const std::size_t n = rows * cols;
    constexpr unsigned kBlock = 256;
    bias_gelu_backward_kernel<<<grid_for(n, kBlock), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(dx, dy, x, bias, n, cols);
    return static_cast<int>(cudaGetLastError());
}

}  // namespace mds::kernels
