// mds-train --bias-grad-fusion on the CPU: model/fused_linear.h's autograd function gives at::linear's output and its
// gradients for the input, the weight and the bias, in fp32 and bf16, for 2-D and 3-D inputs, and where some of
// them need no gradient.
#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <array>
#include <cmath>

#include "mds/model/fused_linear.h"
#include "mds/util/error.h"

using mds::model::fused_linear;

namespace {

// Output and gradients (x, weight, bias) of sum(r · linear(x)) with at::linear or the fused one.
std::array<at::Tensor, 4> linear_grads(const at::Tensor& x_in, const at::Tensor& w_in, const at::Tensor& b_in,
                                       const at::Tensor& r, bool fused, bool x_grad = true) {
    auto x = x_in.detach().clone().requires_grad_(x_grad);
    auto w = w_in.detach().clone().requires_grad_(true);
    auto b = b_in.detach().clone().requires_grad_(true);
    const auto y = fused ? fused_linear(x, w, b) : at::linear(x, w, b);
    torch::autograd::backward({(y.to(at::kFloat) * r).sum()});
    return {y.detach(), x.grad(), w.grad(), b.grad()};
}

// max |a - b| / max |b|, in fp32.
double linear_normwise(const at::Tensor& a, const at::Tensor& b) {
    const auto x = a.to(at::kFloat), y = b.to(at::kFloat);
    return (x - y).abs().max().item<double>() / std::max(y.abs().max().item<double>(), 1e-30);
}

}  // namespace

TEST_CASE("fused linear = at::linear in fp32: the output and the three gradients") {
    at::manual_seed(21);
    for (const auto& shape : {std::vector<std::int64_t>{37, 24}, std::vector<std::int64_t>{3, 5, 24}}) {
        INFO("shape " << c10::str(shape));
        const auto x = at::randn(shape);
        const auto w = at::randn({40, 24});
        const auto b = at::randn({40});
        auto out_shape = shape;
        out_shape.back() = 40;
        const auto r = at::randn(out_shape);
        const auto want = linear_grads(x, w, b, r, false);
        const auto got = linear_grads(x, w, b, r, true);
        CHECK(at::equal(got[0], want[0]));  // the same forward
        for (int k = 1; k < 4; ++k) {
            INFO("gradient " << k);
            CHECK((got[k].sizes() == want[k].sizes()));
            CHECK(linear_normwise(got[k], want[k]) < 1e-6);
        }
        // The bias gradient: the column sums of r, whatever the input.
        CHECK(linear_normwise(got[3], r.reshape({-1, 40}).sum(0)) < 1e-6);
    }
}

TEST_CASE("fused linear in bf16, and an input that needs no gradient") {
    at::manual_seed(22);
    const auto x = at::randn({2, 64, 32}).to(at::kBFloat16);
    const auto w = (at::randn({48, 32}) * 0.2).to(at::kBFloat16);
    const auto b = at::randn({48}).to(at::kBFloat16);
    const auto r = at::randn({2, 64, 48});
    const auto want = linear_grads(x, w, b, r, false);
    const auto got = linear_grads(x, w, b, r, true);
    CHECK(at::equal(got[0], want[0]));
    for (int k = 1; k < 4; ++k) {
        INFO("gradient " << k);
        CHECK((got[k].scalar_type() == at::kBFloat16));
        CHECK(linear_normwise(got[k], want[k]) < 1e-2);  // bf16 results of fp32 sums in different orders
    }
    const auto no_x = linear_grads(x, w, b, r, true, /*x_grad=*/false);
    CHECK(!no_x[1].defined());
    CHECK(at::equal(no_x[2], got[2]));
    CHECK(at::equal(no_x[3], got[3]));
}

TEST_CASE("fused linear refuses mismatched shapes and dtypes, and fp16") {
    const auto x = at::randn({4, 8});
    CHECK_THROWS_WITH_AS(fused_linear(x, at::ones({5, 7}), at::zeros({5})),
                         doctest::Contains("weight [out, in] and bias [out] of x's dtype expected"), mds::Error);
    CHECK_THROWS_AS(fused_linear(x, at::ones({5, 8}), at::zeros({4})), mds::Error);
    CHECK_THROWS_AS(fused_linear(x, at::ones({5, 8}, at::kBFloat16), at::zeros({5}, at::kBFloat16)), mds::Error);
    CHECK_THROWS_WITH_AS(fused_linear(x.to(at::kHalf), at::ones({5, 8}, at::kHalf), at::zeros({5}, at::kHalf)),
                         doctest::Contains("fp32 or bf16 only, not Half"), mds::Error);
}

TEST_CASE("gradient accumulation fusion: bf16 only; on a GPU build cuBLAS's cublasGemmEx is found in the process") {
    using mds::model::gradient_accumulation_fusion_unsupported;
    CHECK(gradient_accumulation_fusion_unsupported(c10::Device(at::kCPU), at::kBFloat16).empty());
    CHECK(gradient_accumulation_fusion_unsupported(c10::Device(at::kCPU), at::kFloat).find("bf16 only") != std::string::npos);
    // Without a GPU the answer for CUDA is the build's: empty where the kernels were built (then the symbol was found
    // in LibTorch's libcublas, which this process loads), else that they were not; never a missing cublasGemmEx.
    const auto cuda = gradient_accumulation_fusion_unsupported(c10::Device(at::kCUDA, 0), at::kBFloat16);
    CHECK(cuda.find("cublasGemmEx") == std::string::npos);
}

namespace {

// Output and gradients (x, w1, b1, w2, b2) of sum(r · mlp(x)), with the fused GeLU MLP or ATen's Linear, GeLU (tanh)
// and Linear; `fused` with the given fusions.
std::array<at::Tensor, 6> mlp_grads(const std::array<at::Tensor, 5>& in, const at::Tensor& r, bool fused,
                                    const mds::model::MlpFusions& fusions = {}) {
    std::array<at::Tensor, 5> t;
    for (std::size_t k = 0; k < 5; ++k) t[k] = in[k].detach().clone().requires_grad_(true);
    const auto y = fused ? mds::model::fused_gelu_mlp(t[0], t[1], t[2], t[3], t[4], fusions)
                         : at::linear(at::gelu(at::linear(t[0], t[1], t[2]), "tanh"), t[3], t[4]);
    torch::autograd::backward({(y.to(at::kFloat) * r).sum()});
    return {y.detach(), t[0].grad(), t[1].grad(), t[2].grad(), t[3].grad(), t[4].grad()};
}

std::array<at::Tensor, 5> mlp_inputs(std::int64_t in, std::int64_t hidden, std::int64_t out, at::ScalarType dtype) {
    return {at::randn({3, 7, in}).to(dtype), (at::randn({hidden, in}) * 0.3).to(dtype), at::randn({hidden}).to(dtype),
            (at::randn({out, hidden}) * 0.3).to(dtype), at::randn({out}).to(dtype)};
}

}  // namespace

TEST_CASE("fused GeLU MLP = Linear, tanh GeLU, Linear on the CPU: the output and the five gradients, with the bias "
          "gradient kernel or ATen's sum") {
    at::manual_seed(23);
    const auto in = mlp_inputs(24, 40, 24, at::kFloat);
    const auto r = at::randn({3, 7, 24});
    const auto want = mlp_grads(in, r, false);
    for (bool kernel : {false, true}) {
        INFO("bias grad kernel " << kernel);
        const auto got = mlp_grads(in, r, true, {kernel, {}, {}});
        CHECK(linear_normwise(got[0], want[0]) < 1e-6);
        for (std::size_t k = 1; k < 6; ++k) {
            INFO("gradient " << k);
            CHECK((got[k].sizes() == want[k].sizes()));
            CHECK(linear_normwise(got[k], want[k]) < 1e-5);
        }
    }
    // GeLU's derivative matters: the erf GeLU's MLP has other gradients than the fused (tanh) one.
    auto x = in[0].detach().clone().requires_grad_(true);
    const auto erf = at::linear(at::gelu(at::linear(x, in[1], in[2])), in[3], in[4]);
    torch::autograd::backward({(erf * r).sum()});
    CHECK(linear_normwise(x.grad(), want[1]) > 1e-5);
}

TEST_CASE("fused GeLU MLP in bf16: the weights' gradients into fp32 main gradients; shapes, dtypes and fp16 refused") {
    at::manual_seed(24);
    const auto in = mlp_inputs(32, 64, 32, at::kBFloat16);
    const auto r = at::randn({3, 7, 32});
    const auto want = mlp_grads(in, r, false);
    auto fc1 = c10::make_intrusive<mds::model::MainGradSink>(), fc2 = c10::make_intrusive<mds::model::MainGradSink>();
    fc1->grad = at::full({64, 32}, 0.5f);  // the main gradients accumulate: the product is added to what is there
    fc2->grad = at::zeros({32, 64});
    const auto got = mlp_grads(in, r, true, {true, fc1, fc2});
    CHECK(at::equal(got[0], want[0]));  // the same bf16 forward: ATen's steps on the CPU
    CHECK((fc1->added && fc2->added));
    CHECK(linear_normwise(fc1->grad - 0.5, want[2]) < 1e-2);  // fp32 sums against bf16-rounded ones
    CHECK(linear_normwise(fc2->grad, want[4]) < 1e-2);
    for (std::size_t k : {1, 3, 5}) {
        INFO("gradient " << k);
        CHECK((got[k].scalar_type() == at::kBFloat16));
        CHECK(linear_normwise(got[k], want[k]) < 1e-2);
    }
    using mds::model::fused_gelu_mlp;
    CHECK_THROWS_WITH_AS(fused_gelu_mlp(in[0], in[1], in[2], in[1], in[4]), doctest::Contains("w2 [out, hidden]"), mds::Error);
    CHECK_THROWS_AS(fused_gelu_mlp(in[0].to(at::kFloat), in[1], in[2], in[3], in[4]), mds::Error);
    std::array<at::Tensor, 5> half;
    for (std::size_t k = 0; k < 5; ++k) half[k] = in[k].to(at::kHalf);
    CHECK_THROWS_WITH_AS(fused_gelu_mlp(half[0], half[1], half[2], half[3], half[4]),
                         doctest::Contains("fp32 or bf16 only, not Half"), mds::Error);
}
