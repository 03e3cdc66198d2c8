// CUDA kernels of kernels/bias_grad.h. The slab kernel: a block of 8 warps per (tile of columns, slab of rows);
// each lane owns kVec consecutive columns of the tile (16-byte loads where the rows allow), each warp every 8th row
// of the slab; the warps' sums meet in shared memory and the block writes one partial sum per column.
// kernels/column_sums.h adds the slabs' partial sums in a fixed order, in double. The slabs depend only on the shape.
#include "bias_grad.h"
#include "column_sums.h"
#include "cuda_common.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace mds::kernels {
namespace {

constexpr int kWarps = 8;
constexpr std::int64_t kTargetBlocks = 1024;  // slabs × tiles aimed at (a few waves on 132 SMs)
constexpr std::int64_t kMinRowsPerSlab = 64;

struct Slabs {
    std::int64_t rows_per_slab, count;
};

// Tiles are 32 · 8 columns wide whatever the dtype and path, so that the slabs never depend on them.
std::int64_t tiles(std::int64_t cols) { return (cols + 255) / 256; }

Slabs slabs(const BiasGradShape& s) {
    const std::int64_t want = std::max<std::int64_t>(1, kTargetBlocks / tiles(s.cols));
    const std::int64_t per = std::max(kMinRowsPerSlab, (s.rows + want - 1) / want);
    return {per, (s.rows + per - 1) / per};
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kWarps * 32)
bias_grad_slabs(const T* __restrict__ dy, std::int64_t rows, int cols, std::int64_t rows_per_slab,
                float* __restrict__ scratch) {
    constexpr int kTile = 256;  // columns per tile: 32 lanes × 8
    constexpr int kPerLane = kTile / 32 / kVec;  // packs per lane
    __shared__ float part[kWarps][kTile];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int c0 = blockIdx.x * kTile;
    const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * rows_per_slab;
    const std::int64_t r1 = min(rows, r0 + rows_per_slab);
    float acc[kPerLane][kVec];
#pragma unroll
    for (int p = 0; p < kPerLane; ++p)
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[p][k] = 0.0f;
    for (std::int64_t r = r0 + warp; r < r1; r += kWarps) {
        const T* row = dy + r * cols;
#pragma unroll
        for (int p = 0; p < kPerLane; ++p) {
            const int c = c0 + (p * 32 + lane) * kVec;
            if (c < cols) {  // kVec > 1 only where cols % kVec == 0: the whole pack is in the row
                const Pack<T, kVec> v = *reinterpret_cast<const Pack<T, kVec>*>(row + c);
#pragma unroll
                for (int k = 0; k < kVec; ++k) acc[p][k] += to_float(v.v[k]);
            }
        }
    }
#pragma unroll
    for (int p = 0; p < kPerLane; ++p)
#pragma unroll
        for (int k = 0; k < kVec; ++k) part[warp][(p * 32 + lane) * kVec + k] = acc[p][k];
    __syncthreads();
    float* out = scratch + static_cast<std::int64_t>(blockIdx.y) * cols;
    for (int j = threadIdx.x; j < kTile; j += blockDim.x) {
        const int c = c0 + j;
        if (c >= cols) continue;
        float s = 0.0f;
        for (int w = 0; w < kWarps; ++w) s += part[w][j];
        out[c] = s;
    }
}

template <typename T>
void launch(const void* dy, const BiasGradShape& s, float* db, float* scratch, cudaStream_t stream) {
    const Slabs sl = slabs(s);
    const dim3 grid(static_cast<unsigned>(tiles(s.cols)), static_cast<unsigned>(sl.count));
    const int cols = static_cast<int>(s.cols);
    constexpr int vec = 16 / sizeof(T);
    const bool packs = s.cols % vec == 0 && reinterpret_cast<std::uintptr_t>(dy) % 16 == 0;
    auto* kernel = packs ? bias_grad_slabs<T, vec> : bias_grad_slabs<T, 1>;
    kernel<<<grid, kWarps * 32, 0, stream>>>(static_cast<const T*>(dy), s.rows, cols, sl.rows_per_slab, scratch);
    check_launch("bias grad", "slabs", s.rows, s.cols);
    column_sums_cuda(scratch, sl.count, cols, db, cols, nullptr, stream, "bias grad");
}

}  // namespace

std::int64_t bias_grad_scratch_floats(const BiasGradShape& s) {
    check_rows("bias grad", s);
    return slabs(s).count * s.cols;
}

void bias_grad_cuda(const void* dy, Dtype dtype, const BiasGradShape& shape, float* db, float* scratch, void* stream) {
    check_rows("bias grad", shape);
    auto* st = static_cast<cudaStream_t>(stream);
    if (dtype == Dtype::F32) launch<float>(dy, shape, db, scratch, st);
    else launch<__nv_bfloat16>(dy, shape, db, scratch, st);
}

}  // namespace mds::kernels
