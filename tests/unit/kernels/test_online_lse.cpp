// kernels/online_lse.h, the fused cross entropy kernel's running log-sum-exp, run on the host in the order the
// kernel combines a row (512 threads strided over the row, each merging the pair of each load's values into its
// own, then butterfly merges within each warp and over the 16 warps' pairs): the same log-sum-exp as the reference's two passes in double, and the
// same special values (+inf, -inf, NaN) whichever threads the special logits fall to.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cross_entropy_ref.h"
#include "kernels/online_lse.h"

using namespace mds::kernels;

namespace {

constexpr int kBlockThreads = 512;  // cross_entropy.cu's kThreads

// lanes[i] = merge(lanes[i], lanes[i ^ offset]) for offset 16, 8, 4, 2, 1 over each group of 32: __shfl_xor_sync.
void butterfly(std::vector<MaxSum>& v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        const std::vector<MaxSum> before = v;
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = lse_merge(before[i], before[i ^ static_cast<std::size_t>(offset)]);
    }
}

// The kernel's log-sum-exp of one row, `vec` values per load.
float kernel_order(const std::vector<float>& row, int vec) {
    std::vector<MaxSum> lanes(kBlockThreads, lse_empty());
    for (int t = 0; t < kBlockThreads; ++t) {
        for (std::size_t j = static_cast<std::size_t>(t * vec); j < row.size(); j += static_cast<std::size_t>(kBlockThreads * vec)) {
            const int n = static_cast<int>(std::min(static_cast<std::size_t>(vec), row.size() - j));
            auto& lane = lanes[static_cast<std::size_t>(t)];
            lane = lse_merge(lane, lse_of(row.data() + j, n));
        }
    }
    butterfly(lanes);
    std::vector<MaxSum> warps(32, lse_empty());
    for (int w = 0; w < kBlockThreads / 32; ++w) warps[static_cast<std::size_t>(w)] = lanes[static_cast<std::size_t>(w * 32)];
    butterfly(warps);
    return lse_value(warps[0]);
}

float reference(const std::vector<float>& row) {
    const CrossEntropyShape s{1, static_cast<std::int64_t>(row.size()), static_cast<std::int64_t>(row.size())};
    const std::int64_t target = 0;
    float loss = 0, lse = 0;
    cross_entropy_forward_ref(row.data(), Dtype::F32, s, &target, &loss, &lse, 0, 1);
    return lse;
}

void check_same(const std::vector<float>& row, const char* what) {
    const float want = reference(row);
    for (const int vec : {1, 4, 8}) {
        INFO(what << ", " << row.size() << " values, " << vec << " per load");
        const float got = kernel_order(row, vec);
        if (std::isnan(want) || std::isinf(want)) {
            CHECK(std::isnan(got) == std::isnan(want));
            if (!std::isnan(want)) CHECK(got == want);
        } else {
            CHECK(std::fabs(got - want) <= 2e-6 * std::fmax(1.0f, std::fabs(want)));
        }
    }
}

}  // namespace

TEST_CASE("online log-sum-exp in the kernel's order = the reference's, finite rows") {
    std::mt19937_64 rng(5);
    for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{512}, std::size_t{4099}, std::size_t{50304}}) {
        for (const float scale : {0.5f, 4.0f, 30.0f}) {
            std::normal_distribution<float> normal(0.0f, scale);
            std::vector<float> row(n);
            for (auto& x : row) x = normal(rng);
            check_same(row, "normal");
        }
    }
    std::vector<float> equal(1000, 2.0f);
    check_same(equal, "equal values");
    CHECK(kernel_order(equal, 8) == doctest::Approx(2.0 + std::log(1000.0)).epsilon(1e-6));
}

TEST_CASE("online log-sum-exp: +inf, -inf and NaN wherever they fall") {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> row(4096, 0.25f);
    // Two +inf in one thread's values, in two lanes of a warp, in two warps: +inf, never NaN.
    // (no structured binding: clang 14 does not capture one in INFO's lambda)
    for (const auto& at : {std::pair<std::size_t, std::size_t>{0, 512}, {0, 1}, {3, 40}, {100, 3000}, {5, 5 + 4096 / 2}}) {
        auto r = row;
        r[at.first] = inf;
        r[at.second] = inf;
        INFO("+inf at " << at.first << " and " << at.second);
        check_same(r, "two +inf");
        CHECK(kernel_order(r, 8) == inf);
    }
    auto one_inf = row;
    one_inf[77] = inf;
    check_same(one_inf, "one +inf");
    auto with_nan = row;
    with_nan[4095] = nan;
    check_same(with_nan, "a NaN");
    CHECK(std::isnan(kernel_order(with_nan, 1)));
    auto nan_and_inf = row;
    nan_and_inf[1] = inf;
    nan_and_inf[2] = nan;
    check_same(nan_and_inf, "NaN and +inf");
    std::vector<float> all_minus_inf(600, -inf);
    check_same(all_minus_inf, "only -inf");
    CHECK(kernel_order(all_minus_inf, 8) == -inf);
    auto one_finite = all_minus_inf;
    one_finite[599] = 0.5f;
    check_same(one_finite, "-inf but one");
    CHECK(kernel_order(one_finite, 1) == 0.5f);
    std::vector<float> huge(3000, 0.0f);
    huge[1234] = 1e4f;
    check_same(huge, "one logit of 1e4");
}
