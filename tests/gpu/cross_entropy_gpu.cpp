// GPU test of kernels/cross_entropy.cu against its CPU reference (kernels/cross_entropy_ref.cpp): losses,
// log-sum-exps and logit gradients over shapes that take the 16-byte path and the one-value path (odd widths, an
// unaligned start), padded rows, fp32 and bf16, large logits, rows with -inf and with +inf, labels at the
// vocabulary's ends and outside it. Prints one line per
// case with the largest error seen relative to its tolerance; exit 0 when every case is within tolerance, 1 when
// one is not, 77 (skipped) without a CUDA device. Run by tests/gpu/test_kernels_gpu.py (and the GPU pack's run.sh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu_support.h"
#include "kernels/cross_entropy.h"
#include "kernels/cross_entropy_ref.h"

namespace {

using mds::kernels::CrossEntropyShape;
using mds::kernels::Dtype;
using mds::gpu_test::cuda_ok;
using mds::gpu_test::DeviceBuffer;

struct Case {
    std::string name;
    CrossEntropyShape shape;
    Dtype dtype;
    float scale;        // logits ~ N(0, scale²)
    bool extremes;      // row 0 gets a logit of 1e4, row 1 some -inf, row 5 two +inf, the last row equal logits
    bool bad_labels;    // labels -1 and vocab on two rows: NaN losses
    std::size_t offset = 0;  // elements between an aligned allocation and the logits (and their gradient)
};

float value(const std::vector<std::uint16_t>& bf, const std::vector<float>& f, Dtype d, std::size_t i) {
    return d == Dtype::F32 ? f[i] : mds::kernels::bf16_to_float(bf[i]);
}

// Runs one case; returns the worst error / tolerance ratio (> 1: a failure), or +inf on a mismatch of NaNs.
double run_case(const Case& c, std::mt19937_64& rng) {
    const auto& s = c.shape;
    const std::size_t n = static_cast<std::size_t>(s.rows * s.stride);
    const std::size_t elt = c.dtype == Dtype::F32 ? 4 : 2;
    std::normal_distribution<float> normal(0.0f, c.scale);
    std::vector<float> f32(c.dtype == Dtype::F32 ? n : 0);
    std::vector<std::uint16_t> bf16(c.dtype == Dtype::BF16 ? n : 0);
    auto set = [&](std::size_t i, float v) {
        if (c.dtype == Dtype::F32) f32[i] = v;
        else bf16[i] = mds::kernels::float_to_bf16(v);
    };
    for (std::size_t i = 0; i < n; ++i) set(i, normal(rng));
    const auto at = [&](std::int64_t r, std::int64_t j) { return static_cast<std::size_t>(r * s.stride + j); };
    if (c.extremes && s.rows >= 3) {
        set(at(0, s.vocab / 2), 1e4f);
        for (std::int64_t j = 0; j < s.vocab; j += 3) set(at(1, j), -std::numeric_limits<float>::infinity());
        set(at(1, 1), 0.5f);
        for (std::int64_t j = 0; j < s.vocab; ++j) set(at(s.rows - 1, j), 2.0f);
        if (s.rows >= 7 && s.vocab >= 2) {  // an overflowed row: the log-sum-exp +inf, not NaN
            set(at(5, 0), std::numeric_limits<float>::infinity());
            set(at(5, s.vocab - 1), std::numeric_limits<float>::infinity());
        }
    }
    std::vector<std::int64_t> labels(static_cast<std::size_t>(s.rows));
    std::uniform_int_distribution<std::int64_t> pick(0, s.vocab - 1);
    for (auto& l : labels) l = pick(rng);
    labels[0] = 0;
    labels.back() = s.vocab - 1;
    if (c.extremes && s.rows >= 3) labels[1] = 1;  // the finite logit of the -inf row
    if (c.bad_labels && s.rows >= 4) {
        labels[2] = -1;
        labels[3] = s.vocab;
    }
    std::vector<float> dloss(static_cast<std::size_t>(s.rows));
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    for (auto& g : dloss) g = unit(rng) / static_cast<float>(s.rows);
    if (s.rows >= 5) dloss[4] = 0.0f;  // a masked token

    // The reference.
    std::vector<float> loss_ref(labels.size()), lse_ref(labels.size());
    const void* host_logits = c.dtype == Dtype::F32 ? static_cast<const void*>(f32.data()) : bf16.data();
    mds::kernels::cross_entropy_forward_ref(host_logits, c.dtype, s, labels.data(), loss_ref.data(), lse_ref.data(), 0,
                                            s.rows);
    std::vector<float> d_ref_f(c.dtype == Dtype::F32 ? n : 0, -7.0f);
    std::vector<std::uint16_t> d_ref_b(c.dtype == Dtype::BF16 ? n : 0, 0x7F7F);
    void* host_d = c.dtype == Dtype::F32 ? static_cast<void*>(d_ref_f.data()) : d_ref_b.data();
    mds::kernels::cross_entropy_backward_ref(host_logits, c.dtype, s, labels.data(), lse_ref.data(), dloss.data(),
                                             host_d, 0, s.rows);

    // The kernels; the gradient buffer starts with the same sentinel so that its padding is compared too.
    const std::size_t off = c.offset * elt;
    DeviceBuffer logits_buf(n * elt, off), d_labels(labels.size() * 8), d_loss(labels.size() * 4),
        d_lse(labels.size() * 4), d_dloss(labels.size() * 4), grad_buf(n * elt, off);
    void* const logits_dev = logits_buf.at();
    void* const grad_dev = grad_buf.at();
    std::vector<float> sentinel_f(d_ref_f.size(), -7.0f);
    std::vector<std::uint16_t> sentinel_b(d_ref_b.size(), 0x7F7F);
    const void* host_sentinel = c.dtype == Dtype::F32 ? static_cast<const void*>(sentinel_f.data()) : sentinel_b.data();
    bool ok = cuda_ok(cudaMemcpy(logits_dev, host_logits, n * elt, cudaMemcpyHostToDevice), "copy logits") &&
              cuda_ok(cudaMemcpy(d_labels.p, labels.data(), labels.size() * 8, cudaMemcpyHostToDevice), "copy labels") &&
              cuda_ok(cudaMemcpy(d_dloss.p, dloss.data(), dloss.size() * 4, cudaMemcpyHostToDevice), "copy dloss") &&
              cuda_ok(cudaMemcpy(grad_dev, host_sentinel, n * elt, cudaMemcpyHostToDevice), "copy sentinel");
    if (!ok) return std::numeric_limits<double>::infinity();
    auto* labels_dev = static_cast<const std::int64_t*>(d_labels.p);
    mds::kernels::cross_entropy_forward_cuda(logits_dev, c.dtype, s, labels_dev, static_cast<float*>(d_loss.p),
                                             static_cast<float*>(d_lse.p), nullptr);
    mds::kernels::cross_entropy_backward_cuda(logits_dev, c.dtype, s, labels_dev, static_cast<const float*>(d_lse.p),
                                              static_cast<const float*>(d_dloss.p), grad_dev, nullptr);
    if (!cuda_ok(cudaDeviceSynchronize(), "kernels")) return std::numeric_limits<double>::infinity();
    std::vector<float> loss(labels.size()), lse(labels.size());
    std::vector<float> d_f(d_ref_f.size());
    std::vector<std::uint16_t> d_b(d_ref_b.size());
    void* host_got = c.dtype == Dtype::F32 ? static_cast<void*>(d_f.data()) : d_b.data();
    ok = cuda_ok(cudaMemcpy(loss.data(), d_loss.p, loss.size() * 4, cudaMemcpyDeviceToHost), "copy loss") &&
         cuda_ok(cudaMemcpy(lse.data(), d_lse.p, lse.size() * 4, cudaMemcpyDeviceToHost), "copy lse") &&
         cuda_ok(cudaMemcpy(host_got, grad_dev, n * elt, cudaMemcpyDeviceToHost), "copy grad");
    if (!ok) return std::numeric_limits<double>::infinity();

    // Tolerances: fp32 sums in another order, so the log-sum-exp may differ by a few ulps of its value; each
    // probability then by that much relatively; a bf16 gradient by one bf16 ulp on top.
    double worst = 0;
    auto judge = [&](double got, double want, double tol, const char* what, std::int64_t r, std::int64_t j) {
        if (std::isnan(want) || std::isnan(got)) {
            if (std::isnan(want) != std::isnan(got)) {
                std::fprintf(stderr, "  %s row %lld col %lld: got %g, want %g\n", what, static_cast<long long>(r),
                             static_cast<long long>(j), got, want);
                worst = std::numeric_limits<double>::infinity();
            }
            return;
        }
        if (got == want) return;
        const double ratio = std::fabs(got - want) / tol;
        if (ratio > 1 && worst <= 1)
            std::fprintf(stderr, "  %s row %lld col %lld: got %.9g, want %.9g (tolerance %.3g)\n", what,
                         static_cast<long long>(r), static_cast<long long>(j), got, want, tol);
        worst = std::max(worst, ratio);
    };
    const double fp32_ulp = std::ldexp(1.0, -23);
    for (std::int64_t r = 0; r < s.rows; ++r) {
        const auto ri = static_cast<std::size_t>(r);
        const double lse_tol = 1e-5 + 8 * fp32_ulp * std::fabs(lse_ref[ri]);
        judge(lse[ri], lse_ref[ri], lse_tol, "lse", r, -1);
        const std::int64_t t = labels[ri];
        const double xt = (t >= 0 && t < s.vocab) ? value(bf16, f32, c.dtype, at(r, t)) : 0.0;
        judge(loss[ri], loss_ref[ri], lse_tol + 8 * fp32_ulp * std::fabs(xt), "loss", r, t);
        const double exponent_tol = lse_tol + 4 * fp32_ulp * std::fabs(lse_ref[ri]);
        for (std::int64_t j = 0; j < s.stride; ++j) {
            const std::size_t i = at(r, j);
            const double want = value(d_ref_b, d_ref_f, c.dtype, i), got = value(d_b, d_f, c.dtype, i);
            if (j >= s.vocab) {  // padding: untouched (the sentinel on both sides)
                judge(got, want, 1e-30, "padding", r, j);
                continue;
            }
            const double g = std::fabs(dloss[ri]);
            const double p = std::isfinite(lse_ref[ri]) ? std::exp(value(bf16, f32, c.dtype, i) - lse_ref[ri]) : 0.0;
            double tol = g * (1e-7 + p * (exponent_tol + 4 * fp32_ulp)) + 1e-30;
            if (c.dtype == Dtype::BF16) tol += std::fabs(want) * std::ldexp(1.0, -7);
            judge(got, want, tol, "dlogits", r, j);
        }
    }
    return worst;
}

}  // namespace

int main() {
    if (!mds::gpu_test::have_device("cross_entropy_gpu")) return 77;
    const std::vector<Case> cases = {
        {"gpt2 vocab, 16-byte path, bf16", {64, 50304, 50304}, Dtype::BF16, 2.0f, true, true},
        {"gpt2 vocab, 16-byte path, fp32", {64, 50304, 50304}, Dtype::F32, 2.0f, true, true},
        {"odd vocab, one-value path, bf16", {33, 50257, 50257}, Dtype::BF16, 1.0f, true, true},
        {"odd vocab, one-value path, fp32", {33, 50257, 50257}, Dtype::F32, 1.0f, false, false},
        {"padded rows, bf16", {7, 1000, 1024}, Dtype::BF16, 3.0f, true, true},
        {"padded rows, fp32", {9, 1000, 1010}, Dtype::F32, 3.0f, false, true},
        {"vocab smaller than a block, bf16", {16, 8, 8}, Dtype::BF16, 1.0f, true, true},
        {"one logit", {1, 1, 1}, Dtype::F32, 1.0f, false, false},
        {"logits 2 bytes past an aligned address, bf16", {8, 4096, 4096}, Dtype::BF16, 2.0f, true, true, 1},
        {"logits 4 bytes past an aligned address, fp32", {8, 4096, 4096}, Dtype::F32, 2.0f, true, true, 1},
        {"a step of GPT-2 124M's logits, bf16", {2048, 50304, 50304}, Dtype::BF16, 4.0f, false, false},
    };
    std::mt19937_64 rng(1234);
    return mds::gpu_test::run_cases(
        "cross_entropy_gpu", cases, [&](const Case& c) { return run_case(c, rng); },
        [](const Case& c) {
            return c.name + " (" + std::to_string(c.shape.rows) + " x " + std::to_string(c.shape.vocab) + ", stride " +
                   std::to_string(c.shape.stride) + ", " + mds::kernels::dtype_name(c.dtype) + ")";
        });
}
