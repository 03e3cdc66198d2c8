#include "mds/flags/train_args.h"

#include <algorithm>
#include <cmath>

#include "flag_rows.h"  // format_number, usage, positive
#include "mds/flags/flag_table.h"
#include "mds/util/error.h"
#include "mds/util/int_range.h"

namespace mds::flags {
namespace {

std::string flag_value(const std::string& flag, double v) { return flag + " " + format_number(v); }

// DeepSpeed's loss scaler replaces Megatron's under --deepspeed: the config's fp16 settings (or
// DeepSpeed's defaults) win; a loss-scale flag given with another value is reported as ignored.
void apply_fp16_scaler(const DeepSpeedConfig& ds, TrainArgs& args, std::vector<std::string>& warnings) {
    auto& o = args.optimizer;
    const auto given = [&](const std::string& flag) { return args.flags_given.count(flag) > 0; };
    const DeepSpeedFp16& f = *ds.fp16;
    const double scale = f.loss_scale.value_or(0.0);
    const std::optional<double> loss_scale = scale > 0 ? std::optional<double>(scale) : std::nullopt;
    const double initial = std::ldexp(1.0, static_cast<int>(f.initial_scale_power.value_or(16)));
    const auto ignored = [&](const std::string& flag, const std::string& flag_value, const std::string& key,
                             const std::string& key_value) {
        warnings.push_back(flag + " " + flag_value + " is ignored under --deepspeed: " + ds.source + " " + key +
                           " " + key_value + " sets the loss scaler");
    };
    if (given("--loss-scale") && o.loss_scale != loss_scale)
        ignored("--loss-scale", format_number(o.loss_scale.value_or(0.0)), "fp16.loss_scale",
                format_number(scale) + (loss_scale ? "" : " (dynamic)"));
    if (given("--initial-loss-scale") && o.initial_loss_scale != initial)
        ignored("--initial-loss-scale", format_number(o.initial_loss_scale), "fp16.initial_scale_power",
                std::to_string(f.initial_scale_power.value_or(16)));
    if (given("--loss-scale-window") && o.loss_scale_window != f.loss_scale_window.value_or(1000))
        ignored("--loss-scale-window", std::to_string(o.loss_scale_window), "fp16.loss_scale_window",
                std::to_string(f.loss_scale_window.value_or(1000)));
    if (given("--hysteresis") && o.hysteresis != f.hysteresis.value_or(2))
        ignored("--hysteresis", std::to_string(o.hysteresis), "fp16.hysteresis", std::to_string(f.hysteresis.value_or(2)));
    if (given("--min-loss-scale") && o.min_loss_scale != f.min_loss_scale.value_or(1.0))
        ignored("--min-loss-scale", format_number(o.min_loss_scale), "fp16.min_loss_scale",
                format_number(f.min_loss_scale.value_or(1.0)));
    o.loss_scale = loss_scale;
    o.initial_loss_scale = initial;
    o.loss_scale_window = f.loss_scale_window.value_or(1000);
    o.hysteresis = f.hysteresis.value_or(2);
    o.min_loss_scale = f.min_loss_scale.value_or(1.0);
}

}  // namespace

// The table (flag_rows.cpp) holds every flag: its names, help, group and where TrainArgs keeps it.
void add_train_flags(CLI::App& app, TrainArgs& args) { add_table_flags(app, args, kToolTrain); }

std::vector<std::string> apply_deepspeed_config(const DeepSpeedConfig& ds, TrainArgs& args) {
    std::vector<std::string> warnings;
    auto& o = args.optimizer;
    const auto given = [&](const std::string& flag) { return args.flags_given.count(flag) > 0; };
    const auto conflict = [&](const std::string& flag, const std::string& flag_value, const std::string& key,
                              const std::string& key_value) {
        usage(flag + " " + flag_value + " conflicts with " + ds.source + " " + key + " " + key_value);
    };
    if (ds.train_micro_batch_size_per_gpu) {
        if (given("--micro-batch-size") && o.micro_batch_size != *ds.train_micro_batch_size_per_gpu)
            conflict("--micro-batch-size", std::to_string(o.micro_batch_size), "train_micro_batch_size_per_gpu",
                     std::to_string(*ds.train_micro_batch_size_per_gpu));
        o.micro_batch_size = *ds.train_micro_batch_size_per_gpu;
    }
    if (ds.train_batch_size) {
        if (o.global_batch_size && *o.global_batch_size != *ds.train_batch_size)
            conflict("--global-batch-size", std::to_string(*o.global_batch_size), "train_batch_size",
                     std::to_string(*ds.train_batch_size));
        o.global_batch_size = *ds.train_batch_size;
    }
    if (ds.gradient_clipping) {
        if (given("--clip-grad") && o.clip_grad != *ds.gradient_clipping)
            conflict("--clip-grad", format_number(o.clip_grad), "gradient_clipping", format_number(*ds.gradient_clipping));
        o.clip_grad = *ds.gradient_clipping;
    }
    if (ds.zero_stage) {
        if (given("--zero-stage") && args.parallel.zero_stage != *ds.zero_stage)
            conflict("--zero-stage", std::to_string(args.parallel.zero_stage), "zero_optimization.stage",
                     std::to_string(*ds.zero_stage));
        args.parallel.zero_stage = *ds.zero_stage;
    }
    if (ds.overlap_comm) {
        if (given("--no-overlap-grad-reduce") && *ds.overlap_comm)
            conflict("--no-overlap-grad-reduce", "given", "zero_optimization.overlap_comm", "true");
        args.parallel.overlap_grad_reduce = *ds.overlap_comm;
    }
    args.parallel.reduce_bucket_elements = ds.reduce_bucket_size;
    // ZeRO-Offload's optimizer offload is how a Megatron-DeepSpeed run puts its optimizer on the host
    // (BMD's --cpu-optimizer raises NotImplementedError): the same host step as --cpu-optimizer.
    args.parallel.offload_optimizer = ds.offload_optimizer_device.value_or("none") == "cpu";
    // Precision must be chosen the same way on both sides: the model's dtype follows the flags,
    // the engine's follows the config.
    const bool ds_fp16 = ds.fp16 && ds.fp16->enabled;
    const bool ds_bf16 = ds.bf16_enabled.value_or(false);
    if (ds_fp16 != o.fp16)
        usage(std::string(o.fp16 ? "--fp16 is given" : "--fp16 is not given") + " but " + ds.source +
              " fp16.enabled is " + (ds_fp16 ? "true" : "false/absent"));
    if (ds_bf16 != o.bf16)
        usage(std::string(o.bf16 ? "--bf16 is given" : "--bf16 is not given") + " but " + ds.source +
              " bf16.enabled is " + (ds_bf16 ? "true" : "false/absent"));
    if (ds_fp16) apply_fp16_scaler(ds, args, warnings);
    if (ds.curriculum_learning && ds.curriculum_learning->enabled) args.curriculum = ds.curriculum_learning;
    args.steps_per_print = ds.steps_per_print;
    args.wall_clock_breakdown = ds.wall_clock_breakdown;
    if (!ds.unknown_keys.empty()) {
        std::string keys;
        for (const auto& k : ds.unknown_keys) keys += (keys.empty() ? "" : ", ") + k;
        warnings.push_back(ds.source + ": keys mds-train does not read: " + keys);
    }
    // Sizes that overflow or are not positive are left to validate(), which names the flag.
    std::int64_t mp = 0, expect = 0;
    if (ds.gradient_accumulation_steps && args.parallel.world_size && o.global_batch_size &&
        args.parallel.tensor_model_parallel_size > 0 && args.parallel.pipeline_model_parallel_size > 0 &&
        !__builtin_mul_overflow(args.parallel.tensor_model_parallel_size, args.parallel.pipeline_model_parallel_size, &mp)) {
        const std::int64_t dp = *args.parallel.world_size / mp;
        const bool fits = !__builtin_mul_overflow(o.micro_batch_size, *ds.gradient_accumulation_steps, &expect) &&
                          !__builtin_mul_overflow(expect, dp, &expect);
        if (!o.rampup_batch_size && (!fits || expect != *o.global_batch_size))
            usage(ds.source + " gradient_accumulation_steps " + std::to_string(*ds.gradient_accumulation_steps) +
                  " gives a global batch of " + (fits ? std::to_string(expect) : std::string("more than 2^63")) +
                  " (micro batch × steps × data parallel " +
                  std::to_string(dp) + "), not --global-batch-size " + std::to_string(*o.global_batch_size));
    }
    return warnings;
}

namespace {

bool given(const TrainArgs& args, const std::string& flag) { return args.flags_given.count(flag) > 0; }

void check_required(const TrainArgs& args) {
    for (const char* flag : {"--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length",
                             "--max-position-embeddings", "--lr"})
        if (!given(args, flag)) usage(std::string(flag) + " is required");
    const auto& m = args.model;
    const auto& p = args.parallel;
    positive("--num-layers", m.num_layers);
    positive("--hidden-size", m.hidden_size);
    positive("--num-attention-heads", m.num_attention_heads);
    positive("--seq-length", m.seq_length);
    positive("--micro-batch-size", args.optimizer.micro_batch_size);
    positive("--tensor-model-parallel-size", p.tensor_model_parallel_size);
    positive("--pipeline-model-parallel-size", p.pipeline_model_parallel_size);
    // At most 1e9 minutes (~1,900 years): the milliseconds must fit an int64.
    if (!(p.distributed_timeout_minutes > 0 && p.distributed_timeout_minutes <= 1e9))
        usage("--distributed-timeout-minutes must be positive (and at most 1e9)");
    positive("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by);
}

void check_model_shape(TrainArgs& args) {
    auto& m = args.model;
    if (m.kv_channels) {
        positive("--kv-channels", *m.kv_channels);
    } else if (m.hidden_size % m.num_attention_heads != 0) {  // Megatron asks it only to derive --kv-channels
        usage("--hidden-size " + std::to_string(m.hidden_size) + " is not divisible by --num-attention-heads " +
              std::to_string(m.num_attention_heads));
    }
    if (!m.ffn_hidden_size) m.ffn_hidden_size = 4 * m.hidden_size;
    if (m.glu_activation && *m.glu_activation != "geglu" && *m.glu_activation != "liglu" && *m.glu_activation != "reglu" &&
        *m.glu_activation != "swiglu")
        usage("--glu-activation " + *m.glu_activation + ": expected one of geglu, liglu, reglu, swiglu");
    if (m.glu_activation && m.bias_gelu_fusion)  // BMD's parse_args raises the same
        usage("--glu-activation " + *m.glu_activation + " needs --no-bias-gelu-fusion (Megatron-DeepSpeed refuses the fused "
              "bias GeLU with a GLU)");
    positive("--ffn-hidden-size", *m.ffn_hidden_size);
    if (*m.max_position_embeddings < m.seq_length)
        usage("--max-position-embeddings " + std::to_string(*m.max_position_embeddings) + " is smaller than --seq-length " +
              std::to_string(m.seq_length));
    const auto tp = args.parallel.tensor_model_parallel_size;
    if (m.pad_vocab_size_to && *m.pad_vocab_size_to % tp != 0)
        usage("--pad-vocab-size-to " + std::to_string(*m.pad_vocab_size_to) +
              " is not divisible by --tensor-model-parallel-size " + std::to_string(tp));
}

// Training length and schedule units: iterations or samples, never both.
void check_length_and_schedule(const TrainArgs& args) {
    const auto& o = args.optimizer;
    const auto& len = args.length;
    if (len.train_iters.has_value() == len.train_samples.has_value())
        usage(len.train_iters ? "--train-iters and --train-samples exclude each other"
                              : "one of --train-iters and --train-samples is required");
    if (len.train_iters) {
        positive("--train-iters", *len.train_iters);
        if (o.lr_decay_samples) usage("--lr-decay-samples needs --train-samples; with --train-iters use --lr-decay-iters");
        if (o.lr_warmup_samples != 0)
            usage("--lr-warmup-samples needs --train-samples; with --train-iters use --lr-warmup-iters");
        if (o.rampup_batch_size) usage("--rampup-batch-size needs --train-samples (Megatron has no ramp-up for --train-iters)");
    } else {
        positive("--train-samples", *len.train_samples);
        if (o.lr_decay_iters) usage("--lr-decay-iters needs --train-iters; with --train-samples use --lr-decay-samples");
        if (o.lr_warmup_iters != 0)
            usage("--lr-warmup-iters needs --train-iters; with --train-samples use --lr-warmup-samples");
    }
    if (o.lr_warmup_fraction && (o.lr_warmup_iters != 0 || o.lr_warmup_samples != 0))
        usage("--lr-warmup-fraction excludes --lr-warmup-iters and --lr-warmup-samples");
    if (o.min_lr > o.lr)
        usage(flag_value("--min-lr", o.min_lr) + " is larger than " + flag_value("--lr", o.lr));
}

void check_precision(const TrainArgs& args) {
    const auto& o = args.optimizer;
    if (o.fp16 && o.bf16) usage("--fp16 and --bf16 exclude each other");
    if (args.model.fp16_lm_cross_entropy && !o.fp16)  // BMD's parse_args asserts the same
        usage("--fp16-lm-cross-entropy needs --fp16 (Megatron-DeepSpeed: lm cross entropy in fp16 only in fp16 mode)");
    if (args.model.fp32_residual_connection && !o.fp16 && !o.bf16)  // BMD's parse_args asserts the same
        usage("--fp32-residual-connection needs --fp16 or --bf16");
    if (o.loss_scale && *o.loss_scale <= 0) usage(flag_value("--loss-scale", *o.loss_scale) + " must be positive");
}

// Parallel layout and batch sizes; fills the data-parallel size and the default global batch.
void check_parallel_and_batch(TrainArgs& args) {
    auto& p = args.parallel;
    auto& o = args.optimizer;
    if (p.world_size) {
        // A product past int64 is past any world size too: the same message.
        std::int64_t mp = 0;
        if (__builtin_mul_overflow(p.tensor_model_parallel_size, p.pipeline_model_parallel_size, &mp) ||
            *p.world_size % mp != 0)
            usage("world size " + std::to_string(*p.world_size) + " is not divisible by --tensor-model-parallel-size " +
                  std::to_string(p.tensor_model_parallel_size) + " × --pipeline-model-parallel-size " +
                  std::to_string(p.pipeline_model_parallel_size));
        p.data_parallel_size = *p.world_size / mp;
    }
    std::int64_t per_step = 0;  // samples of one micro batch on every data-parallel rank
    if (__builtin_mul_overflow(o.micro_batch_size, p.data_parallel_size, &per_step))
        usage("--micro-batch-size " + std::to_string(o.micro_batch_size) + " × data-parallel size " +
              std::to_string(p.data_parallel_size) + " is past 2^63");
    if (!o.global_batch_size) o.global_batch_size = per_step;
    // Megatron's calculator asserts, with working alternatives; the batch sizes a ramp-up will have in
    // force are checked by the trainer once it knows the consumed samples it resumes from.
    (void)make_num_micro_batches_calculator(args);
}

void check_deepspeed(const TrainArgs& args) {
    const auto& p = args.parallel;
    if (!p.deepspeed_config.empty() && !p.deepspeed) usage("--deepspeed_config needs --deepspeed");
    if (p.deepspeed && p.deepspeed_config.empty()) usage("--deepspeed needs --deepspeed_config");
    if (p.zero_stage != 0 && p.zero_stage != 1)
        usage("ZeRO stage " + std::to_string(p.zero_stage) + " (--zero-stage / zero_optimization.stage) is not "
              "supported by mds-train: use 0 or 1");
    if (args.curriculum && args.curriculum->max_difficulty > args.model.seq_length)
        usage("curriculum_learning.max_difficulty " + std::to_string(args.curriculum->max_difficulty) +
              " is larger than --seq-length " + std::to_string(args.model.seq_length));
}

// Data loading: Mode 1 (--data-path, --split) or Mode 2 (--(train|valid|test)-weighted-split-paths),
// never both (Megatron-DeepSpeed's parse_args asserts). The files are read when training starts.
void check_data_mode(const TrainArgs& args) {
    const auto& dt = args.data;
    bool mode2 = false;
    for (int k = 0; k < 3; ++k) {
        std::string flag = k == 0 ? "--train" : k == 1 ? "--valid" : "--test";
        flag += "-weighted-split-paths";
        if (given(args, flag) && given(args, flag + "-path")) usage(flag + " and " + flag + "-path exclude each other: give one");
        const auto kk = static_cast<std::size_t>(k);
        mode2 = mode2 || !dt.weighted_split_paths[kk].empty() || !dt.weighted_split_paths_path[kk].empty();
    }
    const bool mode1 = given(args, "--data-path") || given(args, "--split");
    if (mode2 && mode1)
        usage(std::string(given(args, "--data-path") ? "--data-path" : "--split") +
              ": data loading Mode 1 (--data-path and --split) and Mode 2 (--(train|valid|test)-weighted-split-paths) "
              "are mutually exclusive");
    if (mode2 && dt.weighted_split_paths[0].empty() && dt.weighted_split_paths_path[0].empty())
        usage("--valid-weighted-split-paths and --test-weighted-split-paths (and their -path forms) need "
              "--train-weighted-split-paths or --train-weighted-split-paths-path (Megatron-DeepSpeed: \"No "
              "dataloading argument passed\")");
    if (given(args, "--train-weighted-split-paths") && dt.weighted_split_paths[0].size() != 1)
        usage("--train-weighted-split-paths: only 1 dataset group is allowed, got " +
              std::to_string(dt.weighted_split_paths[0].size()));
}

// One "START-END" of --skip-train-iteration-range: two integers, END >= START (BMD's parse_args).
std::array<std::int64_t, 2> skip_range(const std::string& text) {
    const IntRangeParse p = parse_int_range(text);
    if (!p.problem.empty())
        usage("--skip-train-iteration-range " + text + ": " + p.problem + " (expected START-END, e.g. 1001-1200)");
    return {p.range.first, p.range.last};
}

// --skip-train-iteration-range as BMD's parse_args leaves it: sorted, overlapping ranges merged
// (1-5 2-6 -> 1-6; 5-5 6-6 stay two). --dataloader-type and --vocab-extra-ids values.
void check_data_flags(TrainArgs& args) {
    auto& d = args.data;
    std::vector<std::array<std::int64_t, 2>> ranges;
    for (const auto& text : d.skip_train_iteration_range) ranges.push_back(skip_range(text));
    std::sort(ranges.begin(), ranges.end());
    d.skip_ranges.clear();
    for (const auto& r : ranges) {
        if (!d.skip_ranges.empty() && d.skip_ranges.back()[1] >= r[0]) d.skip_ranges.back()[1] = std::max(d.skip_ranges.back()[1], r[1]);
        else d.skip_ranges.push_back(r);
    }
    if (d.dataloader_type != "single" && d.dataloader_type != "cyclic")
        usage("--dataloader-type " + d.dataloader_type + ": expected single or cyclic");
    if (d.vocab_extra_ids < 0) usage("--vocab-extra-ids must not be negative, got " + std::to_string(d.vocab_extra_ids));
}

void check_checkpoints_and_logging(const TrainArgs& args) {
    if (!args.checkpoint.save.empty() && !args.checkpoint.save_interval) usage("--save needs --save-interval");
    // --save-interval's N >= 1 is checked by its parser (parse_save_schedule).
    if (args.exit.exit_iteration) positive("--exit-iteration", *args.exit.exit_iteration);
    if (args.exit.exit_samples) positive("--exit-samples", *args.exit.exit_samples);
    positive("--log-interval", args.logging.log_interval);
    positive("--eval-interval", args.logging.eval_interval);
    if (args.logging.eval_iters < 0) usage("--eval-iters must not be negative");
}

// Values the parser takes that mds cannot train with: refused here, before any rendezvous or file,
// rather than when the model or the optimizer is built.
void check_implemented(const TrainArgs& args) {
    if (args.optimizer.optimizer != "adam")
        usage("--optimizer " + args.optimizer.optimizer + ": mds-train implements adam only");
    const std::string& pos = args.model.position_embedding_type;
    if (pos != "absolute" && pos != "alibi")
        usage("--position-embedding-type " + pos + " is not supported (absolute or alibi)");
}

// The checks BMD's parse_args makes of flags mds accepts without effect: a script BMD stops, mds stops too.
void check_accepted(const TrainArgs& args) {
    if (given(args, "--distribute-checkpointed-activations") && !args.model.checkpoint_activations)
        usage("--distribute-checkpointed-activations needs --checkpoint-activations (Megatron-DeepSpeed asserts it)");
    if (const auto it = args.unread_values.find("--decoder-seq-length"); it != args.unread_values.end() && !it->second.empty()) {
        const std::int64_t decoder = std::stoll(it->second.back());
        if (args.model.max_position_embeddings && *args.model.max_position_embeddings < decoder)
            usage("--max-position-embeddings " + std::to_string(*args.model.max_position_embeddings) +
                  " is smaller than --decoder-seq-length " + std::to_string(decoder) + " (Megatron-DeepSpeed asserts it)");
    }
}

}  // namespace

void validate(TrainArgs& args) {
    check_required(args);
    check_model_shape(args);
    check_length_and_schedule(args);
    check_precision(args);
    check_parallel_and_batch(args);
    check_deepspeed(args);
    check_data_mode(args);
    check_data_flags(args);
    check_checkpoints_and_logging(args);
    check_implemented(args);
    check_accepted(args);
}

std::vector<std::string> resolve_train_args(TrainArgs& args) {
    std::vector<std::string> warnings;
    if (args.parallel.deepspeed && !args.parallel.deepspeed_config.empty())
        warnings = apply_deepspeed_config(read_deepspeed_config(args.parallel.deepspeed_config), args);
    validate(args);
    return warnings;
}

optim::NumMicroBatchesCalculator make_num_micro_batches_calculator(const TrainArgs& args) {
    const auto& o = args.optimizer;
    return optim::NumMicroBatchesCalculator(args.global_batch_size(), o.micro_batch_size, args.parallel.data_parallel_size,
                                            o.rampup_batch_size);
}

}  // namespace mds::flags
