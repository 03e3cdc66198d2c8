// Megatron's learning-rate and weight-decay schedule (lr_schedule.h has the formulas).
#include "mds/optim/lr_schedule.h"

#include <cmath>
#include <numbers>  // std::numbers::pi: the same double as Python's math.pi

#include "mds/util/error.h"
#include "number_text.h"

namespace mds::optim {

using detail::number_text;

LrDecayStyle parse_lr_decay_style(std::string_view name) {
    if (name == "constant") return LrDecayStyle::constant;
    if (name == "linear") return LrDecayStyle::linear;
    if (name == "cosine") return LrDecayStyle::cosine;
    if (name == "inverse-square-root" || name == "inverse_sqrt") return LrDecayStyle::inverse_square_root;
    throw UsageError("unknown learning rate decay style '" + std::string(name) +
                     "' (expected constant, linear, cosine or inverse-square-root)");
}

std::string to_string(LrDecayStyle style) {
    switch (style) {
        case LrDecayStyle::constant: return "constant";
        case LrDecayStyle::linear: return "linear";
        case LrDecayStyle::cosine: return "cosine";
        case LrDecayStyle::inverse_square_root: return "inverse-square-root";
    }
    return "?";
}

WdIncrStyle parse_wd_incr_style(std::string_view name) {
    if (name == "constant") return WdIncrStyle::constant;
    if (name == "linear") return WdIncrStyle::linear;
    if (name == "cosine") return WdIncrStyle::cosine;
    throw UsageError("unknown weight decay increment style '" + std::string(name) +
                     "' (expected constant, linear or cosine)");
}

std::string to_string(WdIncrStyle style) {
    switch (style) {
        case WdIncrStyle::constant: return "constant";
        case WdIncrStyle::linear: return "linear";
        case WdIncrStyle::cosine: return "cosine";
    }
    return "?";
}

LrSchedule::LrSchedule(const LrScheduleParams& params) : p_(params) {
    if (!(p_.min_lr >= 0.0)) throw UsageError("--min-lr must be >= 0, got " + number_text(p_.min_lr));
    if (!(p_.max_lr >= p_.min_lr))
        throw UsageError("--lr (" + number_text(p_.max_lr) + ") must be >= --min-lr (" + number_text(p_.min_lr) + ")");
    if (!(p_.init_lr <= p_.max_lr))
        throw UsageError("--lr-warmup-init (" + number_text(p_.init_lr) + ") must be <= --lr (" +
                         number_text(p_.max_lr) + ")");
    if (p_.lr_decay_steps <= 0)
        throw UsageError("the learning rate decay length must be positive, got " + std::to_string(p_.lr_decay_steps) +
                         " samples");
    if (!(p_.lr_warmup_steps < static_cast<double>(p_.lr_decay_steps)))
        throw UsageError("the learning rate warmup (" + number_text(p_.lr_warmup_steps) +
                         " samples) must be shorter than the decay (" + std::to_string(p_.lr_decay_steps) +
                         " samples); lower --lr-warmup-* or raise --lr-decay-*");
    if (!(p_.start_wd >= 0.0)) throw UsageError("--start-weight-decay must be >= 0, got " + number_text(p_.start_wd));
    if (!(p_.end_wd >= p_.start_wd))
        throw UsageError("--end-weight-decay (" + number_text(p_.end_wd) + ") must be >= --start-weight-decay (" +
                         number_text(p_.start_wd) + ")");
    if (p_.wd_incr_style == WdIncrStyle::constant && p_.start_wd != p_.end_wd)
        throw UsageError("--weight-decay-incr-style constant needs --start-weight-decay == --end-weight-decay (got " +
                         number_text(p_.start_wd) + " and " + number_text(p_.end_wd) + ")");
    step(0, 0);
}

void LrSchedule::step(std::int64_t increment, std::int64_t consumed_tokens) {
    num_tokens_ = consumed_tokens;
    num_steps_ += increment;
    recompute();
}

void LrSchedule::recompute() {
    lr_ = compute_lr();
    wd_ = compute_wd();
}

double LrSchedule::compute_lr() {
    const double n = static_cast<double>(num_steps_);
    if (p_.lr_warmup_steps > 0.0 && n <= p_.lr_warmup_steps) {
        // BS captures the token count at the exact end of warmup (only an exact hit counts).
        if (n == p_.lr_warmup_steps && p_.lr_decay_tokens) warmup_tokens_ = num_tokens_;
        return p_.init_lr + (p_.max_lr - p_.init_lr) * n / p_.lr_warmup_steps;
    }
    if (p_.lr_decay_style == LrDecayStyle::constant) return p_.max_lr;

    if (p_.lr_decay_style == LrDecayStyle::inverse_square_root) {
        if (num_steps_ > p_.lr_decay_steps) return p_.min_lr;
        const double w = std::max(p_.lr_warmup_steps, 1.0);
        const double s = static_cast<double>(std::max<std::int64_t>(num_steps_, 1));
        const double lr = p_.max_lr * std::pow(w, 0.5) / std::pow(s, 0.5);
        return std::max(p_.min_lr, lr);
    }

    double decay_ratio = 0.0;
    if (!p_.lr_decay_tokens) {
        if (num_steps_ > p_.lr_decay_steps) return p_.min_lr;
        decay_ratio = (n - p_.lr_warmup_steps) / (static_cast<double>(p_.lr_decay_steps) - p_.lr_warmup_steps);
    } else {
        if (num_tokens_ > *p_.lr_decay_tokens) return p_.min_lr;
        decay_ratio = static_cast<double>(num_tokens_ - warmup_tokens_) /
                      static_cast<double>(*p_.lr_decay_tokens - warmup_tokens_);
    }
    if (!(decay_ratio >= 0.0 && decay_ratio <= 1.0))
        throw Error("learning rate schedule: decay ratio " + number_text(decay_ratio) + " outside [0, 1] at " +
                    std::to_string(num_steps_) + " samples, " + std::to_string(num_tokens_) + " tokens");
    const double delta_lr = p_.max_lr - p_.min_lr;
    const double coeff = p_.lr_decay_style == LrDecayStyle::linear
                             ? 1.0 - decay_ratio
                             : 0.5 * (std::cos(std::numbers::pi * decay_ratio) + 1.0);
    return p_.min_lr + coeff * delta_lr;
}

double LrSchedule::compute_wd() const {
    if (num_steps_ > p_.wd_incr_steps) return p_.end_wd;
    if (p_.wd_incr_style == WdIncrStyle::constant) return p_.end_wd;
    if (p_.wd_incr_steps == 0) throw Error("weight decay increment over 0 samples");  // Python: ZeroDivisionError
    const double ratio = static_cast<double>(num_steps_) / static_cast<double>(p_.wd_incr_steps);
    const double delta_wd = p_.end_wd - p_.start_wd;
    const double coeff =
        p_.wd_incr_style == WdIncrStyle::linear ? ratio : 0.5 * (std::cos(std::numbers::pi * (1 - ratio)) + 1.0);
    return p_.start_wd + coeff * delta_wd;
}

LrScheduleState LrSchedule::state() const { return {p_, num_steps_, num_tokens_, warmup_tokens_}; }

namespace {

// Megatron's _check_and_set for one value.
template <class T, class Text>
T check_and_set(const T& flags, const T& ckpt, const char* name, LrCheckpointPolicy policy, Text text) {
    if (policy == LrCheckpointPolicy::override_flags) return flags;
    if (policy == LrCheckpointPolicy::require_match && !(flags == ckpt))
        throw Error(std::string("learning rate schedule: ") + name + " is " + text(flags) + " from the flags but " +
                    text(ckpt) + " in the checkpoint; pass --override-lr-scheduler to use the flags or "
                    "--use-checkpoint-lr-scheduler to keep the checkpoint's values");
    return ckpt;
}

}  // namespace

void LrSchedule::load_state(const LrScheduleState& s, LrCheckpointPolicy policy) {
    auto num = [](double v) { return number_text(v); };
    auto integer = [](std::int64_t v) { return std::to_string(v); };
    auto style = [](LrDecayStyle v) { return to_string(v); };
    auto wd_style = [](WdIncrStyle v) { return to_string(v); };
    // Same order as Megatron's load_state_dict, so the first reported mismatch is the same.
    p_.max_lr = check_and_set(p_.max_lr, s.params.max_lr, "learning rate", policy, num);
    p_.min_lr = check_and_set(p_.min_lr, s.params.min_lr, "minimum learning rate", policy, num);
    p_.lr_warmup_steps = check_and_set(p_.lr_warmup_steps, s.params.lr_warmup_steps, "warmup samples", policy, num);
    p_.lr_decay_steps = check_and_set(p_.lr_decay_steps, s.params.lr_decay_steps, "decay samples", policy, integer);
    p_.lr_decay_style = check_and_set(p_.lr_decay_style, s.params.lr_decay_style, "decay style", policy, style);
    warmup_tokens_ = s.warmup_tokens;
    // The weight-decay schedule is megatron-core's (BMD's AnnealingLR keeps none: a BMD checkpoint
    // resumes with the flags' values). Its length follows --train-iters / --train-samples, which
    // BigScience changed on resume: it matters, and is checked, only when the decay increments.
    if (s.has_wd_schedule) {
        p_.start_wd = check_and_set(p_.start_wd, s.params.start_wd, "start weight decay", policy, num);
        p_.end_wd = check_and_set(p_.end_wd, s.params.end_wd, "end weight decay", policy, num);
        p_.wd_incr_style = check_and_set(p_.wd_incr_style, s.params.wd_incr_style, "weight decay increment style",
                                         policy, wd_style);
        if (p_.wd_incr_style != WdIncrStyle::constant && p_.start_wd != p_.end_wd)
            p_.wd_incr_steps = check_and_set(p_.wd_incr_steps, s.params.wd_incr_steps, "weight decay increment samples",
                                             policy, integer);
    }
    num_steps_ = 0;
    step(s.num_steps, s.num_tokens);
}

LrCheckpointPolicy lr_checkpoint_policy(const OptimizerConfig& config) {
    if (config.override_lr_scheduler && config.use_checkpoint_lr_scheduler)
        throw UsageError("--override-lr-scheduler and --use-checkpoint-lr-scheduler exclude each other");
    if (config.override_lr_scheduler) return LrCheckpointPolicy::override_flags;
    if (config.use_checkpoint_lr_scheduler) return LrCheckpointPolicy::use_checkpoint;
    return LrCheckpointPolicy::require_match;
}

LrScheduleParams lr_schedule_params_from_config(const OptimizerConfig& c, std::optional<std::int64_t> train_iters,
                                                std::optional<std::int64_t> train_samples,
                                                std::int64_t global_batch_size) {
    LrScheduleParams p;
    p.init_lr = c.lr_warmup_init;
    p.max_lr = c.lr;
    p.min_lr = c.min_lr;
    p.lr_decay_style = parse_lr_decay_style(c.lr_decay_style);
    p.lr_decay_tokens = c.lr_decay_tokens;
    if (train_iters && train_samples) throw UsageError("--train-iters and --train-samples exclude each other");
    if (train_iters) {
        if (c.lr_warmup_fraction && c.lr_warmup_iters != 0)
            throw UsageError("can only specify one of --lr-warmup-fraction and --lr-warmup-iters");
        if (c.lr_decay_samples || c.lr_warmup_samples != 0)
            throw UsageError("--lr-decay-samples and --lr-warmup-samples need --train-samples, not --train-iters");
        p.lr_decay_steps = c.lr_decay_iters.value_or(*train_iters) * global_batch_size;
        p.lr_warmup_steps = c.lr_warmup_fraction
                                ? *c.lr_warmup_fraction * static_cast<double>(p.lr_decay_steps)
                                : static_cast<double>(c.lr_warmup_iters * global_batch_size);
        p.wd_incr_steps = *train_iters * global_batch_size;
    } else if (train_samples) {
        if (c.lr_warmup_fraction && c.lr_warmup_samples != 0)
            throw UsageError("can only specify one of --lr-warmup-fraction and --lr-warmup-samples");
        if (c.lr_decay_iters || c.lr_warmup_iters != 0)
            throw UsageError("--lr-decay-iters and --lr-warmup-iters need --train-iters, not --train-samples");
        p.lr_decay_steps = c.lr_decay_samples.value_or(*train_samples);
        p.lr_warmup_steps = c.lr_warmup_fraction ? *c.lr_warmup_fraction * static_cast<double>(p.lr_decay_steps)
                                                 : static_cast<double>(c.lr_warmup_samples);
        p.wd_incr_steps = *train_samples;
    } else {
        throw UsageError("either --train-iters or --train-samples must be given");
    }
    p.start_wd = c.start_weight_decay.value_or(c.weight_decay);
    p.end_wd = c.end_weight_decay.value_or(c.weight_decay);
    p.wd_incr_style = parse_wd_incr_style(c.weight_decay_incr_style);
    return p;
}

}  // namespace mds::optim
