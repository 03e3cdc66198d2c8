// Gradient norm, clipping, zero count, overflow check (mds/optim/grad_clip.h).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "mds/optim/grad_clip.h"

using namespace mds::optim;

TEST_CASE("3-4-5: norm 5 over two spans, clipped to max_norm 1, zeros counted") {
    std::vector<float> a{3.0f, 0.0f}, b{-0.0f, 4.0f};
    std::vector<std::span<float>> g{a, b};
    std::vector<std::span<const float>> v{a, b};
    CHECK(count_zeros(v) == 2);
    CHECK_FALSE(has_inf_or_nan(v));
    const double norm = clip_grad_norm(g, 1.0);
    CHECK(norm == 5.0);
    const float c = static_cast<float>(1.0 / (5.0 + 1e-6));
    CHECK(a[0] == 3.0f * c);
    CHECK(b[1] == 4.0f * c);
}

TEST_CASE("no clipping when the coefficient is >= 1") {
    std::vector<float> a{0.3f, 0.4f};
    std::vector<std::span<float>> g{a};
    CHECK(clip_grad_norm(g, 1.0) == doctest::Approx(0.5));
    CHECK(a[0] == 0.3f);
    CHECK(clip_coefficient(0.5, 1.0) > 1.0);
    std::vector<float> b{3.0f, 4.0f};
    std::vector<std::span<float>> h{b};
    clip_grad_norm(h, 0.0);  // --clip-grad 0: off
    CHECK(b[0] == 3.0f);
}

TEST_CASE("non-finite gradients: NaN norm never clips, Inf norm clips to zero") {
    std::vector<float> a{1.0f, std::numeric_limits<float>::quiet_NaN()};
    std::vector<std::span<const float>> v{a};
    CHECK(has_inf_or_nan(v));
    CHECK(count_zeros(v) == 0);
    std::vector<std::span<float>> g{a};
    CHECK(std::isnan(clip_grad_norm(g, 1.0)));
    CHECK(a[0] == 1.0f);
    std::vector<float> b{1.0f, std::numeric_limits<float>::infinity()};
    std::vector<std::span<float>> h{b};
    CHECK(std::isinf(clip_grad_norm(h, 1.0)));
    CHECK(b[0] == 0.0f);
}

TEST_CASE("the sum of squares is accumulated in double") {
    std::vector<float> a(1 << 20, 1e-3f);
    std::vector<std::span<const float>> v{a};
    const double want = static_cast<double>(1e-3f) * static_cast<double>(1e-3f) * (1 << 20);
    CHECK(l2_norm_squared(v) == doctest::Approx(want).epsilon(1e-10));
    CHECK(total_norm_from_squared(4.0) == 2.0);
}

TEST_CASE("clip_factor: the fp32 coefficient the optimizer scales by, 1 when clipping is off") {
    CHECK(clip_factor(5.0, 1.0) == static_cast<double>(static_cast<float>(1.0 / (5.0 + 1e-6))));
    CHECK(clip_factor(5.0, 0.0) == 1.0);   // --clip-grad 0: off, whatever the norm
    CHECK(clip_factor(5.0, -1.0) == 1.0);
    CHECK(clip_factor(0.5, 1.0) > 1.0);    // not clipping: the caller scales only below 1
    CHECK(clip_factor(std::numeric_limits<double>::infinity(), 1.0) == 0.0);
    CHECK(std::isnan(clip_factor(std::numeric_limits<double>::quiet_NaN(), 1.0)));  // NaN < 1 is false: no scaling
    // A coefficient just below 1 rounds to 1.0f: scaling by it would change nothing.
    CHECK(clip_coefficient(1.0, 1.0 + 1e-6 - 1e-9) < 1.0);
    CHECK(clip_factor(1.0, 1.0 + 1e-6 - 1e-9) == 1.0);
}
