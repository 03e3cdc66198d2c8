// mds-train --cross-entropy-loss-fusion on the CPU: model/fused_cross_entropy.h's autograd function gives ATen's
// cross entropy (on the fp32 logits) and its gradient, for fp32 and bf16 logits, strided rows and any label dtype.
#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <limits>

#include "mds/model/fused_cross_entropy.h"
#include "mds/util/error.h"

using mds::model::fused_cross_entropy;

namespace {

// Loss and gradient of sum(w · loss) through `fn`, for logits of this dtype.
std::pair<at::Tensor, at::Tensor> loss_and_grad(const at::Tensor& logits_in, const at::Tensor& labels,
                                                const at::Tensor& weights, bool fused) {
    auto logits = logits_in.detach().clone().requires_grad_(true);
    const at::Tensor loss = fused ? fused_cross_entropy(logits, labels)
                                  : at::cross_entropy_loss(logits.to(at::kFloat), labels, {}, at::Reduction::None);
    torch::autograd::backward({(loss * weights).sum()});
    return {loss.detach(), logits.grad()};
}

}  // namespace

TEST_CASE("fused cross entropy = ATen's cross entropy on fp32 logits, value and gradient") {
    at::manual_seed(7);
    const auto logits = at::randn({37, 301}) * 3;
    const auto labels = at::randint(0, 301, {37}, at::kLong);
    const auto weights = at::rand({37});
    const auto [want_loss, want_grad] = loss_and_grad(logits, labels, weights, false);
    const auto [loss, grad] = loss_and_grad(logits, labels, weights, true);
    CHECK((loss.scalar_type() == at::kFloat));
    CHECK(at::allclose(loss, want_loss, 1e-6, 1e-6));
    CHECK(at::allclose(grad, want_grad, 1e-6, 1e-8));
    // Labels of another integer dtype: the same.
    const auto [loss32, grad32] = loss_and_grad(logits, labels.to(at::kInt), weights, true);
    CHECK(at::equal(loss32, loss));
    CHECK(at::equal(grad32, grad));
}

TEST_CASE("bf16 logits: the fp32 loss of the bf16 values, a bf16 gradient") {
    at::manual_seed(8);
    const auto logits = (at::randn({16, 500}) * 4).to(at::kBFloat16);
    const auto labels = at::randint(0, 500, {16}, at::kLong);
    const auto weights = at::rand({16});
    const auto [want_loss, want_grad] = loss_and_grad(logits, labels, weights, false);  // through .to(fp32), as mds-train
    const auto [loss, grad] = loss_and_grad(logits, labels, weights, true);
    CHECK((loss.scalar_type() == at::kFloat));
    CHECK((grad.scalar_type() == at::kBFloat16));
    CHECK(at::allclose(loss, want_loss, 1e-6, 1e-6));
    // Both round the same fp32 gradient to bf16: at most one bf16 ulp apart where the fp32 values differ.
    const auto diff = (grad.to(at::kFloat) - want_grad.to(at::kFloat)).abs();
    CHECK((diff <= want_grad.to(at::kFloat).abs() * std::ldexp(1.0, -7) + 1e-12).all().item<bool>());
}

TEST_CASE("rows of a wider tensor, a mean over the rows, and what is refused") {
    at::manual_seed(9);
    // A [rows, vocab] view whose rows are 64 apart: read in place, the gradient comes back with the same shape.
    const auto wide = at::randn({12, 64});
    const auto labels = at::randint(0, 50, {12}, at::kLong);
    auto leaf = wide.clone().requires_grad_(true);
    auto view = leaf.narrow(1, 0, 50);
    REQUIRE(view.stride(0) == 64);
    const auto loss = fused_cross_entropy(view, labels).mean();
    torch::autograd::backward({loss});
    auto ref_leaf = wide.clone().requires_grad_(true);
    const auto want = at::cross_entropy_loss(ref_leaf.narrow(1, 0, 50), labels);
    torch::autograd::backward({want});
    CHECK(loss.item<float>() == doctest::Approx(want.item<float>()).epsilon(1e-6));
    CHECK(at::allclose(leaf.grad(), ref_leaf.grad(), 1e-6, 1e-8));
    CHECK(leaf.grad().narrow(1, 50, 14).abs().sum().item<float>() == 0.0f);

    // A label outside the vocabulary: a NaN loss, not a crash.
    const auto bad = fused_cross_entropy(at::zeros({2, 5}), at::tensor(std::vector<std::int64_t>{1, 5}));
    CHECK(bad[0].item<float>() == doctest::Approx(std::log(5.0)));
    CHECK(std::isnan(bad[1].item<float>()));

    CHECK_THROWS_WITH_AS(fused_cross_entropy(at::zeros({2, 5}, at::kHalf), at::zeros({2}, at::kLong)),
                         doctest::Contains("fp32 or bf16 logits only, not Half"), mds::Error);
    CHECK_THROWS_WITH_AS(fused_cross_entropy(at::zeros({2, 3, 5}), at::zeros({6}, at::kLong)),
                         doctest::Contains("logits [rows, vocab] and labels [rows] expected"), mds::Error);
    CHECK(mds::model::fused_cross_entropy_unsupported(c10::Device("cpu"), at::kBFloat16).empty());
    CHECK_THROWS_WITH_AS(fused_cross_entropy(at::zeros({2, 5}), at::zeros({2}, at::TensorOptions().dtype(at::kLong).device(at::kMeta))),
                         "fused cross entropy: logits on cpu and labels on meta: one device expected", mds::Error);
    // No rows: no loss and no gradient, on every device (the kernels take one row at least).
    auto none = at::zeros({0, 5}).requires_grad_(true);
    const auto empty = fused_cross_entropy(none, at::zeros({0}, at::kLong));
    CHECK(empty.numel() == 0);
    torch::autograd::backward({empty.sum()});
    CHECK(none.grad().numel() == 0);
    // A kernel's refusal names the op and its operands.
    CHECK_THROWS_WITH_AS(fused_cross_entropy(at::zeros({2, 0}), at::zeros({2}, at::kLong)),
                         "fused cross entropy forward of 2 x 0 Float logits on cpu: cross entropy: vocab must be at least 1 "
                         "(rows 2, vocab 0, stride 1)",
                         mds::Error);
}
