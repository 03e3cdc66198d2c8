// fp16 loss scalers: DeepSpeed's DynamicLossScaler and megatron-core's DynamicGradScaler (loss_scaler.h).
#include "mds/optim/loss_scaler.h"

#include <algorithm>
#include <string>

#include "mds/util/error.h"
#include "number_text.h"

namespace mds::optim {

using detail::number_text;

DeepSpeedLossScaler::DeepSpeedLossScaler(const Config& config) : config_(config) {
    if (!config_.dynamic) {
        if (!(config_.static_scale > 0.0))
            throw UsageError("static loss scale must be positive, got " + number_text(config_.static_scale));
        state_.cur_scale = config_.static_scale;
        return;
    }
    if (!(config_.init_scale > 0.0))
        throw UsageError("initial loss scale must be positive, got " + number_text(config_.init_scale));
    if (!(config_.min_scale > 0.0))
        throw UsageError("fp16.min_loss_scale must be positive, got " + number_text(config_.min_scale));
    if (!(config_.scale_factor > 1.0))
        throw UsageError("loss scale factor must be > 1, got " + number_text(config_.scale_factor));
    if (config_.scale_window <= 0)
        throw UsageError("fp16.loss_scale_window must be positive, got " + std::to_string(config_.scale_window));
    if (config_.hysteresis <= 0)
        throw UsageError("fp16.hysteresis must be positive, got " + std::to_string(config_.hysteresis));
    state_.cur_scale = config_.init_scale;
    state_.cur_hysteresis = config_.hysteresis;
}

bool DeepSpeedLossScaler::update(bool found_inf) {
    if (found_inf) ++state_.skipped_iterations;
    if (!config_.dynamic) return found_inf;  // LossScaler.update_scale is a no-op
    State& s = state_;
    if (found_inf) {
        if (config_.hysteresis == 1 || s.cur_hysteresis == 1) {
            if (s.cur_scale == config_.min_scale && config_.raise_error_at_min_scale)
                throw Error("fp16 loss scale already at its minimum " + number_text(config_.min_scale) +
                            " and the gradients still overflow at iteration " + std::to_string(s.cur_iter) +
                            "; the run diverged (lower the learning rate or resume from an earlier checkpoint)");
            s.cur_scale = std::max(s.cur_scale / config_.scale_factor, config_.min_scale);
        } else {
            s.cur_hysteresis -= 1;
        }
        s.last_overflow_iter = s.cur_iter;
    } else {
        if (config_.consecutive_hysteresis) s.cur_hysteresis = config_.hysteresis;
        const std::int64_t since = s.cur_iter - s.last_overflow_iter;
        const bool grow = config_.stable_interval_growth ? since - 1 > 0 && (since - 1) % config_.scale_window == 0
                                                         : since % config_.scale_window == 0;
        if (grow) {
            if (!config_.consecutive_hysteresis) s.cur_hysteresis = config_.hysteresis;
            s.cur_scale *= config_.scale_factor;
        }
    }
    s.cur_iter += 1;
    return found_inf;
}

MegatronGradScaler::MegatronGradScaler(const Config& config) : config_(config) {
    if (!(config_.initial_scale > 0.0f))
        throw UsageError("initial loss scale must be positive, got " + number_text(config_.initial_scale));
    state_.scale = config_.initial_scale;
    if (!config_.dynamic) return;
    if (!(config_.min_scale > 0.0f))
        throw UsageError("--min-loss-scale must be positive, got " + number_text(config_.min_scale));
    if (!(config_.min_scale <= config_.initial_scale))
        throw UsageError("--min-loss-scale (" + number_text(config_.min_scale) + ") must be <= --initial-loss-scale (" +
                         number_text(config_.initial_scale) + ")");
    if (!(config_.growth_factor > 1.0f))
        throw UsageError("loss scale growth factor must be > 1, got " + number_text(config_.growth_factor));
    if (!(config_.backoff_factor > 0.0f && config_.backoff_factor < 1.0f))
        throw UsageError("loss scale backoff factor must be in (0, 1), got " + number_text(config_.backoff_factor));
    if (config_.growth_interval <= 0)
        throw UsageError("--loss-scale-window must be positive, got " + std::to_string(config_.growth_interval));
    if (config_.hysteresis <= 0)
        throw UsageError("--hysteresis must be positive, got " + std::to_string(config_.hysteresis));
    state_.hysteresis_tracker = config_.hysteresis;
}

bool MegatronGradScaler::update(bool found_inf) {
    if (found_inf) ++state_.skipped_iterations;
    if (!config_.dynamic) return found_inf;  // ConstantGradScaler.update is a no-op
    State& s = state_;
    if (found_inf) {
        s.growth_tracker = 0;
        s.hysteresis_tracker -= 1;
        if (s.hysteresis_tracker <= 0) s.scale = std::max(s.scale * config_.backoff_factor, config_.min_scale);
    } else {
        s.growth_tracker += 1;
        if (s.growth_tracker == config_.growth_interval) {
            s.growth_tracker = 0;
            s.hysteresis_tracker = config_.hysteresis;
            s.scale = s.scale * config_.growth_factor;
        }
    }
    return found_inf;
}

MegatronGradScaler::Config megatron_grad_scaler_config(const OptimizerConfig& c) {
    MegatronGradScaler::Config g;
    g.dynamic = !c.loss_scale.has_value();
    g.initial_scale = static_cast<float>(c.loss_scale.value_or(c.initial_loss_scale));
    g.min_scale = static_cast<float>(c.min_loss_scale);
    g.growth_interval = c.loss_scale_window;
    g.hysteresis = c.hysteresis;
    return g;
}

DeepSpeedLossScaler::Config deepspeed_loss_scaler_config(const OptimizerConfig& c) {
    DeepSpeedLossScaler::Config d;
    d.dynamic = !c.loss_scale.has_value();
    d.static_scale = c.loss_scale.value_or(1.0);
    d.init_scale = c.initial_loss_scale;
    d.scale_window = c.loss_scale_window;
    d.min_scale = c.min_loss_scale;
    d.hysteresis = c.hysteresis;
    return d;
}

}  // namespace mds::optim
