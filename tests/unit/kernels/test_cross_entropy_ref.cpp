// The CPU reference of kernels/cross_entropy.h: what the GPU test and mds-train's CPU path rely on.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/cross_entropy_ref.h"

using namespace mds::kernels;

namespace {

// Per-row loss and log-sum-exp over all rows.
void forward(const std::vector<float>& x, const CrossEntropyShape& s, const std::vector<std::int64_t>& t,
             std::vector<float>& loss, std::vector<float>& lse) {
    loss.assign(static_cast<std::size_t>(s.rows), -1.0f);
    lse.assign(static_cast<std::size_t>(s.rows), -1.0f);
    cross_entropy_forward_ref(x.data(), Dtype::F32, s, t.data(), loss.data(), lse.data(), 0, s.rows);
}

}  // namespace

TEST_CASE("bf16 conversions round to nearest even as CUDA's do") {
    CHECK(float_to_bf16(1.0f) == 0x3F80);
    CHECK(bf16_to_float(0x3F80) == 1.0f);
    CHECK(float_to_bf16(-2.0f) == 0xC000);
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
    CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);
    // 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to the even one.
    CHECK(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);
    CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);
    CHECK(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
    CHECK(float_to_bf16(3.4e38f) == 0x7F80);  // above bf16's largest finite value: rounds to +inf
    CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
    CHECK(float_to_bf16(std::numeric_limits<float>::quiet_NaN()) == 0x7FFF);  // CUDA's canonical NaN
    CHECK(float_to_bf16(-std::numeric_limits<float>::signaling_NaN()) == 0x7FFF);
    for (float v : {0.0f, -0.0f, 3.140625f, -1e-3f, 6.5e4f, 1e-38f}) {
        const float back = bf16_to_float(float_to_bf16(v));
        CHECK(std::fabs(back - v) <= std::fabs(v) * std::ldexp(1.0f, -8));
    }
}

TEST_CASE("losses, log-sum-exps and gradients are softmax cross entropy's") {
    const CrossEntropyShape s{3, 4, 4};
    const std::vector<float> x = {0, 0, 0, 0,  // uniform: loss log 4 whatever the label
                                  1, 2, 3, 4,  //
                                  1000, 0, -1000, 5};  // large logits: no overflow
    const std::vector<std::int64_t> t = {2, 3, 1};
    std::vector<float> loss, lse;
    forward(x, s, t, loss, lse);
    CHECK(loss[0] == doctest::Approx(std::log(4.0)).epsilon(1e-7));
    CHECK(lse[0] == doctest::Approx(std::log(4.0)).epsilon(1e-7));
    const double lse1 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + std::exp(4.0));
    CHECK(lse[1] == doctest::Approx(lse1).epsilon(1e-7));
    CHECK(loss[1] == doctest::Approx(lse1 - 4).epsilon(1e-6));
    CHECK(lse[2] == doctest::Approx(1000.0).epsilon(1e-9));
    CHECK(loss[2] == doctest::Approx(1000.0).epsilon(1e-7));

    // dlogits = dloss · (softmax - one-hot): each row sums to 0, the label's entry is dloss · (p - 1).
    const std::vector<float> dloss = {0.5f, -2.0f, 1.0f};
    std::vector<float> d(x.size(), 99.0f);
    cross_entropy_backward_ref(x.data(), Dtype::F32, s, t.data(), lse.data(), dloss.data(), d.data(), 0, s.rows);
    CHECK(d[0] == doctest::Approx(0.125));
    CHECK(d[2] == doctest::Approx(0.5 * (0.25 - 1)));
    for (int r = 0; r < 3; ++r) {
        double sum = 0;
        for (int j = 0; j < 4; ++j) sum += d[static_cast<std::size_t>(r * 4 + j)];
        CHECK(std::fabs(sum) < 1e-6);
    }
    CHECK(d[7] == doctest::Approx(-2.0 * (std::exp(4 - lse1) - 1)).epsilon(1e-6));
    CHECK(d[8] == doctest::Approx(1.0).epsilon(1e-6));  // the row's mass on logit 1000
    CHECK(d[9] == doctest::Approx(-1.0).epsilon(1e-6));  // ... and minus one at the label
}

TEST_CASE("a row range, padded rows and bf16 logits") {
    // Two rows of 3 logits, 5 apart: the padding is neither read nor written.
    const CrossEntropyShape s{2, 3, 5};
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> x = {0.5f, -1.0f, 2.0f, nan, nan, 3.0f, 3.0f, 3.0f, nan, nan};
    const std::vector<std::int64_t> t = {0, 2};
    std::vector<float> loss(2, -1.0f), lse(2, -1.0f);
    cross_entropy_forward_ref(x.data(), Dtype::F32, s, t.data(), loss.data(), lse.data(), 1, 2);
    CHECK(loss[0] == -1.0f);  // outside the range: untouched
    CHECK(loss[1] == doctest::Approx(std::log(3.0)));
    cross_entropy_forward_ref(x.data(), Dtype::F32, s, t.data(), loss.data(), lse.data(), 0, 1);
    CHECK(std::isfinite(loss[0]));
    std::vector<float> d(10, 42.0f);
    const std::vector<float> dloss = {1.0f, 1.0f};
    cross_entropy_backward_ref(x.data(), Dtype::F32, s, t.data(), lse.data(), dloss.data(), d.data(), 0, 2);
    for (std::size_t i : {3u, 4u, 8u, 9u}) CHECK(d[i] == 42.0f);

    // The same logits in bf16 (all exactly representable): the same losses; gradients rounded to bf16.
    std::vector<std::uint16_t> xb(x.size()), db(x.size(), 0x1234);
    for (std::size_t i = 0; i < x.size(); ++i) xb[i] = float_to_bf16(x[i]);
    std::vector<float> loss_b(2), lse_b(2);
    cross_entropy_forward_ref(xb.data(), Dtype::BF16, s, t.data(), loss_b.data(), lse_b.data(), 0, 2);
    CHECK(loss_b[0] == loss[0]);
    CHECK(loss_b[1] == loss[1]);
    cross_entropy_backward_ref(xb.data(), Dtype::BF16, s, t.data(), lse_b.data(), dloss.data(), db.data(), 0, 2);
    for (std::size_t i : {0u, 1u, 2u, 5u, 6u, 7u}) CHECK(db[i] == float_to_bf16(d[i]));
    for (std::size_t i : {3u, 4u, 8u, 9u}) CHECK(db[i] == 0x1234);
}

TEST_CASE("labels outside the vocabulary, -inf and NaN logits") {
    const float inf = std::numeric_limits<float>::infinity();
    const CrossEntropyShape s{4, 3, 3};
    const std::vector<float> x = {1, 2, 3, 1, 2, 3, -inf, 0, -inf, 1, std::numeric_limits<float>::quiet_NaN(), 3};
    const std::vector<std::int64_t> t = {-1, 3, 1, 0};
    std::vector<float> loss, lse;
    forward(x, s, t, loss, lse);
    CHECK(std::isnan(loss[0]));
    CHECK(std::isnan(loss[1]));
    CHECK(std::isfinite(lse[0]));
    CHECK(loss[2] == 0.0f);  // all the mass on the one finite logit, which is the label
    CHECK(lse[2] == 0.0f);
    CHECK(std::isnan(loss[3]));  // a NaN logit makes its row's loss NaN, as torch's does
    CHECK(std::isnan(lse[3]));
}

TEST_CASE("sizes out of range are refused, naming the field") {
    const std::vector<float> x(4);
    const std::vector<std::int64_t> t(2);
    std::vector<float> loss(2), lse(2);
    CHECK_THROWS_WITH_AS(cross_entropy_forward_ref(x.data(), Dtype::F32, {2, 0, 2}, t.data(), loss.data(), lse.data(), 0, 2),
                         doctest::Contains("vocab must be at least 1"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(cross_entropy_forward_ref(x.data(), Dtype::F32, {2, 2, 1}, t.data(), loss.data(), lse.data(), 0, 2),
                         doctest::Contains("stride must be at least vocab (rows 2, vocab 2, stride 1)"),
                         std::invalid_argument);
    CHECK_THROWS_AS(check_shape({0, 2, 2}), std::invalid_argument);
    CHECK_THROWS_AS(check_shape({1, std::int64_t{1} << 31, std::int64_t{1} << 31}), std::invalid_argument);
    CHECK_NOTHROW(check_shape({1, 1, 1}));
    CHECK(std::string(dtype_name(Dtype::BF16)) == "bf16");
}
