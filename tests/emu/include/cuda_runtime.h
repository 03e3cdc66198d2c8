// The CUDA emulator's stand-in for <cuda_runtime.h> (tests/emu/README.md): the real toolkit's types and bf16 header,
// the runtime calls the kernels and their GPU tests make, implemented on the host (tests/emu/cuda_emu.cpp), and the
// device built-ins (threadIdx, __syncthreads, __shfl_xor_sync) over fibers: each block's threads run one after
// another on one host thread, switching at every barrier and shuffle.
#pragma once

#include <cuda_runtime_api.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

inline uint3 threadIdx;
inline uint3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

template <typename T>
inline T min(T a, T b) {
    return b < a ? b : a;
}

// CUDA's reciprocal square root (within 2 ulp on a GPU; the host's correctly rounded quotient here).
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

namespace mds_emu {

// Runs `body` as every thread of every block of the grid (blocks one after another); a configuration CUDA refuses
// runs nothing and leaves the reason in the runtime's last error, as a launch does.
void run_grid(const void* kernel, dim3 grid, dim3 block, std::size_t shared_bytes, const std::function<void()>& body);

// This block's dynamic shared memory (filled with 0xFF bytes at the block's start: NaN as floats).
void* dynamic_shared_bytes();
template <typename T>
T* dynamic_shared() {
    return static_cast<T*>(dynamic_shared_bytes());
}

void sync_block();
std::uint64_t exchange_in_warp(unsigned mask, std::uint64_t bits, int lane_mask);

// kernel<<<grid, block, shared, stream>>>(args...) is translated to launch(kernel, grid, block, shared, stream)(args...).
template <typename Kernel>
struct Launch {
    Kernel* kernel;
    dim3 grid, block;
    std::size_t shared;
    template <typename... Args>
    void operator()(Args&&... args) const {
        auto copies = std::make_tuple(std::decay_t<Args>(std::forward<Args>(args))...);  // CUDA passes them by value
        Kernel* k = kernel;
        run_grid(reinterpret_cast<const void*>(k), grid, block, shared, [&] { std::apply(k, copies); });
    }
};
template <typename Kernel>
Launch<Kernel> launch(Kernel* kernel, dim3 grid, dim3 block, std::size_t shared = 0, cudaStream_t = nullptr) {
    return {kernel, grid, block, shared};
}

}  // namespace mds_emu

inline void __syncthreads() { mds_emu::sync_block(); }

template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "the emulator shuffles up to 8 bytes");
    (void)width;
    std::uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    bits = mds_emu::exchange_in_warp(mask, bits, lane_mask);
    T out;
    std::memcpy(&out, &bits, sizeof(T));
    return out;
}

template <typename T>
cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}
