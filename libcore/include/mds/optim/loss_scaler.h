// fp16 loss scaling, two policies with the same interface and save/load of their state:
//   DeepSpeedLossScaler — DeepSpeed deepspeed/runtime/fp16/loss_scaler.py DynamicLossScaler /
//     LossScaler, what BigScience used through the DeepSpeed config "fp16" block
//     (loss_scale 0 = dynamic, initial_scale_power, loss_scale_window, hysteresis, min_loss_scale);
//   MegatronGradScaler — megatron-core optimizer/grad_scaler.py DynamicGradScaler /
//     ConstantGradScaler (Megatron without DeepSpeed: --loss-scale, --initial-loss-scale, ...).
// update(found_inf) is called once per iteration after the overflow check; an iteration with
// found_inf skips the optimizer step and the lr step, and is counted in skipped_iterations
// (Megatron's "number of skipped iterations" log field).
//
// Both lower the scale on every overflow once `hysteresis` overflows have been seen since the last
// growth, and grow it after `window` consecutive clean iterations (resetting the hysteresis):
//   DeepSpeed: overflow: if hysteresis == 1 or cur_hysteresis == 1: scale = max(scale / factor, min)
//              (raises at min when raise_error_at_min_scale) else cur_hysteresis -= 1;
//              last_overflow_iter = cur_iter. clean: if (cur_iter - last_overflow_iter) % window == 0:
//              cur_hysteresis = hysteresis, scale *= factor. Always cur_iter += 1. Doubles.
//              (Recent DeepSpeed grows one clean iteration later: Config::stable_interval_growth.)
//   Megatron:  overflow: growth_tracker = 0, hysteresis_tracker -= 1, if <= 0: scale = max(scale ×
//              backoff, min). clean: growth_tracker += 1, if == window: reset both, scale ×= growth.
//              fp32 (the scale is a float32 tensor).
// Differences: DeepSpeed throws when an overflow happens at the minimum scale (Megatron clamps and
// goes on); with consecutive_hysteresis DeepSpeed refills the hysteresis on every clean iteration.
#pragma once

#include <cstdint>

#include "mds/optim/optimizer_config.h"

namespace mds::optim {

class DeepSpeedLossScaler {
public:
    struct Config {
        bool dynamic = true;                     // DeepSpeed fp16.loss_scale == 0
        double static_scale = 1.0;               // fp16.loss_scale when > 0
        double init_scale = 65536.0;             // 2^fp16.initial_scale_power (default power 16; 32 in DeepSpeed <= 0.3)
        double scale_factor = 2.0;               // not configurable in DeepSpeed's config
        std::int64_t scale_window = 1000;        // fp16.loss_scale_window
        double min_scale = 1.0;                  // fp16.min_loss_scale
        std::int64_t hysteresis = 2;             // fp16.hysteresis (DeepSpeed's delayed_shift)
        bool consecutive_hysteresis = false;     // fp16.consecutive_hysteresis
        bool raise_error_at_min_scale = true;    // DynamicLossScaler's default
        // Growth rule. false: older DeepSpeed, the rule of the versions BigScience ran, grow when
        // (cur_iter - last_overflow_iter) % window == 0, i.e. on the window-th clean iteration.
        // true: recent DeepSpeed (0.19.8 checked), stable = cur_iter - last_overflow_iter - 1, grow
        // when stable > 0 and stable % window == 0, i.e. one clean iteration later.
        bool stable_interval_growth = false;
    };
    struct State {
        double cur_scale = 0.0;
        std::int64_t cur_iter = 0;
        std::int64_t last_overflow_iter = -1;
        std::int64_t cur_hysteresis = 0;
        std::int64_t skipped_iterations = 0;
    };

    // Throws mds::UsageError for non-positive scales, windows or hysteresis.
    explicit DeepSpeedLossScaler(const Config& config);

    double scale() const { return state_.cur_scale; }
    bool dynamic() const { return config_.dynamic; }
    // Returns true when the optimizer step must be skipped (found_inf). Throws mds::Error when a
    // dynamic scaler overflows at its minimum scale and raise_error_at_min_scale is set.
    bool update(bool found_inf);

    const Config& config() const { return config_; }
    State state() const { return state_; }
    void load_state(const State& state) { state_ = state; }

private:
    Config config_;
    State state_;
};

class MegatronGradScaler {
public:
    struct Config {
        bool dynamic = true;                 // unset --loss-scale
        float initial_scale = 4294967296.0f; // --initial-loss-scale (or --loss-scale when static)
        float min_scale = 1.0f;              // --min-loss-scale
        float growth_factor = 2.0f;          // fixed in Megatron
        float backoff_factor = 0.5f;         // fixed in Megatron
        std::int64_t growth_interval = 1000; // --loss-scale-window
        std::int64_t hysteresis = 2;         // --hysteresis
    };
    struct State {
        float scale = 0.0f;
        std::int64_t growth_tracker = 0;
        std::int64_t hysteresis_tracker = 0;
        std::int64_t skipped_iterations = 0;
    };

    // Throws mds::UsageError for Megatron's assertions (scales > 0, min <= initial, growth > 1,
    // 0 < backoff < 1, interval and hysteresis > 0).
    explicit MegatronGradScaler(const Config& config);

    float scale() const { return state_.scale; }
    // Megatron's inv_scale: the reciprocal computed in double, rounded to float.
    float inv_scale() const { return static_cast<float>(1.0 / static_cast<double>(state_.scale)); }
    bool dynamic() const { return config_.dynamic; }
    bool update(bool found_inf);

    const Config& config() const { return config_; }
    State state() const { return state_; }
    void load_state(const State& state) { state_ = state; }

private:
    Config config_;
    State state_;
};

// Scaler configs from the Megatron flags (config.loss_scale unset = dynamic).
MegatronGradScaler::Config megatron_grad_scaler_config(const OptimizerConfig& config);
// The same flags (after apply_deepspeed_config has put the DeepSpeed config's fp16 section in them)
// for DeepSpeed's scaler.
DeepSpeedLossScaler::Config deepspeed_loss_scaler_config(const OptimizerConfig& config);

}  // namespace mds::optim
