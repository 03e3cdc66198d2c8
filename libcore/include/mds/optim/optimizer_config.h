// OptimizerConfig: the optimizer, learning-rate, batch-size and fp16 loss-scale settings of a
// Megatron-DeepSpeed training, one field per Megatron flag (BigScience fork megatron/arguments.py;
// megatron-core names in brackets where they differ). Defaults are Megatron's. The schedule
// pieces are built from it: lr_schedule.h, batch_size_rampup.h, loss_scaler.h, grad_clip.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mds::optim {

// --rampup-batch-size <start> <increment> <ramp-up samples>.
struct RampupBatchSize {
    std::int64_t start_global_batch_size = 0;  // global batch size of the first iterations
    std::int64_t batch_size_increment = 0;     // added to the global batch size at each ramp step
    std::int64_t ramp_up_samples = 0;          // samples over which start grows to --global-batch-size
};

struct OptimizerConfig {
    // --- optimizer ---
    // Which optimizer: "adam" (AdamW-style decoupled weight decay, as Megatron's FusedAdam) or "sgd".
    // Default "adam". --optimizer.
    std::string optimizer = "adam";
    // Peak learning rate reached at the end of warmup. No default in Megatron (required). --lr.
    double lr = 0.0;
    // Floor of the decayed learning rate. Default 0.0. --min-lr.
    double min_lr = 0.0;
    // Learning rate at step 0 of the warmup (megatron-core only; BS Megatron always warms up from 0).
    // Default 0.0. --lr-warmup-init.
    double lr_warmup_init = 0.0;
    // Decoupled weight decay coefficient. Default 0.01. --weight-decay.
    double weight_decay = 0.01;
    // Weight decay at step 0 when it is ramped (megatron-core). Default: weight_decay. --start-weight-decay.
    std::optional<double> start_weight_decay;
    // Weight decay at the end of the ramp (megatron-core). Default: weight_decay. --end-weight-decay.
    std::optional<double> end_weight_decay;
    // How weight decay goes from start to end: "constant", "linear" or "cosine" (megatron-core).
    // Default "constant". --weight-decay-incr-style.
    std::string weight_decay_incr_style = "constant";
    // Gradient clipping on the global L2 norm; 0 disables. Default 1.0. --clip-grad.
    double clip_grad = 1.0;
    // Adam beta1. Default 0.9. --adam-beta1.
    double adam_beta1 = 0.9;
    // Adam beta2. Default 0.999. --adam-beta2.
    double adam_beta2 = 0.999;
    // Adam epsilon added to the denominator. Default 1e-8. --adam-eps.
    double adam_eps = 1e-8;
    // SGD momentum. Default 0.9. --sgd-momentum.
    double sgd_momentum = 0.9;
    // The step of a bf16 model in one pass per element (kernels/adam.h: the model's bf16 gradients into the
    // fp32 masters and moments, the masters back into the model) instead of fp32 gradient copies, torch's
    // fused AdamW and copies back. Default false. --adam-step-fusion (mds only).
    bool adam_step_fusion = false;

    // --- learning-rate schedule (lr_schedule.h) ---
    // Decay after warmup: "constant", "linear", "cosine" or "inverse-square-root" (megatron-core;
    // BS Megatron accepts the first three). Default "linear". --lr-decay-style.
    std::string lr_decay_style = "linear";
    // Iterations to decay over (iteration-based training); default: --train-iters. --lr-decay-iters.
    std::optional<std::int64_t> lr_decay_iters;
    // Samples to decay over (sample-based training); default: --train-samples. --lr-decay-samples.
    std::optional<std::int64_t> lr_decay_samples;
    // Tokens to decay over (BS Megatron only); when set, decay follows consumed tokens instead of
    // samples. Default unset. --lr-decay-tokens.
    std::optional<std::int64_t> lr_decay_tokens;
    // Warmup as a fraction of the decay length; excludes lr_warmup_iters/samples. Default unset.
    // --lr-warmup-fraction.
    std::optional<double> lr_warmup_fraction;
    // Warmup length in iterations (iteration-based training). Default 0. --lr-warmup-iters.
    std::int64_t lr_warmup_iters = 0;
    // Warmup length in samples (sample-based training). Default 0. --lr-warmup-samples.
    std::int64_t lr_warmup_samples = 0;
    // On resume, take the schedule values from the flags and ignore the checkpoint's. Default false.
    // --override-lr-scheduler [--override-opt_param-scheduler].
    bool override_lr_scheduler = false;
    // On resume, take the schedule values from the checkpoint and ignore the flags. Default false.
    // --use-checkpoint-lr-scheduler [--use-checkpoint-opt_param-scheduler].
    bool use_checkpoint_lr_scheduler = false;

    // --- batch size (batch_size_rampup.h) ---
    // Samples per data-parallel rank per forward/backward. Default 1 in mds (required in practice).
    // --micro-batch-size.
    std::int64_t micro_batch_size = 1;
    // Samples per optimizer step over all data-parallel ranks; default micro_batch_size × dp.
    // --global-batch-size.
    std::optional<std::int64_t> global_batch_size;
    // Batch-size ramp-up; unset means a constant global batch size. --rampup-batch-size.
    std::optional<RampupBatchSize> rampup_batch_size;

    // --- mixed precision and loss scaling (loss_scaler.h) ---
    // Train in fp16 with loss scaling. Default false. --fp16.
    bool fp16 = false;
    // Train in bf16 (no loss scaling). Default false. --bf16.
    bool bf16 = false;
    // Static loss scale; unset means dynamic scaling. Default unset. --loss-scale
    // (DeepSpeed config: fp16.loss_scale, where 0 means dynamic).
    std::optional<double> loss_scale;
    // Initial dynamic loss scale. Default 2^32. --initial-loss-scale
    // (DeepSpeed: 2^fp16.initial_scale_power, default power 16).
    double initial_loss_scale = 4294967296.0;
    // Lower bound of the dynamic loss scale. Default 1.0. --min-loss-scale (DeepSpeed: fp16.min_loss_scale).
    double min_loss_scale = 1.0;
    // Overflow-free iterations before the scale doubles. Default 1000. --loss-scale-window
    // (DeepSpeed: fp16.loss_scale_window).
    std::int64_t loss_scale_window = 1000;
    // Overflows tolerated before the scale is first lowered. Default 2. --hysteresis
    // (DeepSpeed: fp16.hysteresis).
    std::int64_t hysteresis = 2;
};

}  // namespace mds::optim
