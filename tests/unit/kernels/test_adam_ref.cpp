// The CPU reference of kernels/adam.h: what the GPU test and mds-train --adam-step-fusion's CPU path rely on.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/adam_ref.h"
#include "kernels/dtype.h"

using namespace mds::kernels;

namespace {

// One tensor's arrays, filled from a seed: bf16 gradients ~ N(0, 0.1²), masters ~ N(0, 1), moments from an
// earlier step (first ~ N(0, 0.01²), second ~ |N(0, 0.01²)|).
struct AdamArrays {
    std::vector<std::uint16_t> param, grad;
    std::vector<float> master, m1, m2;
    AdamArrays(std::size_t n, unsigned seed) : param(n), grad(n), master(n), m1(n), m2(n) {
        std::mt19937 rng(seed);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (std::size_t i = 0; i < n; ++i) {
            grad[i] = float_to_bf16(0.1f * normal(rng));
            master[i] = normal(rng);
            param[i] = float_to_bf16(master[i]);
            m1[i] = 0.01f * normal(rng);
            m2[i] = std::abs(0.01f * normal(rng));
        }
    }
    AdamTensor view(std::int32_t group) {
        AdamTensor t;
        t.param = param.data();
        t.grad = grad.data();
        t.master = master.data();
        t.exp_avg = m1.data();
        t.exp_avg_sq = m2.data();
        t.numel = static_cast<std::int64_t>(master.size());
        t.group = group;
        return t;
    }
};

AdamHyper hyper(std::int64_t step) {
    AdamHyper h;
    h.lr = 3e-4;
    h.beta1 = 0.9;
    h.beta2 = 0.95;
    h.eps = 1e-8;
    h.weight_decay[0] = 0.1;
    h.weight_decay[1] = 0.0;
    h.step = step;
    return h;
}

std::string hyper_error(AdamHyper h) {
    try {
        check_hyper(h);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("adam chunks: each tensor cut into chunks of at most kAdamChunk elements, in order") {
    std::vector<std::int64_t> first;
    const auto chunks = adam_chunks({0, 1, kAdamChunk, kAdamChunk + 1, 5}, first);
    CHECK(first == std::vector<std::int64_t>{0, 0, 1, 2, 4, 5});
    REQUIRE(chunks.size() == 5);
    CHECK((chunks[0].tensor == 1 && chunks[0].begin == 0 && chunks[0].length == 1));
    CHECK((chunks[1].tensor == 2 && chunks[1].begin == 0 && chunks[1].length == kAdamChunk));
    CHECK((chunks[2].tensor == 3 && chunks[2].begin == 0 && chunks[2].length == kAdamChunk));
    CHECK((chunks[3].tensor == 3 && chunks[3].begin == kAdamChunk && chunks[3].length == 1));
    CHECK((chunks[4].tensor == 4 && chunks[4].length == 5));
    CHECK_THROWS_WITH_AS(adam_chunks({3, -1}, first), "adam: tensor 1 has a negative size", std::invalid_argument);
}

TEST_CASE("adam hyperparameters out of range are refused by name") {
    CHECK(hyper_error(hyper(1)).empty());
    auto h = hyper(1);
    h.beta1 = 1.0;
    CHECK(hyper_error(h).find("beta1 must be in [0, 1)") != std::string::npos);
    h = hyper(1);
    h.beta2 = -0.1;
    CHECK(hyper_error(h).find("beta2 must be in [0, 1)") != std::string::npos);
    h = hyper(0);
    CHECK(hyper_error(h).find("the step number counts from 1, not 0") != std::string::npos);
    h = hyper(1);
    h.weight_decay[1] = NAN;
    CHECK(hyper_error(h).find("weight decay must be finite") != std::string::npos);
    h = hyper(1);
    h.lr = -1e-3;
    CHECK(hyper_error(h).find("learning rate") != std::string::npos);
    h = hyper(1);
    h.clip = INFINITY;
    CHECK(hyper_error(h).find("clipping factor") != std::string::npos);
}

TEST_CASE("adam reference step: AdamW's formula in double to fp32 rounding; the model gets the masters in bf16") {
    const std::size_t n = 3001;
    for (std::int64_t step : {1, 2, 1000}) {
        AdamArrays a(n, 7);
        const AdamArrays before = a;
        auto h = hyper(step);
        h.clip = 0.5f;
        h.grad_scale = 0.25f;
        adam_step_ref(a.view(0), adam_scalars(h), 0, static_cast<std::int64_t>(n));
        double worst = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const double g = static_cast<double>(bf16_to_float(before.grad[i])) * 0.25 * 0.5;
            double p = before.master[i];
            p -= h.lr * h.weight_decay[0] * p;
            const double m = 0.9 * before.m1[i] + 0.1 * g;
            const double v = 0.95 * before.m2[i] + 0.05 * g * g;
            const double bc1 = 1 - std::pow(0.9, static_cast<double>(step));
            const double bc2 = 1 - std::pow(0.95, static_cast<double>(step));
            p -= h.lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + h.eps);
            worst = std::max({worst, std::abs(a.master[i] - p) / (std::abs(p) + 1e-3), std::abs(a.m1[i] - m) / (std::abs(m) + 1e-6),
                              std::abs(a.m2[i] - v) / (std::abs(v) + 1e-9)});
            REQUIRE(a.param[i] == float_to_bf16(a.master[i]));
        }
        INFO("step " << step);
        CHECK(worst < 1e-6);
    }
}

TEST_CASE("adam reference step: group 1 gets no weight decay; the range bounds what is written") {
    const std::size_t n = 100;
    AdamArrays decayed(n, 3), plain(n, 3), no_decay(n, 3);
    auto h = hyper(1);
    adam_step_ref(decayed.view(0), adam_scalars(h), 0, 100);
    adam_step_ref(no_decay.view(1), adam_scalars(h), 0, 100);
    h.weight_decay[0] = 0.0;
    adam_step_ref(plain.view(0), adam_scalars(h), 0, 100);
    CHECK(no_decay.master == plain.master);
    CHECK(decayed.master != plain.master);
    AdamArrays part(n, 3);
    const AdamArrays untouched = part;
    adam_step_ref(part.view(0), adam_scalars(hyper(1)), 10, 20);
    for (std::size_t i = 0; i < n; ++i) {
        const bool inside = i >= 10 && i < 20;
        CHECK((part.master[i] == (inside ? decayed.master[i] : untouched.master[i])));
        CHECK((part.param[i] == (inside ? decayed.param[i] : untouched.param[i])));
    }
    auto bad = part.view(2);
    CHECK_THROWS_AS(adam_step_ref(bad, adam_scalars(hyper(1)), 0, 1), std::invalid_argument);
}

TEST_CASE("adam reference sum of squares: the unscaled gradients' squares summed in double") {
    AdamArrays a(5000, 11);
    double want = 0;
    for (std::size_t i = 100; i < 4000; ++i) {
        const double g = static_cast<double>(bf16_to_float(a.grad[i]) * 0.5f);
        want += g * g;
    }
    CHECK(adam_grad_sumsq_ref(a.view(0), 0.5f, 100, 4000) == doctest::Approx(want).epsilon(1e-15));
    CHECK(adam_grad_sumsq_ref(a.view(0), 0.5f, 7, 7) == 0.0);
}

TEST_CASE("adam reference with fp32 gradients (bf16 training's main gradients): read as fp32, not as bf16 bits") {
    AdamArrays a(3000, 21), b(3000, 21);
    // fp32 gradients between the bf16 values: a bf16 reading of them would be another number.
    std::vector<float> grad32(3000);
    for (std::size_t i = 0; i < grad32.size(); ++i) grad32[i] = bf16_to_float(a.grad[i]) * (1.0f + 1.0f / 1024);
    auto t = a.view(0);
    t.grad = grad32.data();
    t.grad_fp32 = 1;
    double want = 0;
    for (std::size_t i = 10; i < 2000; ++i) want += static_cast<double>(grad32[i] * 0.25f) * (grad32[i] * 0.25f);
    CHECK(adam_grad_sumsq_ref(t, 0.25f, 10, 2000) == doctest::Approx(want).epsilon(1e-15));
    // The step: per element, adam_math.h's update of the fp32 value.
    const auto s = adam_scalars(hyper(3));
    adam_step_ref(t, s, 0, 3000);
    for (std::size_t i = 0; i < 3000; i += 97) {
        float p = b.master[i], m = b.m1[i], v = b.m2[i];
        adam_update(grad32[i], 0, p, m, v, s);
        CHECK(a.master[i] == p);
        CHECK(a.m1[i] == m);
        CHECK(a.m2[i] == v);
        CHECK(a.param[i] == float_to_bf16(p));
    }
}
