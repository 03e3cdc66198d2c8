// GPU test of kernels/bias_gelu.cu against its CPU reference, on fresh random inputs each run and
// with the output poisoned first, so unwritten elements fail. Exits 77 (skipped) without a GPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/bias_gelu.h"

namespace {

#define CHECK_CUDA(x)                                                                      \
    do {                                                                                   \
        cudaError_t err_ = (x);                                                            \
        if (err_ != cudaSuccess) {                                                         \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_)); \
            return false;                                                                  \
        }                                                                                  \
    } while (0)

double rel_error(const std::vector<float>& a, const std::vector<float>& ref) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        num += (a[i] - ref[i]) * static_cast<double>(a[i] - ref[i]);
        den += ref[i] * static_cast<double>(ref[i]);
    }
    return std::sqrt(num / (den > 0 ? den : 1));
}

bool check(std::size_t rows, std::size_t cols, std::mt19937& rng) {
    std::normal_distribution<float> dist(0.f, 2.f);
    std::vector<float> x(rows * cols), b(cols), dy(rows * cols);
    for (auto& v : x) v = dist(rng);
    for (auto& v : b) v = dist(rng);
    for (auto& v : dy) v = dist(rng);
    std::vector<float> ref(x.size()), dref(x.size()), out(x.size()), dx(x.size());
    mds::kernels::bias_gelu_forward_cpu(ref.data(), x.data(), b.data(), rows, cols);
    mds::kernels::bias_gelu_backward_cpu(dref.data(), dy.data(), x.data(), b.data(), rows, cols);
    float *dX, *dB, *dO, *dDY, *dDX;
    std::size_t bytes = x.size() * sizeof(float);
    CHECK_CUDA(cudaMalloc(&dX, bytes));
    CHECK_CUDA(cudaMalloc(&dB, cols * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&dO, bytes));
    CHECK_CUDA(cudaMalloc(&dDY, bytes));
    CHECK_CUDA(cudaMalloc(&dDX, bytes));
    CHECK_CUDA(cudaMemcpy(dX, x.data(), bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dB, b.data(), cols * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dDY, dy.data(), bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset(dO, 0xFF, bytes));  // NaN poison
    CHECK_CUDA(cudaMemset(dDX, 0xFF, bytes));
    CHECK_CUDA(static_cast<cudaError_t>(mds::kernels::bias_gelu_forward_cuda(dO, dX, dB, rows, cols, nullptr)));
    CHECK_CUDA(static_cast<cudaError_t>(mds::kernels::bias_gelu_backward_cuda(dDX, dDY, dX, dB, rows, cols, nullptr)));
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(out.data(), dO, bytes, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(dx.data(), dDX, bytes, cudaMemcpyDeviceToHost));
    for (float* p : {dX, dB, dO, dDY, dDX}) cudaFree(p);
    double ef = rel_error(out, ref), eb = rel_error(dx, dref);
    bool ok = ef < 1e-5 && eb < 1e-5;  // fp32 tolerance
    std::printf("%s bias_gelu rows=%zu cols=%zu forward rel err %.2e backward rel err %.2e\n", ok ? "OK" : "NOT OK", rows,
                cols, ef, eb);
    return ok;
}

}  // namespace

int main() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        std::printf("no CUDA device: skipped\n");
        return 77;
    }
    std::mt19937 rng(std::random_device{}());
    bool ok = true;
    for (auto [r, c] : {std::pair<std::size_t, std::size_t>{1, 1}, {3, 7}, {64, 3072}, {513, 1024}, {1000, 4099}})
        ok = check(r, c, rng) && ok;
    return ok ? 0 : 1;
}
