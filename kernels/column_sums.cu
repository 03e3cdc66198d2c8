// CUDA kernel of kernels/column_sums.h.
#include "column_sums.h"
#include "cuda_common.cuh"

#include <cuda_runtime.h>

#include <cstdint>

namespace mds::kernels {
namespace {

constexpr int kColumns = 32;  // per block: one per lane
constexpr int kGroups = 32;   // warps per block, each adding every kGroups-th part of the block's columns

__global__ void __launch_bounds__(kColumns * kGroups)
column_sums(const float* __restrict__ parts_data, std::int64_t parts, int width, float* __restrict__ out_a, int split,
            float* __restrict__ out_b) {
    __shared__ double group_sums[kGroups][kColumns];
    const int lane = threadIdx.x % kColumns, group = threadIdx.x / kColumns;
    const int c = blockIdx.x * kColumns + lane;
    double s = 0.0;
    if (c < width) {
        for (std::int64_t k = group; k < parts; k += kGroups) s += parts_data[k * width + c];
    }
    group_sums[group][lane] = s;
    __syncthreads();
    if (group == 0 && c < width) {
        double t = 0.0;
        for (int g = 0; g < kGroups; ++g) t += group_sums[g][lane];
        if (c < split) {
            out_a[c] = static_cast<float>(t);
        } else {
            out_b[c - split] = static_cast<float>(t);
        }
    }
}

}  // namespace

void column_sums_cuda(const float* parts_data, std::int64_t parts, int width, float* out_a, int split, float* out_b,
                      void* stream, const char* op) {
    const auto blocks = static_cast<unsigned>((width + kColumns - 1) / kColumns);
    column_sums<<<blocks, kColumns * kGroups, 0, static_cast<cudaStream_t>(stream)>>>(parts_data, parts, width, out_a, split,
                                                                                    out_b);
    check_launch(op, "columns", parts, width);
}

}  // namespace mds::kernels
