// The CPU reference of kernels/layer_norm.h against finite differences of the LayerNorm it differentiates.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/layer_norm_ref.h"

using namespace mds::kernels;

namespace {

// Σ_r Σ_j dy[r, j] · (w_j · x̂[r, j] + b_j) in double: the loss whose gradients the backward gives.
double ln_loss(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
               const std::vector<double>& dy, std::int64_t rows, std::int64_t cols) {
    double total = 0;
    const auto n = static_cast<double>(cols);
    for (std::int64_t r = 0; r < rows; ++r) {
        double mu = 0, var = 0;
        for (std::int64_t j = 0; j < cols; ++j) mu += x[r * cols + j];
        mu /= n;
        for (std::int64_t j = 0; j < cols; ++j) var += (x[r * cols + j] - mu) * (x[r * cols + j] - mu);
        const double rs = 1 / std::sqrt(var / n + 1e-5);
        for (std::int64_t j = 0; j < cols; ++j) total += dy[r * cols + j] * (w[j] * (x[r * cols + j] - mu) * rs + b[j]);
    }
    return total;
}

}  // namespace

TEST_CASE("layer norm reference backward: the finite differences of LayerNorm, fp32") {
    const std::int64_t rows = 3, cols = 7;
    std::mt19937 rng(5);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> x(rows * cols), dy(rows * cols), w(cols), b(cols);
    for (auto* v : {&x, &dy, &w, &b})
        for (auto& e : *v) e = normal(rng);
    std::vector<float> xf(x.begin(), x.end()), dyf(dy.begin(), dy.end()), wf(w.begin(), w.end());
    // The forward's saved statistics, as ATen keeps them.
    std::vector<float> mean(rows), rstd(rows);
    for (std::int64_t r = 0; r < rows; ++r) {
        double mu = 0, var = 0;
        for (std::int64_t j = 0; j < cols; ++j) mu += xf[r * cols + j];
        mu /= cols;
        for (std::int64_t j = 0; j < cols; ++j) var += (xf[r * cols + j] - mu) * (xf[r * cols + j] - mu);
        mean[r] = static_cast<float>(mu);
        rstd[r] = static_cast<float>(1 / std::sqrt(var / cols + 1e-5));
    }
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = xf[i];  // the fp32 values the reference sees
    std::vector<float> dx(rows * cols), dw(cols), db(cols);
    layer_norm_backward_ref(dyf.data(), xf.data(), wf.data(), Dtype::F32, mean.data(), rstd.data(), {rows, cols}, dx.data(),
                            dw.data(), db.data());
    std::vector<double> wd(wf.begin(), wf.end()), dyd(dyf.begin(), dyf.end());
    const double h = 1e-6;
    for (std::size_t i = 0; i < x.size(); ++i) {
        auto plus = x, minus = x;
        plus[i] += h;
        minus[i] -= h;
        const double numeric = (ln_loss(plus, wd, b, dyd, rows, cols) - ln_loss(minus, wd, b, dyd, rows, cols)) / (2 * h);
        CHECK(dx[i] == doctest::Approx(numeric).epsilon(1e-5).scale(1.0));
    }
    for (std::int64_t j = 0; j < cols; ++j) {
        auto plus = wd, minus = wd;
        plus[j] += h;
        minus[j] -= h;
        CHECK(dw[j] == doctest::Approx((ln_loss(x, plus, b, dyd, rows, cols) - ln_loss(x, minus, b, dyd, rows, cols)) / (2 * h))
                           .epsilon(1e-5)
                           .scale(1.0));
        double sum = 0;
        for (std::int64_t r = 0; r < rows; ++r) sum += dyf[r * cols + j];
        CHECK(db[j] == doctest::Approx(sum).epsilon(1e-6));
    }
}

TEST_CASE("layer norm reference backward in bf16: the fp32 result rounded to bf16") {
    const std::int64_t rows = 4, cols = 16;
    std::mt19937 rng(6);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<std::uint16_t> xb(rows * cols), dyb(rows * cols), wb(cols);
    for (auto* v : {&xb, &dyb, &wb})
        for (auto& e : *v) e = float_to_bf16(normal(rng));
    std::vector<float> xf(rows * cols), dyf(rows * cols), wf(cols);
    for (std::size_t i = 0; i < xb.size(); ++i) {
        xf[i] = bf16_to_float(xb[i]);
        dyf[i] = bf16_to_float(dyb[i]);
    }
    for (std::int64_t j = 0; j < cols; ++j) wf[j] = bf16_to_float(wb[j]);
    std::vector<float> mean(rows, 0.1f), rstd(rows, 0.9f);
    std::vector<float> dx32(rows * cols), dw32(cols), db32(cols), dw16(cols), db16(cols);
    std::vector<std::uint16_t> dx16(rows * cols);
    layer_norm_backward_ref(dyf.data(), xf.data(), wf.data(), Dtype::F32, mean.data(), rstd.data(), {rows, cols},
                            dx32.data(), dw32.data(), db32.data());
    layer_norm_backward_ref(dyb.data(), xb.data(), wb.data(), Dtype::BF16, mean.data(), rstd.data(), {rows, cols},
                            dx16.data(), dw16.data(), db16.data());
    for (std::size_t i = 0; i < dx16.size(); ++i) CHECK(dx16[i] == float_to_bf16(dx32[i]));
    CHECK(dw16 == dw32);
    CHECK(db16 == db32);
}

TEST_CASE("layer norm shapes out of range are refused") {
    CHECK_THROWS_WITH_AS(check_rows("layer norm", LayerNormShape{0, 8}), "layer norm: rows must be at least 1 (rows 0, cols 8)",
                         std::invalid_argument);
    CHECK_THROWS_AS(check_rows("layer norm", LayerNormShape{2, 0}), std::invalid_argument);
    CHECK_THROWS_AS(check_rows("layer norm", LayerNormShape{2, std::int64_t{1} << 31}), std::invalid_argument);
}

TEST_CASE("layer norm reference forward with the residual sum: s = a + b rounded, y its LayerNorm, mean and rstd") {
    const std::int64_t rows = 3, cols = 10;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<std::uint16_t> a(rows * cols), b(rows * cols), w(cols), bias(cols);
    for (auto* v : {&a, &b, &w, &bias})
        for (auto& e : *v) e = float_to_bf16(2.0f * normal(rng) + 0.5f);
    std::vector<std::uint16_t> s(rows * cols), y(rows * cols), y_alone(rows * cols);
    std::vector<float> mean(rows), rstd(rows), mean_alone(rows), rstd_alone(rows);
    residual_layer_norm_forward_ref(a.data(), b.data(), w.data(), bias.data(), Dtype::BF16, 1e-5f, {rows, cols}, s.data(),
                                    y.data(), mean.data(), rstd.data());
    for (std::int64_t r = 0; r < rows; ++r) {
        double mu = 0, var = 0;
        for (std::int64_t j = 0; j < cols; ++j) {
            const auto i = static_cast<std::size_t>(r * cols + j);
            // The unfused add: the fp32 sum of the two bf16 values, rounded to bf16.
            CHECK(s[i] == float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i])));
            mu += bf16_to_float(s[i]);
        }
        mu /= cols;
        for (std::int64_t j = 0; j < cols; ++j) var += std::pow(bf16_to_float(s[static_cast<std::size_t>(r * cols + j)]) - mu, 2);
        const double rs = 1 / std::sqrt(var / cols + 1e-5);
        CHECK(mean[static_cast<std::size_t>(r)] == doctest::Approx(mu).epsilon(1e-6));
        CHECK(rstd[static_cast<std::size_t>(r)] == doctest::Approx(rs).epsilon(1e-6));
        for (std::int64_t j = 0; j < cols; ++j) {
            const auto i = static_cast<std::size_t>(r * cols + j);
            const double want = (bf16_to_float(s[i]) - mu) * rs * bf16_to_float(w[static_cast<std::size_t>(j)]) +
                                bf16_to_float(bias[static_cast<std::size_t>(j)]);
            CHECK(bf16_to_float(y[i]) == doctest::Approx(want).epsilon(1.0 / 128).scale(1.0 / 128));  // one bf16 rounding
        }
    }
    // No b: the LayerNorm of a itself; the sums of a + b above are that of s given as a.
    residual_layer_norm_forward_ref(s.data(), nullptr, w.data(), bias.data(), Dtype::BF16, 1e-5f, {rows, cols}, nullptr,
                                    y_alone.data(), mean_alone.data(), rstd_alone.data());
    CHECK(y_alone == y);
    CHECK(mean_alone == mean);
    CHECK(rstd_alone == rstd);
}

TEST_CASE("layer norm reference backward: a residual gradient is added to dx, nothing else changes") {
    const std::int64_t rows = 2, cols = 9;
    std::mt19937 rng(8);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(rows * cols), dy(rows * cols), w(cols), dres(rows * cols);
    for (auto* v : {&x, &dy, &w, &dres})
        for (auto& e : *v) e = normal(rng);
    std::vector<float> mean(rows, 0.2f), rstd(rows, 1.1f);
    std::vector<float> dx(rows * cols), dw(cols), db(cols), dx2(rows * cols), dw2(cols), db2(cols);
    layer_norm_backward_ref(dy.data(), x.data(), w.data(), Dtype::F32, mean.data(), rstd.data(), {rows, cols}, dx.data(),
                            dw.data(), db.data());
    layer_norm_backward_ref(dy.data(), x.data(), w.data(), Dtype::F32, mean.data(), rstd.data(), {rows, cols}, dx2.data(),
                            dw2.data(), db2.data(), dres.data());
    for (std::size_t i = 0; i < dx.size(); ++i) CHECK(dx2[i] == doctest::Approx(dx[i] + dres[i]).epsilon(1e-6));
    CHECK(dw2 == dw);
    CHECK(db2 == db);
}
