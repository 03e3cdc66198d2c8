// CUDA kernels of kernels/cross_entropy.h: one block per row; each thread walks the row with 16-byte
// loads where the row is aligned for them (8 bf16 or 4 fp32 values), else one value at a time.
// Both passes are bound by memory: the forward reads the logits once (2 bytes per value in bf16), the
// backward reads them once more and writes the gradient (2 + 2 bytes) — against over 30 bytes per value for
// ATen's fp32 copy, log-softmax, NLL and their backwards.
#include "cross_entropy.h"
#include "cuda_common.cuh"
#include "online_lse.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace mds::kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

// ----------------------------------------------------------------------------------------------------
// CUDA kernels

// The block's (max, sum) over every thread's pair, returned to every thread.
__device__ MaxSum block_merge(MaxSum v) {
    __shared__ MaxSum warp_pairs[kWarps];
    __shared__ MaxSum result;
    for (int offset = 16; offset > 0; offset >>= 1) {
        MaxSum other{__shfl_xor_sync(0xffffffffu, v.max, offset), __shfl_xor_sync(0xffffffffu, v.sum, offset)};
        v = lse_merge(v, other);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_pairs[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < kWarps ? warp_pairs[lane] : lse_empty();
        for (int offset = 16; offset > 0; offset >>= 1) {
            MaxSum other{__shfl_xor_sync(0xffffffffu, v.max, offset), __shfl_xor_sync(0xffffffffu, v.sum, offset)};
            v = lse_merge(v, other);
        }
        if (lane == 0) result = v;
    }
    __syncthreads();
    return result;
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_forward_kernel(const T* __restrict__ logits, std::int64_t vocab, std::int64_t stride,
                                 const std::int64_t* __restrict__ targets, float* __restrict__ loss,
                                 float* __restrict__ lse) {
    const std::int64_t r = blockIdx.x;
    const T* row = logits + r * stride;
    MaxSum acc = lse_empty();
#pragma unroll 2
    for (std::int64_t j = static_cast<std::int64_t>(threadIdx.x) * kVec; j < vocab; j += kThreads * kVec) {
        const Pack<T, kVec> p = *reinterpret_cast<const Pack<T, kVec>*>(row + j);
        float v[kVec];
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[k] = to_float(p.v[k]);
        acc = lse_merge(acc, lse_of(v, kVec));  // the load's pair, then one merge: kVec + 1 expf, not a chain of kVec
    }
    acc = block_merge(acc);
    if (threadIdx.x == 0) {
        const float l = lse_value(acc);
        const std::int64_t t = targets[r];
        lse[r] = l;
        loss[r] = (t < 0 || t >= vocab) ? NAN : l - to_float(row[t]);
    }
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_backward_kernel(const T* __restrict__ logits, std::int64_t vocab, std::int64_t stride,
                                  const std::int64_t* __restrict__ targets, const float* __restrict__ lse,
                                  const float* __restrict__ dloss, T* __restrict__ dlogits) {
    const std::int64_t r = blockIdx.x;
    const T* row = logits + r * stride;
    T* out = dlogits + r * stride;
    const float l = lse[r], g = dloss[r];
    const std::int64_t t = targets[r];
    for (std::int64_t j = static_cast<std::int64_t>(threadIdx.x) * kVec; j < vocab; j += kThreads * kVec) {
        const Pack<T, kVec> p = *reinterpret_cast<const Pack<T, kVec>*>(row + j);
        Pack<T, kVec> d;
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
            const float prob = expf(to_float(p.v[k]) - l);
            d.v[k] = from_float<T>(g * (prob - (j + k == t ? 1.0f : 0.0f)));
        }
        *reinterpret_cast<Pack<T, kVec>*>(out + j) = d;
    }
}

// ----------------------------------------------------------------------------------------------------
// kernel launchers

void check_grid(const CrossEntropyShape& s) {
    if (s.rows > 0x7fffffff) throw std::invalid_argument("cross entropy: rows must be below 2^31 (one block each)");
}

// Whether rows of T at `p` (and `q`) with this vocab and stride can be read in 16-byte packs.
template <typename T>
bool packs_fit(const CrossEntropyShape& s, const void* p, const void* q = nullptr) {
    constexpr int vec = 16 / sizeof(T);
    const auto aligned = [](const void* a) { return reinterpret_cast<std::uintptr_t>(a) % 16 == 0; };
    return s.vocab % vec == 0 && s.stride % vec == 0 && aligned(p) && (q == nullptr || aligned(q));
}

template <typename T>
void forward(const void* logits, const CrossEntropyShape& s, const std::int64_t* targets, float* loss, float* lse,
             cudaStream_t stream) {
    const auto* x = static_cast<const T*>(logits);
    const dim3 grid(static_cast<unsigned>(s.rows));
    if (packs_fit<T>(s, logits)) {
        cross_entropy_forward_kernel<T, 16 / sizeof(T)><<<grid, kThreads, 0, stream>>>(x, s.vocab, s.stride, targets,
                                                                                         loss, lse);
    } else {
        cross_entropy_forward_kernel<T, 1><<<grid, kThreads, 0, stream>>>(x, s.vocab, s.stride, targets, loss, lse);
    }
    check_launch("cross entropy", "forward", s.rows, s.vocab);
}

template <typename T>
void backward(const void* logits, const CrossEntropyShape& s, const std::int64_t* targets, const float* lse,
              const float* dloss, void* dlogits, cudaStream_t stream) {
    const auto* x = static_cast<const T*>(logits);
    auto* d = static_cast<T*>(dlogits);
    const dim3 grid(static_cast<unsigned>(s.rows));
    if (packs_fit<T>(s, logits, dlogits)) {
        cross_entropy_backward_kernel<T, 16 / sizeof(T)><<<grid, kThreads, 0, stream>>>(x, s.vocab, s.stride, targets,
                                                                                          lse, dloss, d);
    } else {
        cross_entropy_backward_kernel<T, 1><<<grid, kThreads, 0, stream>>>(x, s.vocab, s.stride, targets, lse, dloss, d);
    }
    check_launch("cross entropy", "backward", s.rows, s.vocab);
}

}  // namespace

void cross_entropy_forward_cuda(const void* logits, Dtype dtype, const CrossEntropyShape& shape,
                                const std::int64_t* targets, float* loss, float* lse, void* stream) {
    check_shape(shape);
    check_grid(shape);
    auto* st = static_cast<cudaStream_t>(stream);
    if (dtype == Dtype::F32) forward<float>(logits, shape, targets, loss, lse, st);
    else forward<__nv_bfloat16>(logits, shape, targets, loss, lse, st);
}

void cross_entropy_backward_cuda(const void* logits, Dtype dtype, const CrossEntropyShape& shape,
                                 const std::int64_t* targets, const float* lse, const float* dloss, void* dlogits,
                                 void* stream) {
    check_shape(shape);
    check_grid(shape);
    auto* st = static_cast<cudaStream_t>(stream);
    if (dtype == Dtype::F32) backward<float>(logits, shape, targets, lse, dloss, dlogits, st);
    else backward<__nv_bfloat16>(logits, shape, targets, lse, dloss, dlogits, st);
}

}  // namespace mds::kernels
