// Device helpers the kernels/*.cu files share: fp32 ↔ element type (bf16 rounded to nearest even), and a pack of
// values moved as one aligned load or store.
#pragma once

#include <cuda_bf16.h>

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

}  // namespace mds::kernels
