// Helpers the kernels/*.cu files share: fp32 ↔ element type (bf16 rounded to nearest even), a pack of values
// moved as one aligned load or store, and the check of a row kernel's launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace mds::kernels {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// kVec values of T, aligned for one sizeof(T) · kVec-byte access (16 bytes: the widest load).
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
    T v[kVec];
};

// Throws std::runtime_error "<op> <stage>: CUDA launch over R rows x C failed: <CUDA's message>" when the last
// launch (or runtime call) failed.
inline void check_launch(const char* op, const char* stage, std::int64_t rows, std::int64_t cols) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        throw std::runtime_error(std::string(op) + " " + stage + ": CUDA launch over " + std::to_string(rows) + " rows x " +
                                 std::to_string(cols) + " failed: " + cudaGetErrorString(e));
    }
}

}  // namespace mds::kernels
