// CUDA kernels of kernels/layer_norm.h. The forward (with the residual sum) is below the backward. The backward's row
// kernel: up to 8 warps per block, each warp a slab of consecutive rows, each lane its own columns of every row
// (16-byte loads where the rows allow), two passes per row (the row sums, then dx; the second pass reads what the
// first brought into the cache). The warps' dw / db sums live in shared memory, and the weight where it fits beside
// them; at the end the block adds its warps' sums column by column and writes them to the scratch, and
// kernels/column_sums.h adds the blocks' in double. The slab of each warp depends only on the shape and the warps
// per block on the width and the device's shared memory: the same result on every run on one kind of GPU (for
// widths over ~2,400 an A100 groups the warps differently from an H100, so dw and db may differ in the last bits
// between the two).
#include "layer_norm.h"
#include "column_sums.h"
#include "cuda_common.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace mds::kernels {
namespace {

constexpr int kMaxWarpsPerBlock = 8;
constexpr std::int64_t kMaxWarps = 4096;  // warps over all blocks: the slabs (and so the sums) depend on it

struct Slabs {
    std::int64_t rows_per_warp, warps;  // warps that have rows
};

Slabs slabs(std::int64_t rows) {
    const std::int64_t total = std::min(rows, kMaxWarps);
    const std::int64_t per = (rows + total - 1) / total;
    return {per, (rows + per - 1) / per};
}

// Where column c lives in a shared-memory row of `cols` values: kVec planes of cols / kVec values, so that the 32
// lanes, each reading kVec consecutive columns, touch 32 consecutive words of a plane (no bank conflicts).
template <int kVec>
__device__ __forceinline__ int slot(int c, int cols) {
    return (c % kVec) * (cols / kVec) + c / kVec;
}

// kSharedW: the weight in shared memory too (every width up to ~19,000 columns on an H100, ~13,900 on an A100);
// else read from global memory (the L1 / L2 caches), leaving the shared memory to the sums (up to 29,056 columns
// on an H100, 20,864 on an A100: BLOOM-176B's 14336 there).
template <typename T, int kVec, bool kSharedW>
__global__ void layer_norm_backward_rows(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                                         const float* __restrict__ mean, const float* __restrict__ rstd,
                                         std::int64_t rows, int cols, std::int64_t rows_per_warp, std::int64_t warps_used,
                                         const T* __restrict__ dres, T* __restrict__ dx, float* __restrict__ scratch) {
    extern __shared__ float smem[];  // w [cols] (kSharedW), then per warp dw [cols] and db [cols]
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int w_cols = kSharedW ? cols : 0;
    float* ws = smem;
    float* dw_part = smem + w_cols + static_cast<std::int64_t>(warp) * 2 * cols;
    float* db_part = dw_part + cols;
    // The weight of column c, which sits at `at` of a shared-memory row.
    const auto weight = [&](int c, int at) { return kSharedW ? ws[at] : to_float(w[c]); };
    if (kSharedW) {
        for (int c = threadIdx.x; c < cols; c += blockDim.x) ws[slot<kVec>(c, cols)] = to_float(w[c]);
    }
    for (int c = lane; c < 2 * cols; c += 32) dw_part[c] = 0.0f;
    __syncthreads();
    const std::int64_t gw = static_cast<std::int64_t>(blockIdx.x) * warps + warp;
    if (gw < warps_used) {
        const std::int64_t r0 = gw * rows_per_warp, r1 = min(rows, r0 + rows_per_warp);
        const float inv_cols = 1.0f / static_cast<float>(cols);
        for (std::int64_t r = r0; r < r1; ++r) {
            const T* dyr = dy + r * cols;
            const T* xr = x + r * cols;
            const float mu = mean[r], rs = rstd[r];
            float g_sum = 0.0f, gx_sum = 0.0f;
            for (int c = lane * kVec; c < cols; c += 32 * kVec) {
                const Pack<T, kVec> a = *reinterpret_cast<const Pack<T, kVec>*>(dyr + c);
                const Pack<T, kVec> b = *reinterpret_cast<const Pack<T, kVec>*>(xr + c);
#pragma unroll
                for (int k = 0; k < kVec; ++k) {
                    const int at = slot<kVec>(c + k, cols);
                    const float d = to_float(a.v[k]), xhat = (to_float(b.v[k]) - mu) * rs, g = d * weight(c + k, at);
                    g_sum += g;
                    gx_sum += g * xhat;
                    dw_part[at] += d * xhat;
                    db_part[at] += d;
                }
            }
            for (int offset = 16; offset > 0; offset >>= 1) {
                g_sum += __shfl_xor_sync(0xffffffffu, g_sum, offset);
                gx_sum += __shfl_xor_sync(0xffffffffu, gx_sum, offset);
            }
            const float g_mean = g_sum * inv_cols, gx_mean = gx_sum * inv_cols;
            T* dxr = dx + r * cols;
            const T* dresr = dres ? dres + r * cols : nullptr;
            for (int c = lane * kVec; c < cols; c += 32 * kVec) {
                const Pack<T, kVec> a = *reinterpret_cast<const Pack<T, kVec>*>(dyr + c);
                const Pack<T, kVec> b = *reinterpret_cast<const Pack<T, kVec>*>(xr + c);
                Pack<T, kVec> more{};  // the gradient that reached x along the residual path, added before rounding
                if (dresr) more = *reinterpret_cast<const Pack<T, kVec>*>(dresr + c);
                Pack<T, kVec> out;
#pragma unroll
                for (int k = 0; k < kVec; ++k) {
                    const float xhat = (to_float(b.v[k]) - mu) * rs,
                                g = to_float(a.v[k]) * weight(c + k, slot<kVec>(c + k, cols));
                    out.v[k] = from_float<T>(rs * (g - g_mean - xhat * gx_mean) + (dresr ? to_float(more.v[k]) : 0.0f));
                }
                *reinterpret_cast<Pack<T, kVec>*>(dxr + c) = out;
            }
        }
    }
    __syncthreads();
    float* out = scratch + static_cast<std::int64_t>(blockIdx.x) * 2 * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const int at = slot<kVec>(c, cols);
        float a = 0.0f, b = 0.0f;
        for (int k = 0; k < warps; ++k) {
            a += smem[w_cols + static_cast<std::int64_t>(k) * 2 * cols + at];
            b += smem[w_cols + static_cast<std::int64_t>(k) * 2 * cols + cols + at];
        }
        out[c] = a;
        out[cols + c] = b;
    }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

constexpr int kMaxDevices = 64;  // devices whose answers below are remembered; others ask every time

// The shared memory a block may opt in to on `device`, asked of the runtime once per device.
int shared_memory_optin(int device, const LayerNormShape& s) {
    static std::atomic<int> known[kMaxDevices]{};
    if (device < kMaxDevices) {
        const int v = known[device].load(std::memory_order_relaxed);
        if (v > 0) return v;
    }
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
        check_launch("layer norm backward", "(device query)", s.rows, s.cols);
    }
    if (device < kMaxDevices) known[device].store(optin, std::memory_order_relaxed);
    return optin;
}

// Lets `kernel` launch with up to `optin` bytes (the device's whole opt-in) of dynamic shared memory on `device`:
// one runtime call per kernel and device (`raised`, this kernel's record), the same value whichever thread makes
// it, so two threads cannot leave a lower limit than either needs.
template <typename Kernel>
void allow_shared_memory(Kernel kernel, int device, int bytes, int optin, std::atomic<bool>* raised,
                         const LayerNormShape& s) {
    if (bytes <= 48 * 1024) return;
    if (device < kMaxDevices && raised[device].load(std::memory_order_relaxed)) return;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin) != cudaSuccess) {
        check_launch("layer norm backward", "(shared memory opt-in)", s.rows, s.cols);
    }
    if (device < kMaxDevices) raised[device].store(true, std::memory_order_relaxed);
}

template <typename T>
void backward(const void* dy, const void* x, const void* w, const float* mean, const float* rstd,
              const LayerNormShape& s, const void* dres, void* dx, float* dw, float* db, float* scratch, cudaStream_t stream) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) check_launch("layer norm backward", "(device query)", s.rows, s.cols);
    const int optin = shared_memory_optin(device, s);
    // The most warps per block whose sums fit, the weight in shared memory too where one warp's do with it.
    bool shared_w = true;
    const auto bytes_for = [&](int warps) {
        return ((shared_w ? 1 : 0) + 2 * static_cast<std::int64_t>(warps)) * s.cols * 4;
    };
    if (bytes_for(1) > optin) shared_w = false;
    int warps = kMaxWarpsPerBlock;
    while (warps > 1 && bytes_for(warps) > optin) warps /= 2;
    if (bytes_for(warps) > optin) {
        throw std::invalid_argument("layer norm backward: " + std::to_string(s.cols) + " columns need " +
                                    std::to_string(bytes_for(1)) + " bytes of shared memory, the device has " +
                                    std::to_string(optin));
    }
    const auto bytes = static_cast<std::size_t>(bytes_for(warps));
    const Slabs sl = slabs(s.rows);
    const std::int64_t blocks = (sl.warps + warps - 1) / warps;
    const int cols = static_cast<int>(s.cols);
    constexpr int vec = 16 / sizeof(T);
    const bool packs = s.cols % vec == 0 && aligned16(dy) && aligned16(x) && aligned16(dx) && (!dres || aligned16(dres));
    auto* kernel = packs ? (shared_w ? layer_norm_backward_rows<T, vec, true> : layer_norm_backward_rows<T, vec, false>)
                         : (shared_w ? layer_norm_backward_rows<T, 1, true> : layer_norm_backward_rows<T, 1, false>);
    static std::atomic<bool> raised[4][kMaxDevices]{};  // per kernel (packed or not, weight shared or not) and device
    allow_shared_memory(kernel, device, static_cast<int>(bytes), optin, raised[(packs ? 1 : 0) + (shared_w ? 2 : 0)], s);
    kernel<<<static_cast<unsigned>(blocks), warps * 32, bytes, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(w), mean, rstd, s.rows, cols,
        sl.rows_per_warp, sl.warps, static_cast<const T*>(dres), static_cast<T*>(dx), scratch);
    check_launch("layer norm backward", "rows", s.rows, s.cols);
    column_sums_cuda(scratch, blocks, 2 * cols, dw, cols, db, stream, "layer norm backward");  // [blocks][dw | db]
}

// The forward: one warp per row, each lane its own columns (kVec at a time). Three passes over the row: s = a + b
// rounded to T (written) and its sum; the squared deviations from the mean (reading back the lane's own s, in the
// cache); y. The warp's sums by the same butterfly every run.
constexpr int kForwardWarpsPerBlock = 4;

template <typename T, int kVec>
__global__ void residual_layer_norm_forward_rows(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ w,
                                                 const T* __restrict__ bias, float eps, std::int64_t rows, int cols,
                                                 T* __restrict__ s, T* __restrict__ y, float* __restrict__ mean,
                                                 float* __restrict__ rstd) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + warp;
    if (r >= rows) return;  // the whole warp: r is the same for its lanes
    const T* ar = a + r * cols;
    const T* br = b ? b + r * cols : nullptr;
    T* sr = b ? s + r * cols : nullptr;
    const T* src = b ? sr : ar;  // the row's s, as the passes after the first read it
    float sum = 0.0f;
    for (int c = lane * kVec; c < cols; c += 32 * kVec) {
        const Pack<T, kVec> pa = *reinterpret_cast<const Pack<T, kVec>*>(ar + c);
        if (br) {
            const Pack<T, kVec> pb = *reinterpret_cast<const Pack<T, kVec>*>(br + c);
            Pack<T, kVec> ps;
#pragma unroll
            for (int k = 0; k < kVec; ++k) {
                ps.v[k] = from_float<T>(to_float(pa.v[k]) + to_float(pb.v[k]));
                sum += to_float(ps.v[k]);
            }
            *reinterpret_cast<Pack<T, kVec>*>(sr + c) = ps;
        } else {
#pragma unroll
            for (int k = 0; k < kVec; ++k) sum += to_float(pa.v[k]);
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const float mu = sum / static_cast<float>(cols);
    float sq = 0.0f;
    for (int c = lane * kVec; c < cols; c += 32 * kVec) {
        const Pack<T, kVec> ps = *reinterpret_cast<const Pack<T, kVec>*>(src + c);
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
            const float d = to_float(ps.v[k]) - mu;
            sq += d * d;
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, offset);
    const float rs = rsqrtf(sq / static_cast<float>(cols) + eps);
    T* yr = y + r * cols;
    for (int c = lane * kVec; c < cols; c += 32 * kVec) {
        const Pack<T, kVec> ps = *reinterpret_cast<const Pack<T, kVec>*>(src + c);
        const Pack<T, kVec> pw = *reinterpret_cast<const Pack<T, kVec>*>(w + c);
        const Pack<T, kVec> pbias = *reinterpret_cast<const Pack<T, kVec>*>(bias + c);
        Pack<T, kVec> out;
#pragma unroll
        for (int k = 0; k < kVec; ++k)
            out.v[k] = from_float<T>((to_float(ps.v[k]) - mu) * rs * to_float(pw.v[k]) + to_float(pbias.v[k]));
        *reinterpret_cast<Pack<T, kVec>*>(yr + c) = out;
    }
    if (lane == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}

template <typename T>
void forward(const void* a, const void* b, const void* w, const void* bias, float eps, const LayerNormShape& s, void* sum,
             void* y, float* mean, float* rstd, cudaStream_t stream) {
    constexpr int vec = 16 / sizeof(T);
    const bool packs = s.cols % vec == 0 && aligned16(a) && (!b || aligned16(b)) && (!b || aligned16(sum)) && aligned16(y) &&
                       aligned16(w) && aligned16(bias);
    auto* kernel = packs ? residual_layer_norm_forward_rows<T, vec> : residual_layer_norm_forward_rows<T, 1>;
    const std::int64_t blocks = (s.rows + kForwardWarpsPerBlock - 1) / kForwardWarpsPerBlock;
    kernel<<<static_cast<unsigned>(blocks), kForwardWarpsPerBlock * 32, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(w), static_cast<const T*>(bias), eps, s.rows,
        static_cast<int>(s.cols), static_cast<T*>(sum), static_cast<T*>(y), mean, rstd);
    check_launch("layer norm forward", "rows", s.rows, s.cols);
}

}  // namespace

void residual_layer_norm_forward_cuda(const void* a, const void* b, const void* w, const void* bias, Dtype dtype, float eps,
                                      const LayerNormShape& shape, void* s, void* y, float* mean, float* rstd, void* stream) {
    check_rows("layer norm", shape);
    if (shape.rows > static_cast<std::int64_t>(0x7fffffff) * kForwardWarpsPerBlock)
        throw std::invalid_argument("layer norm forward: " + std::to_string(shape.rows) + " rows, more than a grid holds");
    auto* st = static_cast<cudaStream_t>(stream);
    if (dtype == Dtype::F32) forward<float>(a, b, w, bias, eps, shape, s, y, mean, rstd, st);
    else forward<__nv_bfloat16>(a, b, w, bias, eps, shape, s, y, mean, rstd, st);
}

std::int64_t layer_norm_scratch_floats(const LayerNormShape& s) {
    check_rows("layer norm", s);
    return 2 * slabs(s.rows).warps * s.cols;  // one block per warp at most
}

void layer_norm_backward_cuda(const void* dy, const void* x, const void* w, Dtype dtype, const float* mean,
                              const float* rstd, const LayerNormShape& shape, void* dx, float* dw, float* db,
                              float* scratch, void* stream, const void* dres) {
    check_rows("layer norm", shape);
    auto* st = static_cast<cudaStream_t>(stream);
    if (dtype == Dtype::F32) backward<float>(dy, x, w, mean, rstd, shape, dres, dx, dw, db, scratch, st);
    else backward<__nv_bfloat16>(dy, x, w, mean, rstd, shape, dres, dx, dw, db, scratch, st);
}

}  // namespace mds::kernels
