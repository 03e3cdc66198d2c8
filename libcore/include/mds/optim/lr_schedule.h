// LrSchedule: Megatron's learning-rate schedule (BS Megatron-DeepSpeed megatron/learning_rates.py
// AnnealingLR; megatron-core optimizer_param_scheduler.py OptimizerParamScheduler) with
// megatron-core's weight-decay increment, and save/load of its state for bit-exact resumes.
//
// Units: Megatron counts schedule "steps" in samples. Each successful optimizer step calls
// step(num_micro_batches × micro_batch_size × dp), i.e. the current global batch size; an
// iteration skipped for an fp16 overflow does not step. Iteration-based flags are converted to
// samples with the final --global-batch-size (lr_schedule_params_from_config), also during a
// batch-size ramp-up, as Megatron does.
//
// lr(n), n = samples stepped so far, W = warmup, D = decay length, init = --lr-warmup-init (0 in BS):
//   W > 0 and n <= W          init + (max - init) · n / W
//   style constant            max
//   n > D                     min
//   inverse-square-root       max(min, max · W'^0.5 / n'^0.5), W' = max(W, 1), n' = max(n, 1)
//   r = (n - W) / (D - W)     linear: min + (1 - r)(max - min); cosine: min + ½(cos πr + 1)(max - min)
// With --lr-decay-tokens (BS only) r and the "> D" test use tokens instead: r = (t - t_W) / (T - t_W)
// where t is the token count passed to step() and t_W the token count captured when n == W exactly
// (0 when n never equals W, a BS quirk kept for compatibility). BS passes the tokens consumed
// *before* the current iteration (args.consumed_train_tokens is updated after train_step).
//
// The evaluation order of every expression follows the Python so that results are bit-identical
// (Python floats are doubles; `x**0.5` is pow, not sqrt).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "mds/optim/optimizer_config.h"

namespace mds::optim {

enum class LrDecayStyle { constant, linear, cosine, inverse_square_root };
enum class WdIncrStyle { constant, linear, cosine };

// Megatron's names: "constant", "linear", "cosine", "inverse-square-root" (also BS's "inverse_sqrt").
LrDecayStyle parse_lr_decay_style(std::string_view name);
std::string to_string(LrDecayStyle style);
WdIncrStyle parse_wd_incr_style(std::string_view name);
std::string to_string(WdIncrStyle style);

struct LrScheduleParams {
    double init_lr = 0.0;  // megatron-core init_lr (--lr-warmup-init); 0 reproduces BS AnnealingLR
    double max_lr = 0.0;
    double min_lr = 0.0;
    double lr_warmup_steps = 0.0;  // samples; a double because --lr-warmup-fraction makes it one
    std::int64_t lr_decay_steps = 1;
    LrDecayStyle lr_decay_style = LrDecayStyle::linear;
    std::optional<std::int64_t> lr_decay_tokens;  // BS --lr-decay-tokens
    double start_wd = 0.0;
    double end_wd = 0.0;
    std::int64_t wd_incr_steps = 0;
    WdIncrStyle wd_incr_style = WdIncrStyle::constant;
};

// What a checkpoint holds (the union of BS's and megatron-core's state_dict keys).
struct LrScheduleState {
    LrScheduleParams params;
    std::int64_t num_steps = 0;
    std::int64_t num_tokens = 0;
    std::int64_t warmup_tokens = 0;
    // Whether the checkpoint has megatron-core's weight-decay schedule keys (start_wd, end_wd,
    // wd_incr_steps, wd_incr_style). BigScience's AnnealingLR has none: its weight decay is
    // --weight-decay, constant, and a resume takes the flags' values.
    bool has_wd_schedule = true;
};

// How a resume treats schedule values that differ between the flags and the checkpoint.
enum class LrCheckpointPolicy {
    require_match,   // neither flag: every value must match, else mds::Error (Megatron asserts)
    use_checkpoint,  // --use-checkpoint-lr-scheduler: the checkpoint's values win
    override_flags,  // --override-lr-scheduler: the flags' values win
};

class LrSchedule {
public:
    // Throws mds::UsageError for Megatron's constructor assertions (min_lr >= 0, max_lr >= min_lr,
    // init_lr <= max_lr, decay > 0, warmup < decay, 0 <= start_wd <= end_wd, constant wd with
    // start != end). Sets the lr for step 0, as the Python constructors do.
    explicit LrSchedule(const LrScheduleParams& params);

    // Advance by `increment` samples; `consumed_tokens` is only read with lr_decay_tokens.
    void step(std::int64_t increment, std::int64_t consumed_tokens = 0);

    double lr() const { return lr_; }
    // megatron-core get_wd() (before the per-group wd_mult).
    double weight_decay() const { return wd_; }
    std::int64_t num_steps() const { return num_steps_; }
    const LrScheduleParams& params() const { return p_; }

    LrScheduleState state() const;
    // Restores a checkpoint's state into a freshly constructed schedule. The step and token
    // counters always come from the checkpoint; the configuration values follow `policy`.
    // require_match throws mds::Error naming the first differing value and both flags.
    void load_state(const LrScheduleState& state, LrCheckpointPolicy policy);

private:
    void recompute();
    double compute_lr();
    double compute_wd() const;

    LrScheduleParams p_;
    std::int64_t num_steps_ = 0;
    std::int64_t num_tokens_ = 0;
    std::int64_t warmup_tokens_ = 0;
    double lr_ = 0.0;
    double wd_ = 0.0;
};

// Megatron's get_learning_rate_scheduler(): lengths in samples from the flags. Exactly one of
// train_iters / train_samples is set. Iteration-based: decay = (lr_decay_iters or train_iters) × gbs,
// warmup = fraction × decay or lr_warmup_iters × gbs. Sample-based: decay = lr_decay_samples or
// train_samples, warmup = fraction × decay or lr_warmup_samples. Weight decay ramps over the whole
// run (megatron-core: train_iters × gbs or train_samples). Throws mds::UsageError for Megatron's
// argument checks (fraction together with warmup iters/samples, neither length given).
LrScheduleParams lr_schedule_params_from_config(const OptimizerConfig& config, std::optional<std::int64_t> train_iters,
                                                std::optional<std::int64_t> train_samples,
                                                std::int64_t global_batch_size);

// The policy the two resume flags select (both set is a usage error, as in Megatron).
LrCheckpointPolicy lr_checkpoint_policy(const OptimizerConfig& config);

}  // namespace mds::optim
