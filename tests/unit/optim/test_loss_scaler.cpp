// fp16 loss scalers (mds/optim/loss_scaler.h): DeepSpeed's and megatron-core's update sequences.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "mds/optim/loss_scaler.h"
#include "mds/util/error.h"

using namespace mds::optim;

namespace {

template <class Scaler>
std::vector<double> run(Scaler& s, const std::string& overflows) {
    std::vector<double> out;
    for (char c : overflows) {
        s.update(c == '1');
        out.push_back(static_cast<double>(s.scale()));
    }
    return out;
}

DeepSpeedLossScaler::Config ds(double init, std::int64_t window, std::int64_t hysteresis, double min) {
    DeepSpeedLossScaler::Config c;
    c.init_scale = init;
    c.scale_window = window;
    c.hysteresis = hysteresis;
    c.min_scale = min;
    return c;
}

MegatronGradScaler::Config meg(float init, std::int64_t window, std::int64_t hysteresis, float min) {
    MegatronGradScaler::Config c;
    c.initial_scale = init;
    c.growth_interval = window;
    c.hysteresis = hysteresis;
    c.min_scale = min;
    return c;
}

}  // namespace

TEST_CASE("DeepSpeed: an overflow halves only after hysteresis overflows; every later one halves") {
    DeepSpeedLossScaler s(ds(4096, 1000, 2, 1));
    CHECK(run(s, "1") == std::vector<double>{4096});
    CHECK(s.state().cur_hysteresis == 1);
    CHECK(run(s, "111") == std::vector<double>{2048, 1024, 512});
    CHECK(s.state().skipped_iterations == 4);
}

TEST_CASE("DeepSpeed: growth after window clean iterations, which refills the hysteresis") {
    DeepSpeedLossScaler s(ds(1024, 4, 2, 1));
    CHECK(run(s, "0001") == std::vector<double>{1024, 1024, 1024, 1024});  // 4th is the overflow
    CHECK(run(s, "0000") == std::vector<double>{1024, 1024, 1024, 2048});  // 4 after the overflow
    CHECK(s.state().cur_hysteresis == 2);
    DeepSpeedLossScaler t(ds(1024, 4, 1, 1));
    CHECK(run(t, "0000") == std::vector<double>{1024, 1024, 1024, 2048});
    CHECK(run(t, "0000") == std::vector<double>{2048, 2048, 2048, 4096});
}

TEST_CASE("DeepSpeed: clamps at min_loss_scale, then raises when an overflow hits the minimum") {
    DeepSpeedLossScaler s(ds(8, 1000, 1, 2));
    CHECK(run(s, "11") == std::vector<double>{4, 2});
    CHECK_THROWS_WITH_AS(s.update(true), doctest::Contains("already at its minimum 2"), mds::Error);
    auto c = ds(8, 1000, 1, 3);
    c.raise_error_at_min_scale = false;
    DeepSpeedLossScaler t(c);
    CHECK(run(t, "1111") == std::vector<double>{4, 3, 3, 3});
}

TEST_CASE("DeepSpeed: static scale never moves but overflows still skip") {
    DeepSpeedLossScaler::Config c;
    c.dynamic = false;
    c.static_scale = 4096;
    DeepSpeedLossScaler s(c);
    CHECK(s.update(true));
    CHECK_FALSE(s.update(false));
    CHECK(s.scale() == 4096);
    CHECK(s.state().skipped_iterations == 1);
}

TEST_CASE("Megatron: hysteresis, growth after window, min clamp without an error") {
    MegatronGradScaler s(meg(16, 3, 2, 4));
    CHECK(run(s, "000") == std::vector<double>{16, 16, 32});
    CHECK(run(s, "11") == std::vector<double>{32, 16});
    CHECK(run(s, "111") == std::vector<double>{8, 4, 4});
    CHECK(s.state().hysteresis_tracker == -3);
    CHECK(run(s, "000") == std::vector<double>{4, 4, 8});
    CHECK(s.state().hysteresis_tracker == 2);
    CHECK(s.inv_scale() == 0.125f);
    CHECK(s.state().skipped_iterations == 5);
}

TEST_CASE("state save/load continues the same sequence") {
    const std::string pattern = "0010011000010000000011101000000";
    DeepSpeedLossScaler a(ds(65536, 5, 2, 1));
    MegatronGradScaler m(meg(65536, 5, 2, 1));
    auto full_a = run(a, pattern);
    auto full_m = run(m, pattern);
    CHECK(full_a == full_m);  // the two policies agree on this pattern

    DeepSpeedLossScaler b(ds(65536, 5, 2, 1));
    run(b, pattern.substr(0, 13));
    DeepSpeedLossScaler b2(ds(65536, 5, 2, 1));
    b2.load_state(b.state());
    auto tail = run(b2, pattern.substr(13));
    CHECK(std::vector<double>(full_a.begin() + 13, full_a.end()) == tail);
}

TEST_CASE("config checks") {
    CHECK_THROWS_AS(DeepSpeedLossScaler(ds(0, 10, 2, 1)), mds::UsageError);
    CHECK_THROWS_AS(DeepSpeedLossScaler(ds(16, 0, 2, 1)), mds::UsageError);
    CHECK_THROWS_AS(MegatronGradScaler(meg(1, 10, 2, 2)), mds::UsageError);
    OptimizerConfig c;
    c.loss_scale = 4096;
    auto g = megatron_grad_scaler_config(c);
    CHECK_FALSE(g.dynamic);
    CHECK(g.initial_scale == 4096.0f);
}

TEST_CASE("DeepSpeed: recent versions grow one clean iteration later (stable_interval_growth)") {
    auto c = ds(1024, 4, 1, 1);
    c.stable_interval_growth = true;
    DeepSpeedLossScaler s(c);
    CHECK(run(s, "00000") == std::vector<double>{1024, 1024, 1024, 1024, 2048});
    CHECK(run(s, "1") == std::vector<double>{1024});
    CHECK(run(s, "00000") == std::vector<double>{1024, 1024, 1024, 1024, 2048});
}
