// GPU test of kernels/bias_grad.cu against its CPU reference (kernels/bias_grad_ref.cpp): the bias gradients of
// GPT-2 124M's Linear layers (widths 2304, 768, 3072 over 16 x 1024 rows) and 1.5B's (4800, 1600, 6400 over
// 8 x 1024) in bf16, an odd width in fp32 and an unaligned start in bf16 (the one-value path), fp32's 16-byte
// path, a width below one tile, a single row and a single column. Prints one line per case with the largest error relative to its tolerance
// (fp32 sums within a block: 16 ulp · √rows · Σ|dy|); exit 0 when every case is within it, 1 when one is not, 77
// (skipped) without a CUDA device. Also checks that two runs give the same bits. Run by
// tests/gpu/test_kernels_gpu.py (and the GPU pack's run.sh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_support.h"
#include "kernels/bias_grad.h"
#include "kernels/bias_grad_ref.h"
#include "kernels/dtype.h"

namespace {

using namespace mds::kernels;
using mds::gpu_test::cuda_ok;
using mds::gpu_test::DeviceBuffer;

struct Case {
    std::string name;
    BiasGradShape shape;
    Dtype dtype;
    std::size_t offset = 0;  // elements between an aligned allocation and dy
};

double run_case(const Case& c, std::mt19937_64& rng) {
    const auto& s = c.shape;
    const auto n = static_cast<std::size_t>(s.rows * s.cols), cols = static_cast<std::size_t>(s.cols);
    const std::size_t elt = c.dtype == Dtype::F32 ? 4 : 2;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> f(n);
    std::vector<std::uint16_t> b(n);
    for (std::size_t i = 0; i < n; ++i) {
        const float v = 0.01f * normal(rng) + 0.002f;  // a mean, so that the sums do not cancel to nothing
        b[i] = float_to_bf16(v);
        f[i] = c.dtype == Dtype::F32 ? v : bf16_to_float(b[i]);
    }
    const void* host = c.dtype == Dtype::F32 ? static_cast<const void*>(f.data()) : b.data();
    std::vector<float> want(cols);
    bias_grad_ref(host, c.dtype, s, want.data());

    const std::size_t off = c.offset * elt;
    DeviceBuffer dy_buf(n * elt, off), d_db(cols * 4), d_scratch(static_cast<std::size_t>(bias_grad_scratch_floats(s)) * 4);
    void* const dy_dev = dy_buf.at();
    if (!cuda_ok(cudaMemcpy(dy_dev, host, n * elt, cudaMemcpyHostToDevice), "copy dy")) return INFINITY;
    std::vector<float> got(cols), again(cols);
    for (auto* out : {&got, &again}) {
        bias_grad_cuda(dy_dev, c.dtype, s, static_cast<float*>(d_db.p), static_cast<float*>(d_scratch.p), nullptr);
        if (!cuda_ok(cudaDeviceSynchronize(), "kernels") ||
            !cuda_ok(cudaMemcpy(out->data(), d_db.p, cols * 4, cudaMemcpyDeviceToHost), "copy db"))
            return INFINITY;
    }
    if (std::memcmp(got.data(), again.data(), cols * 4) != 0) {
        std::fprintf(stderr, "  two runs gave different sums\n");
        return INFINITY;
    }
    double worst = 0;
    const double fp32_ulp = std::ldexp(1.0, -23);
    for (std::size_t j = 0; j < cols; ++j) {
        double magnitude = 0;
        for (std::int64_t r = 0; r < s.rows; ++r) magnitude += std::fabs(static_cast<double>(f[static_cast<std::size_t>(r) * cols + j]));
        const double tol = 16 * fp32_ulp * std::sqrt(static_cast<double>(s.rows)) * magnitude + 1e-30;
        const double ratio = std::fabs(static_cast<double>(got[j]) - want[j]) / tol;
        if (ratio > 1 && worst <= 1) std::fprintf(stderr, "  column %zu: got %.9g, want %.9g (tolerance %.3g)\n", j, got[j], want[j], tol);
        worst = std::max(worst, std::isnan(got[j]) ? INFINITY : ratio);
    }
    return worst;
}

}  // namespace

int main() {
    if (!mds::gpu_test::have_device("bias_grad_gpu")) return 77;
    const std::vector<Case> cases = {
        {"GPT-2 124M QKV: 16 x 1024 tokens, width 2304, bf16", {16384, 2304}, Dtype::BF16},
        {"GPT-2 124M projections: width 768, bf16", {16384, 768}, Dtype::BF16},
        {"GPT-2 124M MLP: width 3072, bf16", {16384, 3072}, Dtype::BF16},
        {"GPT-2 1.5B QKV: 8 x 1024 tokens, width 4800, bf16", {8192, 4800}, Dtype::BF16},
        {"GPT-2 1.5B projections: width 1600, bf16", {8192, 1600}, Dtype::BF16},
        {"GPT-2 1.5B MLP: width 6400, bf16", {8192, 6400}, Dtype::BF16},
        {"odd width, one-value path, fp32", {1000, 771}, Dtype::F32},
        {"fp32, 16-byte path", {3000, 1024}, Dtype::F32},
        {"below one tile, bf16", {777, 40}, Dtype::BF16},
        {"dy 2 bytes past an aligned address: one-value path, bf16", {1000, 768}, Dtype::BF16, 1},
        {"one row", {1, 768}, Dtype::BF16},
        {"one column", {50, 1}, Dtype::F32},
    };
    std::mt19937_64 rng(97);
    return mds::gpu_test::run_cases(
        "bias_grad_gpu", cases, [&](const Case& c) { return run_case(c, rng); }, mds::gpu_test::describe_rows<Case>);
}
