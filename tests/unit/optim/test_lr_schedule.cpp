// Megatron learning-rate schedule (mds/optim/lr_schedule.h): hand-computed values.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "mds/optim/lr_schedule.h"
#include "mds/util/error.h"

using namespace mds::optim;

namespace {

LrScheduleParams cosine_params() {
    LrScheduleParams p;
    p.max_lr = 1e-4;
    p.min_lr = 1e-5;
    p.lr_warmup_steps = 1000;
    p.lr_decay_steps = 11000;
    p.lr_decay_style = LrDecayStyle::cosine;
    return p;
}

}  // namespace

TEST_CASE("warmup is linear from 0 (BS) and its midpoint is half the peak") {
    LrSchedule s(cosine_params());
    CHECK(s.lr() == 0.0);
    s.step(500);
    CHECK(s.lr() == 1e-4 * 500.0 / 1000.0);
    CHECK(s.lr() == doctest::Approx(5e-5));
    s.step(500);
    CHECK(s.lr() == 1e-4);  // n == W is still warmup, at the peak
}

TEST_CASE("megatron-core warmup starts from --lr-warmup-init") {
    auto p = cosine_params();
    p.init_lr = 2e-5;
    LrSchedule s(p);
    CHECK(s.lr() == 2e-5);
    s.step(500);
    CHECK(s.lr() == doctest::Approx(6e-5));
}

TEST_CASE("cosine at half the decay is the mean of max and min; min after the end") {
    LrSchedule s(cosine_params());
    s.step(1000 + 5000);
    CHECK(s.lr() == doctest::Approx(5.5e-5).epsilon(1e-12));
    s.step(5000);
    CHECK(s.lr() == doctest::Approx(1e-5));  // n == D: cos(pi) -> min
    s.step(1);
    CHECK(s.lr() == 1e-5);
}

TEST_CASE("linear decay at a quarter") {
    auto p = cosine_params();
    p.lr_decay_style = LrDecayStyle::linear;
    LrSchedule s(p);
    s.step(1000 + 2500);
    CHECK(s.lr() == doctest::Approx(1e-5 + 0.75 * 9e-5));
}

TEST_CASE("constant stays at the peak after warmup, even past the decay length") {
    auto p = cosine_params();
    p.lr_decay_style = LrDecayStyle::constant;
    LrSchedule s(p);
    s.step(20000);
    CHECK(s.lr() == 1e-4);
}

TEST_CASE("inverse-square-root: max * sqrt(W) / sqrt(n), floored at min") {
    auto p = cosine_params();
    p.lr_decay_style = LrDecayStyle::inverse_square_root;
    p.lr_decay_steps = 1000000;
    LrSchedule s(p);
    s.step(4000);
    CHECK(s.lr() == doctest::Approx(5e-5));
    s.step(96000);  // n = 100000: 1e-4 * sqrt(1000/100000) = 1e-5
    CHECK(s.lr() == doctest::Approx(1e-5));
    s.step(100000);
    CHECK(s.lr() == 1e-5);
}

TEST_CASE("token-based decay (BS --lr-decay-tokens) captures the tokens at the exact end of warmup") {
    auto p = cosine_params();
    p.lr_decay_style = LrDecayStyle::linear;
    p.lr_decay_tokens = 2'000'000;
    LrSchedule s(p);
    s.step(1000, 1'000'000);  // hits W exactly: warmup_tokens = 1e6
    CHECK(s.lr() == 1e-4);
    CHECK(s.state().warmup_tokens == 1'000'000);
    s.step(10, 1'500'000);  // half-way in tokens, whatever the samples say
    CHECK(s.lr() == doctest::Approx(5.5e-5));
    s.step(10, 2'000'001);
    CHECK(s.lr() == 1e-5);
}

TEST_CASE("weight decay increment (megatron-core)") {
    auto p = cosine_params();
    p.start_wd = 0.0;
    p.end_wd = 0.1;
    p.wd_incr_steps = 1000;
    p.wd_incr_style = WdIncrStyle::linear;
    LrSchedule s(p);
    s.step(250);
    CHECK(s.weight_decay() == doctest::Approx(0.025));
    s.step(10000);
    CHECK(s.weight_decay() == 0.1);
    p.wd_incr_style = WdIncrStyle::cosine;
    LrSchedule c(p);
    c.step(500);
    CHECK(c.weight_decay() == doctest::Approx(0.05));
}

TEST_CASE("Megatron's constructor assertions are usage errors") {
    auto p = cosine_params();
    p.lr_warmup_steps = 11000;
    CHECK_THROWS_AS(LrSchedule{p}, mds::UsageError);
    p = cosine_params();
    p.min_lr = 1e-3;
    CHECK_THROWS_AS(LrSchedule{p}, mds::UsageError);
    CHECK_THROWS_AS(parse_lr_decay_style("exp"), mds::UsageError);
    CHECK(parse_lr_decay_style("inverse_sqrt") == LrDecayStyle::inverse_square_root);
}

TEST_CASE("save/load resumes bit-exactly; the resume flags decide mismatches") {
    LrSchedule a(cosine_params());
    for (int i = 0; i < 37; ++i) a.step(333);
    const auto saved = a.state();
    LrSchedule b(cosine_params());
    b.load_state(saved, LrCheckpointPolicy::require_match);
    CHECK(b.lr() == a.lr());
    for (int i = 0; i < 20; ++i) {
        a.step(333);
        b.step(333);
        CHECK(b.lr() == a.lr());
    }

    auto changed = cosine_params();
    changed.max_lr = 2e-4;
    LrSchedule c(changed);
    CHECK_THROWS_WITH_AS(c.load_state(saved, LrCheckpointPolicy::require_match),
                         doctest::Contains("--override-lr-scheduler"), mds::Error);
    LrSchedule d(changed);
    d.load_state(saved, LrCheckpointPolicy::use_checkpoint);
    CHECK(d.params().max_lr == 1e-4);
    LrSchedule e(changed);
    e.load_state(saved, LrCheckpointPolicy::override_flags);
    CHECK(e.params().max_lr == 2e-4);
    CHECK(e.num_steps() == saved.num_steps);
}

TEST_CASE("a resume takes BigScience's AnnealingLR state and a changed run length as BMD does") {
    // BMD's AnnealingLR saves no weight-decay schedule: the flags' constant --weight-decay stays.
    auto flags = cosine_params();
    flags.start_wd = flags.end_wd = 0.1;
    flags.wd_incr_steps = 120;  // --train-iters 30 x 4
    LrSchedule a(cosine_params());
    a.step(40);
    auto bmd = a.state();
    bmd.params.start_wd = bmd.params.end_wd = 0.0;
    bmd.params.wd_incr_steps = 0;
    bmd.has_wd_schedule = false;
    LrSchedule b(flags);
    b.load_state(bmd, LrCheckpointPolicy::require_match);
    CHECK(b.weight_decay() == 0.1);
    CHECK(b.lr() == a.lr());
    // mds's own checkpoint of a 20-iteration run resumed with --train-iters 30 (same decay length):
    // a constant weight decay does not depend on the run length, so that is accepted.
    auto own = a.state();
    own.params.start_wd = own.params.end_wd = 0.1;
    own.params.wd_incr_steps = 80;
    LrSchedule c(flags);
    c.load_state(own, LrCheckpointPolicy::require_match);
    CHECK(c.weight_decay() == 0.1);
    CHECK(c.lr() == a.lr());
    // An increasing weight decay (megatron-core's) does depend on it: still checked.
    auto incr = flags;
    incr.start_wd = 0.0;
    incr.wd_incr_style = WdIncrStyle::linear;
    own.params.start_wd = 0.0;
    own.params.wd_incr_style = WdIncrStyle::linear;
    LrSchedule d(incr);
    CHECK_THROWS_WITH_AS(d.load_state(own, LrCheckpointPolicy::require_match),
                         doctest::Contains("weight decay increment samples is 120 from the flags but 80"), mds::Error);
}

TEST_CASE("lengths from the flags are in samples (get_learning_rate_scheduler)") {
    OptimizerConfig c;
    c.lr = 1e-4;
    c.min_lr = 1e-5;
    c.lr_decay_style = "cosine";
    c.lr_warmup_iters = 100;
    auto p = lr_schedule_params_from_config(c, 1000, std::nullopt, 512);
    CHECK(p.lr_decay_steps == 512000);
    CHECK(p.lr_warmup_steps == 51200);

    OptimizerConfig s;  // tr1-13B
    s.lr = 1e-4;
    s.lr_decay_samples = 126'953'125;
    s.lr_warmup_samples = 216'320;
    auto q = lr_schedule_params_from_config(s, std::nullopt, 300'000'000, 1024);
    CHECK(q.lr_decay_steps == 126'953'125);
    CHECK(q.lr_warmup_steps == 216'320);

    s.lr_warmup_fraction = 0.01;
    CHECK_THROWS_AS(lr_schedule_params_from_config(s, std::nullopt, 300'000'000, 1024), mds::UsageError);
    s.lr_warmup_samples = 0;
    CHECK(lr_schedule_params_from_config(s, std::nullopt, 300'000'000, 1024).lr_warmup_steps ==
          doctest::Approx(1'269'531.25));

    OptimizerConfig both;
    both.override_lr_scheduler = both.use_checkpoint_lr_scheduler = true;
    CHECK_THROWS_AS(lr_checkpoint_policy(both), mds::UsageError);
}
