// GPU test of kernels/layer_norm.cu against its CPU references (kernels/layer_norm_ref.cpp). The backward: dx, dw and db over
// GPT-2 124M's and 1.5B's LayerNorm shapes in bf16, an odd width in fp32 and an unaligned start in bf16 (the
// one-value path), widths that fit 4, 2 and 1 warps per block (BLOOM-176B's 14336) in shared memory, one whose
// weight does not fit beside the sums, a single row and two columns. Prints one line per case with the
// largest error relative to its tolerance. The forward with the residual sum: s, y, mean and rstd over the same
// models' shapes, fp32 widths with and without 16-byte loads, an unaligned start, no residual, one row, two columns.
// Exit 0 when every case is within it, 1 when one is not, 77 (skipped)
// without a CUDA device. Run by tests/gpu/test_kernels_gpu.py (and the GPU pack's run.sh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "gpu_support.h"
#include "kernels/dtype.h"
#include "kernels/layer_norm.h"
#include "kernels/layer_norm_ref.h"

namespace {

using namespace mds::kernels;
using mds::gpu_test::cuda_ok;
using mds::gpu_test::DeviceBuffer;

struct Case {
    std::string name;
    LayerNormShape shape;
    Dtype dtype;
    std::size_t offset = 0;  // elements between an aligned allocation and x, dy and dx
    bool dres = false;       // the backward: a residual gradient added to dx
};

// Values of an array of `dtype` as fp32.
float at(const std::vector<std::uint16_t>& bf, const std::vector<float>& f, Dtype d, std::size_t i) {
    return d == Dtype::F32 ? f[i] : bf16_to_float(bf[i]);
}

double run_case(const Case& c, std::mt19937_64& rng) {
    const auto& s = c.shape;
    const auto n = static_cast<std::size_t>(s.rows * s.cols), cols = static_cast<std::size_t>(s.cols);
    const std::size_t elt = c.dtype == Dtype::F32 ? 4 : 2;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> xf(n), dyf(n), wf(cols), dresf(c.dres ? n : 0);
    std::vector<std::uint16_t> xb(n), dyb(n), wb(cols), dresb(c.dres ? n : 0);
    auto fill = [&](std::vector<float>& f, std::vector<std::uint16_t>& b, float scale, float shift) {
        for (std::size_t i = 0; i < f.size(); ++i) {
            const float v = scale * normal(rng) + shift;
            b[i] = float_to_bf16(v);
            f[i] = c.dtype == Dtype::F32 ? v : bf16_to_float(b[i]);
        }
    };
    fill(xf, xb, 2.0f, 0.3f);
    fill(dyf, dyb, 0.01f, 0.0f);
    fill(wf, wb, 0.2f, 1.0f);
    fill(dresf, dresb, 0.01f, 0.0f);
    std::vector<float> mean(static_cast<std::size_t>(s.rows)), rstd(static_cast<std::size_t>(s.rows));
    for (std::int64_t r = 0; r < s.rows; ++r) {
        double mu = 0, var = 0;
        for (std::size_t j = 0; j < cols; ++j) mu += xf[static_cast<std::size_t>(r) * cols + j];
        mu /= static_cast<double>(cols);
        for (std::size_t j = 0; j < cols; ++j) {
            const double d = xf[static_cast<std::size_t>(r) * cols + j] - mu;
            var += d * d;
        }
        mean[static_cast<std::size_t>(r)] = static_cast<float>(mu);
        rstd[static_cast<std::size_t>(r)] = static_cast<float>(1 / std::sqrt(var / static_cast<double>(cols) + 1e-5));
    }
    const void* hx = c.dtype == Dtype::F32 ? static_cast<const void*>(xf.data()) : xb.data();
    const void* hdy = c.dtype == Dtype::F32 ? static_cast<const void*>(dyf.data()) : dyb.data();
    const void* hw = c.dtype == Dtype::F32 ? static_cast<const void*>(wf.data()) : wb.data();
    const void* hdres = !c.dres ? nullptr : c.dtype == Dtype::F32 ? static_cast<const void*>(dresf.data()) : dresb.data();
    std::vector<float> dx_ref_f(c.dtype == Dtype::F32 ? n : 0), dw_ref(cols), db_ref(cols);
    std::vector<std::uint16_t> dx_ref_b(c.dtype == Dtype::BF16 ? n : 0);
    void* dx_ref = c.dtype == Dtype::F32 ? static_cast<void*>(dx_ref_f.data()) : dx_ref_b.data();
    layer_norm_backward_ref(hdy, hx, hw, c.dtype, mean.data(), rstd.data(), s, dx_ref, dw_ref.data(), db_ref.data(), hdres);

    const std::size_t off = c.offset * elt;
    DeviceBuffer x_buf(n * elt, off), dy_buf(n * elt, off), d_w(cols * elt), d_mean(mean.size() * 4),
        d_rstd(rstd.size() * 4), dx_buf(n * elt, off), dres_buf(n * elt, off), d_dw(cols * 4), d_db(cols * 4),
        d_scratch(static_cast<std::size_t>(layer_norm_scratch_floats(s)) * 4);
    void* const x_dev = x_buf.at();
    void* const dy_dev = dy_buf.at();
    void* const dx_dev = dx_buf.at();
    bool ok = cuda_ok(cudaMemcpy(x_dev, hx, n * elt, cudaMemcpyHostToDevice), "copy x") &&
              cuda_ok(cudaMemcpy(dy_dev, hdy, n * elt, cudaMemcpyHostToDevice), "copy dy") &&
              cuda_ok(cudaMemcpy(d_w.p, hw, cols * elt, cudaMemcpyHostToDevice), "copy w") &&
              cuda_ok(cudaMemcpy(d_mean.p, mean.data(), mean.size() * 4, cudaMemcpyHostToDevice), "copy mean") &&
              cuda_ok(cudaMemcpy(d_rstd.p, rstd.data(), rstd.size() * 4, cudaMemcpyHostToDevice), "copy rstd") &&
              (!hdres || cuda_ok(cudaMemcpy(dres_buf.at(), hdres, n * elt, cudaMemcpyHostToDevice), "copy dres"));
    if (!ok) return INFINITY;
    layer_norm_backward_cuda(dy_dev, x_dev, d_w.p, c.dtype, static_cast<const float*>(d_mean.p),
                             static_cast<const float*>(d_rstd.p), s, dx_dev, static_cast<float*>(d_dw.p),
                             static_cast<float*>(d_db.p), static_cast<float*>(d_scratch.p), nullptr,
                             hdres ? dres_buf.at() : nullptr);
    std::vector<float> dx_f(c.dtype == Dtype::F32 ? n : 0), dw(cols), db(cols);
    std::vector<std::uint16_t> dx_b(c.dtype == Dtype::BF16 ? n : 0);
    void* hdx = c.dtype == Dtype::F32 ? static_cast<void*>(dx_f.data()) : dx_b.data();
    ok = cuda_ok(cudaDeviceSynchronize(), "kernels") && cuda_ok(cudaMemcpy(hdx, dx_dev, n * elt, cudaMemcpyDeviceToHost), "copy dx") &&
         cuda_ok(cudaMemcpy(dw.data(), d_dw.p, cols * 4, cudaMemcpyDeviceToHost), "copy dw") &&
         cuda_ok(cudaMemcpy(db.data(), d_db.p, cols * 4, cudaMemcpyDeviceToHost), "copy db");
    if (!ok) return INFINITY;

    // dx: the kernel's fp32 row sums against the reference's double ones, so a tolerance on the scale of the terms,
    // rstd · max |dy · w| · max(1, max |x̂|), growing with √cols; in bf16 one rounding of the result more (the two
    // may round an fp32 value to neighbouring bf16 values). dw, db: fp32 sums within the blocks, relative to the
    // sum of the terms' magnitudes.
    double worst = 0;
    const double fp32_ulp = std::ldexp(1.0, -23);
    for (std::int64_t r = 0; r < s.rows; ++r) {
        const auto row = static_cast<std::size_t>(r) * cols;
        double g_max = 0, xhat_max = 1;
        for (std::size_t j = 0; j < cols; ++j) {
            g_max = std::max(g_max, std::fabs(static_cast<double>(at(dyb, dyf, c.dtype, row + j)) * at(wb, wf, c.dtype, j)));
            xhat_max = std::max(xhat_max, std::fabs((at(xb, xf, c.dtype, row + j) - mean[static_cast<std::size_t>(r)]) *
                                                    static_cast<double>(rstd[static_cast<std::size_t>(r)])));
        }
        const double scale = rstd[static_cast<std::size_t>(r)] * g_max * xhat_max;
        for (std::size_t j = 0; j < cols; ++j) {
            const std::size_t i = row + j;
            const double want = at(dx_ref_b, dx_ref_f, c.dtype, i), got = at(dx_b, dx_f, c.dtype, i);
            double tol = 16 * fp32_ulp * std::sqrt(static_cast<double>(cols)) * scale + 1e-30;
            if (c.dtype == Dtype::BF16) tol += std::fabs(want) * std::ldexp(1.0, -7);
            const double ratio = std::fabs(got - want) / tol;
            if (ratio > 1 && worst <= 1)
                std::fprintf(stderr, "  dx row %lld col %zu: got %.9g, want %.9g (tolerance %.3g)\n",
                             static_cast<long long>(r), j, got, want, tol);
            worst = std::max(worst, std::isnan(got) ? INFINITY : ratio);
        }
    }
    for (std::size_t j = 0; j < cols; ++j) {
        double abs_dw = 0, abs_db = 0;
        for (std::int64_t r = 0; r < s.rows; ++r) {
            const std::size_t i = static_cast<std::size_t>(r) * cols + j;
            const double xhat = (at(xb, xf, c.dtype, i) - mean[static_cast<std::size_t>(r)]) * rstd[static_cast<std::size_t>(r)];
            abs_dw += std::fabs(at(dyb, dyf, c.dtype, i) * xhat);
            abs_db += std::fabs(at(dyb, dyf, c.dtype, i));
        }
        const double tol_dw = 16 * fp32_ulp * std::sqrt(static_cast<double>(s.rows)) * abs_dw + 1e-30;
        const double tol_db = 16 * fp32_ulp * std::sqrt(static_cast<double>(s.rows)) * abs_db + 1e-30;
        const double rw = std::fabs(static_cast<double>(dw[j]) - dw_ref[j]) / tol_dw;
        const double rb = std::fabs(static_cast<double>(db[j]) - db_ref[j]) / tol_db;
        if (std::max(rw, rb) > 1 && worst <= 1)
            std::fprintf(stderr, "  column %zu: dw %.9g (want %.9g), db %.9g (want %.9g)\n", j, dw[j], dw_ref[j], db[j], db_ref[j]);
        worst = std::max({worst, std::isnan(dw[j]) ? INFINITY : rw, std::isnan(db[j]) ? INFINITY : rb});
    }
    return worst;
}

// The forward with the residual sum against its reference: s bit for bit (the same fp32 sums, rounded the same way),
// y within the fp32 row sums' error plus, in bf16, one rounding, mean and rstd to the row sums' error. `residual`
// false: y of a alone (no b, no s).
double run_forward_case(const Case& c, bool residual, std::mt19937_64& rng) {
    const auto& sh = c.shape;
    const auto n = static_cast<std::size_t>(sh.rows * sh.cols), cols = static_cast<std::size_t>(sh.cols);
    const auto rows = static_cast<std::size_t>(sh.rows);
    const std::size_t elt = c.dtype == Dtype::F32 ? 4 : 2;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // Host arrays of the dtype's bytes, and their values as fp32.
    const auto make = [&](std::size_t count, float scale, float shift, std::vector<float>& values) {
        std::vector<unsigned char> bytes(count * elt);
        values.resize(count);
        for (std::size_t i = 0; i < count; ++i) {
            const float v = scale * normal(rng) + shift;
            if (c.dtype == Dtype::F32) {
                std::memcpy(bytes.data() + 4 * i, &v, 4);
                values[i] = v;
            } else {
                const std::uint16_t b = float_to_bf16(v);
                std::memcpy(bytes.data() + 2 * i, &b, 2);
                values[i] = bf16_to_float(b);
            }
        }
        return bytes;
    };
    std::vector<float> av, bv, wv, biasv;
    const auto a = make(n, 2.0f, 0.3f, av);
    const auto b = make(n, 0.5f, -0.1f, bv);
    const auto w = make(cols, 0.2f, 1.0f, wv);
    const auto bias = make(cols, 0.1f, 0.0f, biasv);
    const void* hb = residual ? b.data() : nullptr;
    std::vector<unsigned char> s_ref(n * elt), y_ref(n * elt);
    std::vector<float> mean_ref(rows), rstd_ref(rows);
    residual_layer_norm_forward_ref(a.data(), hb, w.data(), bias.data(), c.dtype, 1e-5f, sh, residual ? s_ref.data() : nullptr,
                                    y_ref.data(), mean_ref.data(), rstd_ref.data());

    const std::size_t off = c.offset * elt;
    DeviceBuffer a_buf(n * elt, off), b_buf(n * elt, off), s_buf(n * elt, off), y_buf(n * elt, off), d_w(cols * elt),
        d_bias(cols * elt), d_mean(rows * 4), d_rstd(rows * 4);
    bool ok = cuda_ok(cudaMemcpy(a_buf.at(), a.data(), n * elt, cudaMemcpyHostToDevice), "copy a") &&
              cuda_ok(cudaMemcpy(b_buf.at(), b.data(), n * elt, cudaMemcpyHostToDevice), "copy b") &&
              cuda_ok(cudaMemcpy(d_w.p, w.data(), cols * elt, cudaMemcpyHostToDevice), "copy w") &&
              cuda_ok(cudaMemcpy(d_bias.p, bias.data(), cols * elt, cudaMemcpyHostToDevice), "copy bias");
    if (!ok) return INFINITY;
    residual_layer_norm_forward_cuda(a_buf.at(), residual ? b_buf.at() : nullptr, d_w.p, d_bias.p, c.dtype, 1e-5f, sh,
                                     residual ? s_buf.at() : nullptr, y_buf.at(), static_cast<float*>(d_mean.p),
                                     static_cast<float*>(d_rstd.p), nullptr);
    std::vector<unsigned char> s_got(n * elt), y_got(n * elt);
    std::vector<float> mean(rows), rstd(rows);
    ok = cuda_ok(cudaDeviceSynchronize(), "kernel") &&
         cuda_ok(cudaMemcpy(s_got.data(), s_buf.at(), n * elt, cudaMemcpyDeviceToHost), "copy s") &&
         cuda_ok(cudaMemcpy(y_got.data(), y_buf.at(), n * elt, cudaMemcpyDeviceToHost), "copy y") &&
         cuda_ok(cudaMemcpy(mean.data(), d_mean.p, rows * 4, cudaMemcpyDeviceToHost), "copy mean") &&
         cuda_ok(cudaMemcpy(rstd.data(), d_rstd.p, rows * 4, cudaMemcpyDeviceToHost), "copy rstd");
    if (!ok) return INFINITY;
    const auto value = [&](const std::vector<unsigned char>& bytes, std::size_t i) {
        if (c.dtype == Dtype::F32) {
            float v;
            std::memcpy(&v, bytes.data() + 4 * i, 4);
            return static_cast<double>(v);
        }
        std::uint16_t v;
        std::memcpy(&v, bytes.data() + 2 * i, 2);
        return static_cast<double>(bf16_to_float(v));
    };
    double worst = 0;
    if (residual && std::memcmp(s_got.data(), s_ref.data(), n * elt) != 0) {
        std::fprintf(stderr, "  s differs from the reference's\n");
        return INFINITY;
    }
    const double fp32_ulp = std::ldexp(1.0, -23), row_err = 16 * fp32_ulp * std::sqrt(static_cast<double>(cols));
    for (std::size_t r = 0; r < rows; ++r) {
        const double rm = std::fabs(mean[r] - mean_ref[r]) / (row_err * (std::fabs(mean_ref[r]) + 1 / rstd_ref[r]) + 1e-30);
        const double rr = std::fabs(rstd[r] - rstd_ref[r]) / (row_err * rstd_ref[r] + 1e-30);
        if (std::max(rm, rr) > 1 && worst <= 1)
            std::fprintf(stderr, "  row %zu: mean %.9g (want %.9g), rstd %.9g (want %.9g)\n", r, mean[r], mean_ref[r], rstd[r],
                         rstd_ref[r]);
        worst = std::max({worst, std::isnan(mean[r]) ? INFINITY : rm, std::isnan(rstd[r]) ? INFINITY : rr});
        for (std::size_t j = 0; j < cols; ++j) {
            const std::size_t i = r * cols + j;
            const double sv = residual ? value(s_ref, i) : av[i];
            const double xhat = (sv - mean_ref[r]) * rstd_ref[r];
            const double want = value(y_ref, i), got = value(y_got, i);
            double tol = row_err * (std::fabs(xhat) + 1 + std::fabs(mean_ref[r]) * rstd_ref[r]) * std::fabs(wv[j]) +
                         4 * fp32_ulp * std::fabs(biasv[j]) + 1e-30;
            if (c.dtype == Dtype::BF16) {  // one bf16 step at the larger of the two: they may round to neighbours
                int e = 0;
                std::frexp(std::max(std::fabs(want), std::fabs(got)), &e);
                tol += std::ldexp(1.0, e - 8);
            }
            const double ratio = std::fabs(got - want) / tol;
            if (ratio > 1 && worst <= 1)
                std::fprintf(stderr, "  y row %zu col %zu: got %.9g, want %.9g (tolerance %.3g)\n", r, j, got, want, tol);
            worst = std::max(worst, std::isnan(got) ? INFINITY : ratio);
        }
    }
    return worst;
}

}  // namespace

int main() {
    if (!mds::gpu_test::have_device("layer_norm_gpu")) return 77;
    const std::vector<Case> cases = {
        {"GPT-2 124M: 16 x 1024 tokens, width 768, bf16", {16384, 768}, Dtype::BF16},
        {"GPT-2 1.5B: 8 x 1024 tokens, width 1600, bf16", {8192, 1600}, Dtype::BF16},
        {"odd width, one-value path, fp32", {1000, 771}, Dtype::F32},
        {"fp32, 16-byte path", {300, 1024}, Dtype::F32},
        {"width 4096: 4 warps per block on an H100, bf16", {256, 4096}, Dtype::BF16},
        {"width 8192: 2 warps per block on an H100, bf16", {96, 8192}, Dtype::BF16},
        {"BLOOM-176B's width 14336: one warp per block, bf16", {64, 14336}, Dtype::BF16},
        {"width 20480: the weight read from global memory, bf16", {32, 20480}, Dtype::BF16},
        {"x, dy, dx 2 bytes past an aligned address: one-value path, bf16", {300, 768}, Dtype::BF16, 1},
        {"one row", {1, 768}, Dtype::BF16},
        {"two columns", {50, 2}, Dtype::F32},
        {"a residual gradient added to dx, GPT-2 124M, bf16", {16384, 768}, Dtype::BF16, 0, true},
        {"a residual gradient added to dx, odd width, one-value path, fp32", {1000, 771}, Dtype::F32, 0, true},
        {"a residual gradient added to dx, 2 bytes past an aligned address, bf16", {300, 768}, Dtype::BF16, 1, true},
    };
    std::mt19937_64 rng(4321);
    const int backward = mds::gpu_test::run_cases(
        "layer_norm_gpu", cases, [&](const Case& c) { return run_case(c, rng); }, mds::gpu_test::describe_rows<Case>);
    // The forward with the residual sum (residual_layer_norm_forward_cuda); "no residual": the LayerNorm of a alone.
    const std::vector<Case> forward_cases = {
        {"forward, GPT-2 124M: 16 x 1024 tokens, width 768, bf16", {16384, 768}, Dtype::BF16},
        {"forward, GPT-2 1.5B: 8 x 1024 tokens, width 1600, bf16", {8192, 1600}, Dtype::BF16},
        {"forward, odd width, one-value path, fp32", {1001, 771}, Dtype::F32},
        {"forward, fp32, 16-byte path", {300, 1024}, Dtype::F32},
        {"forward, BLOOM-176B's width 14336, bf16", {16, 14336}, Dtype::BF16},
        {"forward, a, b, s, y 2 bytes past an aligned address: one-value path, bf16", {301, 768}, Dtype::BF16, 1},
        {"forward, no residual, bf16", {300, 768}, Dtype::BF16},
        {"forward, one row", {1, 768}, Dtype::BF16},
        {"forward, two columns", {50, 2}, Dtype::F32},
    };
    const int fwd = mds::gpu_test::run_cases(
        "layer_norm_gpu (forward)", forward_cases,
        [&](const Case& c) { return run_forward_case(c, c.name.find("no residual") == std::string::npos, rng); },
        mds::gpu_test::describe_rows<Case>);
    return backward != 0 ? backward : fwd;
}
