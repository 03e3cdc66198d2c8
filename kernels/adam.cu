// CUDA kernels of kernels/adam.h: one block per chunk. A chunk whose five arrays are aligned for it moves
// four elements per thread and access (16-byte fp32 loads, 8-byte bf16 ones), else one. Both kernels are
// bound by memory: the step reads 2 (bf16 gradient) or 4 (fp32) + 3 · 4 bytes per element and writes 3 · 4 + 2.
#include "adam.h"
#include "adam_math.h"
#include "cuda_common.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace mds::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ bool aligned(const void* p, std::size_t bytes) {
    return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// The block's sum of every thread's `v`, in thread 0 (a fixed order: the same result on every run).
__device__ double block_sum(double v) {
    __shared__ double warp_sums[kWarps];
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    v = 0.0;
    if (warp == 0) {
        v = lane < kWarps ? warp_sums[lane] : 0.0;
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

__device__ __forceinline__ float as_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float as_float(float x) { return x; }

template <typename G, int kVec>
__device__ double sumsq_range(const G* g, int length, float grad_scale) {
    double acc = 0.0;
    for (int i = threadIdx.x * kVec; i < length; i += kThreads * kVec) {
        const Pack<G, kVec> p = *reinterpret_cast<const Pack<G, kVec>*>(g + i);
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
            const double x = adam_unscaled(as_float(p.v[k]), grad_scale);
            acc += x * x;
        }
    }
    return acc;
}

// One chunk's sum of squares; 16-byte loads where the chunk allows them.
template <typename G>
__device__ double sumsq_chunk(const void* grad, const AdamChunk& c, float grad_scale) {
    constexpr int kVec = 16 / sizeof(G);
    const auto* g = static_cast<const G*>(grad) + c.begin;
    return aligned(g, 16) && c.length % kVec == 0 ? sumsq_range<G, kVec>(g, c.length, grad_scale)
                                                  : sumsq_range<G, 1>(g, c.length, grad_scale);
}

__global__ void __launch_bounds__(kThreads)
    grad_sumsq_kernel(const AdamTensor* __restrict__ tensors, const AdamChunk* __restrict__ chunks, float grad_scale,
                      double* __restrict__ chunk_sums) {
    const AdamChunk c = chunks[blockIdx.x];
    const AdamTensor& t = tensors[c.tensor];
    const double acc = t.grad_fp32 ? sumsq_chunk<float>(t.grad, c, grad_scale)
                                   : sumsq_chunk<__nv_bfloat16>(t.grad, c, grad_scale);
    const double total = block_sum(acc);
    if (threadIdx.x == 0) chunk_sums[blockIdx.x] = total;
}

// sumsq[t] = the sum of tensor t's chunk sums, in chunk order.
__global__ void tensor_sums_kernel(const std::int64_t* __restrict__ first, std::int64_t n_tensors,
                                   const double* __restrict__ chunk_sums, double* __restrict__ sumsq) {
    const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= n_tensors) return;
    double s = 0.0;
    for (std::int64_t c = first[t]; c < first[t + 1]; ++c) s += chunk_sums[c];
    sumsq[t] = s;
}

template <typename G, int kVec>
__device__ void step_range(const AdamTensor& t, std::int64_t begin, int length, const AdamScalars& s) {
    using F = Pack<float, kVec>;
    using B = Pack<__nv_bfloat16, kVec>;
    auto* param = reinterpret_cast<__nv_bfloat16*>(t.param) + begin;
    const auto* grad = static_cast<const G*>(t.grad) + begin;
    float* master = t.master + begin;
    float* m1 = t.exp_avg + begin;
    float* m2 = t.exp_avg_sq + begin;
    for (int i = threadIdx.x * kVec; i < length; i += kThreads * kVec) {
        const Pack<G, kVec> g = *reinterpret_cast<const Pack<G, kVec>*>(grad + i);
        F p = *reinterpret_cast<const F*>(master + i);
        F m = *reinterpret_cast<const F*>(m1 + i);
        F v = *reinterpret_cast<const F*>(m2 + i);
        B out;
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
            adam_update(as_float(g.v[k]), t.group, p.v[k], m.v[k], v.v[k], s);
            out.v[k] = __float2bfloat16_rn(p.v[k]);
        }
        *reinterpret_cast<F*>(master + i) = p;
        *reinterpret_cast<F*>(m1 + i) = m;
        *reinterpret_cast<F*>(m2 + i) = v;
        *reinterpret_cast<B*>(param + i) = out;
    }
}

template <typename G>
__device__ void step_chunk(const AdamTensor& t, const AdamChunk& c, const AdamScalars& s) {
    constexpr int kVec = 4;
    const std::int64_t b = c.begin;
    const bool vec = c.length % kVec == 0 && aligned(t.master + b, 16) && aligned(t.exp_avg + b, 16) &&
                     aligned(t.exp_avg_sq + b, 16) && aligned(t.param + b, 8) &&
                     aligned(static_cast<const G*>(t.grad) + b, kVec * sizeof(G));
    if (vec) step_range<G, kVec>(t, b, c.length, s);
    else step_range<G, 1>(t, b, c.length, s);
}

__global__ void __launch_bounds__(kThreads)
    adam_step_kernel(const AdamTensor* __restrict__ tensors, const AdamChunk* __restrict__ chunks, AdamScalars s) {
    const AdamChunk c = chunks[blockIdx.x];
    const AdamTensor t = tensors[c.tensor];
    if (t.grad_fp32) step_chunk<float>(t, c, s);
    else step_chunk<__nv_bfloat16>(t, c, s);
}

void check_launch(const char* what, std::int64_t n_chunks) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        throw std::runtime_error(std::string("adam ") + what + ": CUDA launch over " + std::to_string(n_chunks) +
                                 " chunks failed: " + cudaGetErrorString(e));
    }
}

void check_counts(std::int64_t n_chunks) {
    if (n_chunks < 0 || n_chunks > 0x7fffffff) {
        throw std::invalid_argument("adam: the chunk count must be in [0, 2^31), not " + std::to_string(n_chunks));
    }
}

}  // namespace

void adam_grad_sumsq_cuda(const AdamTensor* tensors, std::int64_t n_tensors, const AdamChunk* chunks,
                          std::int64_t n_chunks, const std::int64_t* first, float grad_scale, double* chunk_sums,
                          double* sumsq, void* stream) {
    check_counts(n_chunks);
    if (n_tensors < 0) throw std::invalid_argument("adam: a negative tensor count");
    auto* st = static_cast<cudaStream_t>(stream);
    if (n_chunks > 0) {
        grad_sumsq_kernel<<<static_cast<unsigned>(n_chunks), kThreads, 0, st>>>(tensors, chunks, grad_scale, chunk_sums);
        check_launch("gradient norm", n_chunks);
    }
    if (n_tensors > 0) {
        const auto blocks = static_cast<unsigned>((n_tensors + kThreads - 1) / kThreads);
        tensor_sums_kernel<<<blocks, kThreads, 0, st>>>(first, n_tensors, chunk_sums, sumsq);
        check_launch("gradient norm", n_chunks);
    }
}

void adam_step_cuda(const AdamTensor* tensors, const AdamChunk* chunks, std::int64_t n_chunks, const AdamHyper& h,
                    void* stream) {
    check_counts(n_chunks);
    const AdamScalars s = adam_scalars(h);
    if (n_chunks == 0) return;
    adam_step_kernel<<<static_cast<unsigned>(n_chunks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(tensors, chunks, s);
    check_launch("step", n_chunks);
}

}  // namespace mds::kernels
