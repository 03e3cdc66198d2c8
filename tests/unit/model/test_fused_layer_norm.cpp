// mds-train --layernorm-backward-fusion on the CPU: model/fused_layer_norm.h's autograd function gives ATen's
// LayerNorm and its gradients for the input, the weight and the bias, in fp32 and bf16, for 2-D and 3-D inputs.
#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <array>
#include <cmath>
#include <tuple>
#include <vector>

#include "mds/model/fused_layer_norm.h"
#include "mds/util/error.h"

using mds::model::fused_layer_norm;

namespace {

// Output and gradients (x, weight, bias) of sum(r · LN(x)) with ATen's LayerNorm or the fused one.
std::array<at::Tensor, 4> ln_grads(const at::Tensor& x_in, const at::Tensor& w_in, const at::Tensor& b_in,
                                   const at::Tensor& r, bool fused) {
    auto x = x_in.detach().clone().requires_grad_(true);
    auto w = w_in.detach().clone().requires_grad_(true);
    auto b = b_in.detach().clone().requires_grad_(true);
    const auto y = fused ? fused_layer_norm(x, w, b, 1e-5) : at::layer_norm(x, {x.size(-1)}, w, b, 1e-5);
    torch::autograd::backward({(y.to(at::kFloat) * r).sum()});
    return {y.detach(), x.grad(), w.grad(), b.grad()};
}

// max |a - b| / max |b|, in fp32.
double normwise(const at::Tensor& a, const at::Tensor& b) {
    const auto x = a.to(at::kFloat), y = b.to(at::kFloat);
    return (x - y).abs().max().item<double>() / std::max(y.abs().max().item<double>(), 1e-30);
}

}  // namespace

TEST_CASE("fused layer norm = ATen's LayerNorm in fp32: the output and the three gradients") {
    at::manual_seed(11);
    for (const auto& shape : {std::vector<std::int64_t>{37, 96}, std::vector<std::int64_t>{3, 5, 64}, std::vector<std::int64_t>{4, 7}}) {
        INFO("shape " << c10::str(shape));
        const auto x = at::randn(shape) * 2 + 0.5;
        const auto w = at::randn({shape.back()});
        const auto b = at::randn({shape.back()});
        const auto r = at::randn(shape);
        const auto want = ln_grads(x, w, b, r, false);
        const auto got = ln_grads(x, w, b, r, true);
        CHECK(at::equal(got[0], want[0]));  // the same forward
        for (int k = 1; k < 4; ++k) {
            INFO("gradient " << k);
            CHECK((got[k].scalar_type() == at::kFloat));
            CHECK(normwise(got[k], want[k]) < 1e-5);
        }
    }
}

TEST_CASE("fused layer norm in bf16: bf16 gradients near ATen's") {
    at::manual_seed(12);
    const auto x = (at::randn({64, 128}) * 3).to(at::kBFloat16);
    const auto w = (at::randn({128}) * 0.5 + 1).to(at::kBFloat16);
    const auto b = at::randn({128}).to(at::kBFloat16);
    const auto r = at::randn({64, 128});
    const auto want = ln_grads(x, w, b, r, false);
    const auto got = ln_grads(x, w, b, r, true);
    CHECK(at::equal(got[0], want[0]));
    for (int k = 1; k < 4; ++k) {
        INFO("gradient " << k);
        CHECK((got[k].scalar_type() == at::kBFloat16));
        // Both end in bf16 (8 bits of mantissa) from fp32 math in different orders.
        CHECK(normwise(got[k], want[k]) < 1e-2);
    }
}

TEST_CASE("fused layer norm refuses mismatched shapes and dtypes, and fp16") {
    const auto x = at::randn({4, 8});
    CHECK_THROWS_WITH_AS(fused_layer_norm(x, at::ones({7}), at::zeros({8}), 1e-5),
                         doctest::Contains("weight and bias [C] of x's dtype expected"), mds::Error);
    CHECK_THROWS_AS(fused_layer_norm(x, at::ones({8}, at::kBFloat16), at::zeros({8}, at::kBFloat16), 1e-5), mds::Error);
    CHECK_THROWS_WITH_AS(fused_layer_norm(x.to(at::kHalf), at::ones({8}, at::kHalf), at::zeros({8}, at::kHalf), 1e-5),
                         doctest::Contains("fp32 or bf16 only, not Half"), mds::Error);
}

TEST_CASE("fused layer norm of no rows or no columns: zero gradients, as ATen's") {
    for (const auto& shape : {std::vector<std::int64_t>{0, 8}, std::vector<std::int64_t>{3, 0}}) {
        INFO("shape " << c10::str(shape));
        const auto cols = shape[1];
        auto x = at::randn(shape).requires_grad_(true);
        auto w = at::randn({cols}).requires_grad_(true);
        auto b = at::randn({cols}).requires_grad_(true);
        const auto y = fused_layer_norm(x, w, b, 1e-5);
        CHECK(y.sizes() == x.sizes());
        torch::autograd::backward({y.sum()});
        CHECK(x.grad().sizes() == x.sizes());
        CHECK(w.grad().sizes() == w.sizes());
        CHECK(at::equal(w.grad(), at::zeros({cols})));
        CHECK(at::equal(b.grad(), at::zeros({cols})));
    }
}

TEST_CASE("fused residual layer norm = a + b and ATen's LayerNorm of it: values and the four gradients") {
    at::manual_seed(12);
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
        for (const auto& shape : {std::vector<std::int64_t>{37, 96}, std::vector<std::int64_t>{3, 5, 64}}) {
            INFO("shape " << c10::str(shape) << ", " << c10::toString(dtype));
            const auto a0 = (at::randn(shape) * 2 + 0.5).to(dtype), b0 = (at::randn(shape) * 0.5).to(dtype);
            const auto w0 = at::randn({shape.back()}).to(dtype), bias0 = at::randn({shape.back()}).to(dtype);
            const auto rs = at::randn(shape), ry = at::randn(shape);  // the loss uses s (the residual stream) and y
            std::vector<at::Tensor> grads[2];
            at::Tensor s_out[2], y_out[2];
            for (int fused = 0; fused < 2; ++fused) {
                auto a = a0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
                auto w = w0.clone().requires_grad_(true), bias = bias0.clone().requires_grad_(true);
                at::Tensor s, y;
                if (fused) {
                    std::tie(s, y) = mds::model::fused_residual_layer_norm(a, b, w, bias, 1e-5);
                } else {
                    s = a + b;
                    y = at::layer_norm(s, {shape.back()}, w, bias, 1e-5);
                }
                torch::autograd::backward({(s.to(at::kFloat) * rs).sum() + (y.to(at::kFloat) * ry).sum()});
                s_out[fused] = s.detach();
                y_out[fused] = y.detach();
                grads[fused] = {a.grad(), b.grad(), w.grad(), bias.grad()};
            }
            CHECK(at::equal(s_out[1], s_out[0]));  // the same rounded sums
            const double tol = dtype == at::kFloat ? 1e-5 : 1e-2;
            CHECK(normwise(y_out[1], y_out[0]) < tol);
            for (int k = 0; k < 4; ++k) {
                INFO("gradient " << k);
                CHECK((grads[1][static_cast<std::size_t>(k)].scalar_type() == dtype));
                CHECK(normwise(grads[1][static_cast<std::size_t>(k)], grads[0][static_cast<std::size_t>(k)]) < tol);
            }
            CHECK(at::equal(grads[1][0], grads[1][1]));  // a and b: the gradient of their sum
        }
    }
    const auto x = at::randn({4, 8});
    CHECK_THROWS_WITH_AS(mds::model::fused_residual_layer_norm(x, at::randn({4, 7}), at::ones({8}), at::zeros({8}), 1e-5),
                         doctest::Contains("fused residual layer norm"), mds::Error);
}
