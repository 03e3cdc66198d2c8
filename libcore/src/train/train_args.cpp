#include "mds/train/train_args.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "mds/util/error.h"

namespace mds::train {
namespace {

// Python's int()/float() accept "5_000_000": one underscore between digits. Strips them, or
// returns nullopt when an underscore is misplaced.
std::optional<std::string> strip_underscores(const std::string& text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        char c = text[i];
        if (c != '_') {
            out += c;
            continue;
        }
        bool digit_before = i > 0 && std::isdigit(static_cast<unsigned char>(text[i - 1]));
        bool digit_after = i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1]));
        if (!digit_before || !digit_after) return std::nullopt;
    }
    return out;
}

std::int64_t parse_int(const std::string& flag, const std::string& text) {
    auto clean = strip_underscores(text);
    if (clean && !clean->empty()) {
        char* end = nullptr;
        errno = 0;
        long long v = std::strtoll(clean->c_str(), &end, 10);
        if (errno == 0 && *end == '\0') return static_cast<std::int64_t>(v);
    }
    throw CLI::ValidationError(flag, "expected an integer, found '" + text + "'");
}

double parse_float(const std::string& flag, const std::string& text) {
    auto clean = strip_underscores(text);
    if (clean && !clean->empty()) {
        char* end = nullptr;
        double v = std::strtod(clean->c_str(), &end);
        if (*end == '\0' && std::isfinite(v)) return v;
    }
    throw CLI::ValidationError(flag, "expected a number, found '" + text + "'");
}

std::string format_number(double v) {
    std::ostringstream out;
    out << v;
    return out.str();
}

// Declares options in one help group, recording in args.flags_given the flags that were given.
class Declarer {
public:
    Declarer(CLI::App& app, std::set<std::string>& given) : app_(app), given_(given) {}
    void group(std::string name) { group_ = std::move(name); }

    void integer(const std::string& names, std::int64_t& dst, const std::string& help) {
        std::string flag = first(names);
        add(names, [&dst, flag](const std::string& s) { dst = parse_int(flag, s); },
            help + " [default: " + std::to_string(dst) + "]");
    }
    void integer(const std::string& names, std::optional<std::int64_t>& dst, const std::string& help) {
        std::string flag = first(names);
        add(names, [&dst, flag](const std::string& s) { dst = parse_int(flag, s); }, help);
    }
    void number(const std::string& names, double& dst, const std::string& help) {
        std::string flag = first(names);
        add(names, [&dst, flag](const std::string& s) { dst = parse_float(flag, s); },
            help + " [default: " + format_number(dst) + "]");
    }
    void number(const std::string& names, std::optional<double>& dst, const std::string& help) {
        std::string flag = first(names);
        add(names, [&dst, flag](const std::string& s) { dst = parse_float(flag, s); }, help);
    }
    CLI::Option* text(const std::string& names, std::string& dst, const std::string& help) {
        return add(names, [&dst](const std::string& s) { dst = s; }, help);
    }
    CLI::Option* text(const std::string& names, std::optional<std::string>& dst, const std::string& help) {
        return add(names, [&dst](const std::string& s) { dst = s; }, help);
    }
    // A store_true flag (or store_false with value = false).
    void flag(const std::string& names, bool& dst, const std::string& help, bool value = true) {
        std::string name = first(names);
        auto& given = given_;
        app_.add_flag_function(names, [&dst, &given, name, value](std::int64_t) {
                dst = value;
                given.insert(name);
            }, help)->group(group_);
    }
    CLI::Option* list(const std::string& names, std::vector<std::string>& dst, const std::string& help) {
        std::string name = first(names);
        auto& given = given_;
        return app_.add_option_function<std::vector<std::string>>(names, [&dst, &given, name](const std::vector<std::string>& v) {
                dst = v;
                given.insert(name);
            }, help)->group(group_)->expected(1, -1);
    }
    // A Megatron flag mds does not implement: giving it fails the parse with `why`.
    void unsupported(const std::string& name, bool takes_value, const std::string& why) {
        std::string message = "not supported by mds-train: " + why;
        auto fail = [name, message]() { throw CLI::ValidationError(name, message); };
        if (takes_value)
            app_.add_option_function<std::vector<std::string>>(name, [fail](const std::vector<std::string>&) { fail(); },
                                                                "Megatron flag not supported by mds-train")
                ->expected(1, -1)->group("Megatron flags not supported");
        else
            app_.add_flag_function(name, [fail](std::int64_t) { fail(); }, "Megatron flag not supported by mds-train")
                ->group("Megatron flags not supported");
    }

private:
    static std::string first(const std::string& names) { return names.substr(0, names.find(',')); }

    CLI::Option* add(const std::string& names, std::function<void(const std::string&)> set, const std::string& help) {
        std::string name = first(names);
        auto& given = given_;
        // argparse keeps the last of repeated flags (tr1-13B passes --clip-grad twice).
        return app_.add_option_function<std::string>(names, [set, &given, name](const std::string& s) {
                set(s);
                given.insert(name);
            }, help)->group(group_)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }

    CLI::App& app_;
    std::set<std::string>& given_;
    std::string group_;
};

[[noreturn]] void usage(const std::string& what) { throw UsageError(what); }

std::string flag_value(const std::string& flag, double v) { return flag + " " + format_number(v); }

}  // namespace

void add_train_flags(CLI::App& app, TrainArgs& args) {
    Declarer d(app, args.flags_given);
    auto& m = args.model;
    auto& o = args.optimizer;

    d.group("Model");
    d.integer("--num-layers", m.num_layers, "Number of transformer layers (required)");
    d.integer("--hidden-size", m.hidden_size, "Transformer hidden size (required)");
    d.integer("--ffn-hidden-size", m.ffn_hidden_size, "Hidden size of the MLP [default: 4 × --hidden-size]");
    d.integer("--num-attention-heads", m.num_attention_heads, "Number of attention heads (required)");
    d.integer("--seq-length", m.seq_length, "Tokens per training sample (required)");
    d.integer("--max-position-embeddings", m.max_position_embeddings,
              "Largest sequence length the position embeddings cover (required; >= --seq-length)");
    d.integer("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by,
              "Pad the vocabulary to a multiple of this times --tensor-model-parallel-size");
    d.integer("--pad-vocab-size-to", m.pad_vocab_size_to,
              "Pad the vocabulary to exactly this size (overrides --make-vocab-size-divisible-by)");
    d.number("--init-method-std", m.init_method_std, "Standard deviation of the normal weight initialization");
    d.text("--position-embedding-type", m.position_embedding_type, "Position embeddings: absolute, rotary or alibi")
        ->check(CLI::IsMember({"absolute", "rotary", "alibi"}));
    d.flag("--embed-layernorm", m.embed_layernorm, "Layer norm right after the word embeddings (BLOOM)");
    d.number("--layernorm-epsilon", m.layernorm_epsilon, "Layer norm epsilon");
    d.number("--attention-dropout", m.attention_dropout, "Dropout on the attention probabilities");
    d.number("--hidden-dropout", m.hidden_dropout, "Dropout at the end of each attention and MLP block");
    d.flag("--sync-tp-duplicated-parameters", m.sync_tp_duplicated_parameters,
           "Average the parameters every tensor-parallel rank holds a copy of (layer norms, biases)");
    d.flag("--checkpoint-activations", m.checkpoint_activations, "Recompute layer activations in the backward pass");
    d.integer("--checkpoint-num-layers", m.checkpoint_num_layers, "Layers per activation checkpoint");
    d.flag("--deepspeed-activation-checkpointing", m.deepspeed_activation_checkpointing,
           "Activation checkpointing through DeepSpeed's implementation (same result in mds)");
    d.flag("--abort-on-unmet-fused-kernel-constraints", m.abort_on_unmet_fused_kernel_constraints,
           "Fail instead of falling back when a fused kernel cannot be used");

    d.group("Data");
    d.list("--data-path", args.data.data_path, "Dataset prefix, or weight prefix pairs for blending");
    d.text("--split", args.data.split, "Train,valid,test proportions of --data-path, e.g. 949,50,1");
    d.list("--train-weighted-split-paths", args.data.weighted_split_paths[0],
           "The training dataset group \"NAME: W1 START:END P1, W2 START:END P2, ...\" (instead of --data-path)");
    d.list("--valid-weighted-split-paths", args.data.weighted_split_paths[1],
           "Validation dataset groups, each evaluated on its own under its NAME");
    d.list("--test-weighted-split-paths", args.data.weighted_split_paths[2],
           "Test dataset groups, each evaluated on its own under its NAME at the end of training");
    d.text("--train-weighted-split-paths-path", args.data.weighted_split_paths_path[0],
           "File with --train-weighted-split-paths' group on one line, double-quoted");
    d.text("--valid-weighted-split-paths-path", args.data.weighted_split_paths_path[1],
           "File with --valid-weighted-split-paths' groups on one line, each double-quoted");
    d.text("--test-weighted-split-paths-path", args.data.weighted_split_paths_path[2],
           "File with --test-weighted-split-paths' groups on one line, each double-quoted");
    d.text("--vocab-file", args.data.vocab_file, "GPT-2 vocab.json");
    d.text("--merge-file", args.data.merge_file, "GPT-2 merges.txt");
    d.text("--tokenizer-type", args.data.tokenizer_type, "GPT2BPETokenizer or PretrainedFromHF")
        ->check(CLI::IsMember({"GPT2BPETokenizer", "PretrainedFromHF"}));
    d.text("--tokenizer-name-or-path", args.data.tokenizer_name_or_path,
           "Hugging Face tokenizer for PretrainedFromHF: a tokenizer.json, a folder holding one, or a Hub name (ORG/NAME) "
           "in the local Hugging Face cache");
    d.text("--data-impl", args.data.data_impl, "Indexed dataset implementation: mmap or infer [default: infer]")
        ->check(CLI::IsMember({"mmap", "infer"}));
    d.integer("--num-workers", args.data.num_workers, "Data loader workers for training");
    d.integer("--valid-num-workers", args.data.valid_num_workers, "Data loader workers for validation");

    d.group("Batch size and length");
    d.integer("--micro-batch-size", o.micro_batch_size, "Samples per data-parallel rank per forward/backward");
    d.integer("--global-batch-size", o.global_batch_size,
              "Samples per optimizer step over all ranks [default: micro batch × data parallel]");
    {
        auto& given = args.flags_given;
        app.add_option_function<std::vector<std::string>>("--rampup-batch-size",
               [&o, &given](const std::vector<std::string>& v) {
                   optim::RampupBatchSize r;
                   r.start_global_batch_size = parse_int("--rampup-batch-size", v.at(0));
                   r.batch_size_increment = parse_int("--rampup-batch-size", v.at(1));
                   r.ramp_up_samples = parse_int("--rampup-batch-size", v.at(2));
                   o.rampup_batch_size = r;
                   given.insert("--rampup-batch-size");
               },
               "START INCREMENT SAMPLES: grow the global batch size from START by INCREMENT over SAMPLES samples")
            ->expected(3)->group("Batch size and length");
    }
    d.integer("--train-iters", args.length.train_iters, "Iterations to train (excludes --train-samples)");
    d.integer("--train-samples", args.length.train_samples, "Samples to train (excludes --train-iters)");

    d.group("Optimizer and learning rate");
    d.text("--optimizer", o.optimizer, "adam or sgd [default: adam]")->check(CLI::IsMember({"adam", "sgd"}));
    d.number("--lr", o.lr, "Peak learning rate (required)");
    d.number("--min-lr", o.min_lr, "Floor of the decayed learning rate");
    d.text("--lr-decay-style", o.lr_decay_style, "constant, linear or cosine [default: linear]")
        ->check(CLI::IsMember({"constant", "linear", "cosine"}));
    d.integer("--lr-decay-iters", o.lr_decay_iters, "Iterations to decay over [default: --train-iters]");
    d.integer("--lr-decay-samples", o.lr_decay_samples, "Samples to decay over [default: --train-samples]");
    d.integer("--lr-decay-tokens", o.lr_decay_tokens, "Tokens to decay over (decay follows consumed tokens)");
    d.number("--lr-warmup-fraction", o.lr_warmup_fraction, "Warmup as a fraction of the decay length");
    d.integer("--lr-warmup-iters", o.lr_warmup_iters, "Warmup length in iterations");
    d.integer("--lr-warmup-samples", o.lr_warmup_samples, "Warmup length in samples");
    d.flag("--override-lr-scheduler", o.override_lr_scheduler, "On resume, take the schedule from the flags");
    d.flag("--use-checkpoint-lr-scheduler", o.use_checkpoint_lr_scheduler,
           "On resume, take the schedule from the checkpoint");
    d.number("--adam-beta1", o.adam_beta1, "Adam beta1");
    d.number("--adam-beta2", o.adam_beta2, "Adam beta2");
    d.number("--adam-eps", o.adam_eps, "Adam epsilon");
    d.number("--sgd-momentum", o.sgd_momentum, "SGD momentum");
    d.number("--weight-decay", o.weight_decay, "Decoupled weight decay");
    d.number("--clip-grad", o.clip_grad, "Clip gradients to this global L2 norm (0: off)");
    d.integer("--seed", args.seed, "Random seed");

    d.group("Precision");
    d.flag("--fp16", o.fp16, "Train in fp16 with loss scaling");
    d.flag("--bf16", o.bf16, "Train in bf16");
    d.number("--loss-scale", o.loss_scale, "Static loss scale [default: dynamic]; under --deepspeed the config's fp16 section decides");
    d.number("--initial-loss-scale", o.initial_loss_scale, "Initial dynamic loss scale");
    d.number("--min-loss-scale", o.min_loss_scale, "Smallest dynamic loss scale");
    d.integer("--loss-scale-window", o.loss_scale_window, "Overflow-free iterations before the scale grows");
    d.integer("--hysteresis", o.hysteresis, "Overflows tolerated before the scale shrinks");

    d.group("Logging and evaluation");
    auto& l = args.logging;
    d.integer("--log-interval", l.log_interval, "Iterations between log lines");
    d.integer("--eval-interval", l.eval_interval, "Iterations between validation runs");
    d.integer("--eval-iters", l.eval_iters, "Iterations per validation run");
    d.text("--tensorboard-dir", l.tensorboard_dir, "Write TensorBoard events here");
    d.text("--codecarbon-dir", l.codecarbon_dir, "Write codecarbon emissions.csv here");
    d.integer("--tensorboard-log-interval", l.tensorboard_log_interval, "Iterations between TensorBoard points");
    d.integer("--tensorboard-queue-size", l.tensorboard_queue_size, "Events buffered before a TensorBoard flush");
    d.flag("--log-timers-to-tensorboard", l.log_timers_to_tensorboard, "Write timers to TensorBoard");
    d.flag("--log-batch-size-to-tensorboard", l.log_batch_size_to_tensorboard, "Write the batch size to TensorBoard");
    d.flag("--no-log-learnig-rate-to-tensorboard", l.log_learning_rate_to_tensorboard,
           "Do not write the learning rate to TensorBoard (Megatron's spelling)", false);
    d.flag("--no-log-loss-scale-to-tensorboard", l.log_loss_scale_to_tensorboard,
           "Do not write the loss scale to TensorBoard", false);
    d.flag("--log-validation-ppl-to-tensorboard", l.log_validation_ppl_to_tensorboard,
           "Write validation perplexity to TensorBoard");
    d.flag("--log-params-norm", l.log_params_norm, "Log the parameter norm");
    d.flag("--log-num-zeros-in-grad", l.log_num_zeros_in_grad, "Log the number of zeros in the gradient");
    const std::vector<std::string> levels{"debug", "info", "warning", "error", "critical"};
    d.text("--log-level", l.log_level, "Log level of rank 0")->check(CLI::IsMember(levels));
    d.text("--log-level-replica", l.log_level_replica, "Log level of the other ranks")->check(CLI::IsMember(levels));

    d.group("Exit");
    d.integer("--exit-interval", args.exit.exit_interval, "Exit after the iteration that is a multiple of this");
    d.integer("--exit-duration-in-mins", args.exit.exit_duration_in_mins, "Exit (after saving) after this many minutes");
    d.text("--kill-switch-path", args.exit.kill_switch_path, "Exit (without saving) when this file appears");

    d.group("Checkpoints");
    d.text("--save", args.checkpoint.save, "Save checkpoints in this directory");
    d.text("--load", args.checkpoint.load, "Resume from the latest checkpoint in this directory");
    d.integer("--save-interval", args.checkpoint.save_interval, "Iterations between checkpoints");
    d.flag("--no-save-optim", args.checkpoint.no_save_optim, "Save no optimizer states (weights-only checkpoints)");
    d.flag("--no-save-rng", args.checkpoint.no_save_rng, "Save no random number generator states");
    d.flag("--no-load-optim", args.checkpoint.no_load_optim,
           "Resume without optimizer states: fp32 masters from the weights, Adam moments from zero");
    d.flag("--no-load-rng", args.checkpoint.no_load_rng, "Resume without the random number generator states");
    d.flag("--finetune", args.checkpoint.finetune,
           "Load only the weights from --load and start at iteration 0 (no optimizer, RNG or schedule state)");

    d.group("Parallelism and DeepSpeed");
    auto& p = args.parallel;
    d.integer("--tensor-model-parallel-size", p.tensor_model_parallel_size, "Tensor-parallel degree");
    d.integer("--pipeline-model-parallel-size", p.pipeline_model_parallel_size, "Pipeline stages");
    d.text("--pp-partition-method,--partition-method", p.pp_partition_method,
           "How layers are split between pipeline stages, as DeepSpeed's PipelineModule: type:transformer (the default), "
           "uniform, parameters, or type:<regex> such as 'type:transformer|embedding'");
    d.text("--distributed-backend", p.distributed_backend,
           "Collective backend between GPUs: nccl or gloo (training on CPUs always uses gloo)")
        ->check(CLI::IsMember({"nccl", "gloo"}));
    d.number("--distributed-timeout-minutes", p.distributed_timeout_minutes,
             "How long a collective waits for the other ranks before the run stops with an error naming them");
    d.flag("--deepspeed", p.deepspeed, "Use the DeepSpeed engine settings of --deepspeed_config");
    d.text("--deepspeed_config", p.deepspeed_config, "DeepSpeed config JSON");
    d.integer("--zero-stage", p.zero_stage, "ZeRO stage: 0 or 1");
    d.flag("--no-overlap-grad-reduce", p.overlap_grad_reduce,
           "All-reduce the data-parallel gradients after the backward pass instead of during it", false);

    // Megatron-DeepSpeed flags mds does not implement (false: a store_true flag).
    d.unsupported("--batch-size", true, "deprecated in Megatron; use --micro-batch-size");
    d.unsupported("--model-parallel-size", true, "deprecated in Megatron; use --tensor-model-parallel-size");
    d.unsupported("--warmup", true, "deprecated in Megatron; use --lr-warmup-iters or --lr-warmup-samples");
    d.unsupported("--num-layers-per-virtual-pipeline-stage", true, "the interleaved pipeline schedule is not implemented");
    d.unsupported("--train-tokens", true, "token-based training length is not implemented; use --train-samples");
    d.unsupported("--kv-channels", true, "the head size is always --hidden-size / --num-attention-heads");
    d.unsupported("--glu-activation", true, "GLU activations are not implemented (GeLU only)");
    d.unsupported("--dataloader-type", true, "mds has one data loader (Megatron's single)");
    d.unsupported("--skip-train-iteration-range", true, "skipping iteration ranges is not implemented yet");
    d.unsupported("--remote-device", true, "ZeRO offload is not implemented");
    d.unsupported("--zero-reduce-bucket-size", true, "ZeRO-2/3 bucket settings are not implemented");
    d.unsupported("--zero-allgather-bucket-size", true, "ZeRO-2/3 bucket settings are not implemented");
    d.unsupported("--DDP-impl", true, "mds has one data-parallel implementation");
    d.unsupported("--vocab-extra-ids", true, "extra sentinel tokens (T5) are not implemented");
    d.unsupported("--encoder-seq-length", true, "encoder-decoder models are not implemented");
    d.unsupported("--decoder-seq-length", true, "encoder-decoder models are not implemented");
    d.unsupported("--apply-residual-connection-post-layernorm", false, "post-layernorm residuals are not implemented");
    d.unsupported("--openai-gelu", false, "only the tanh-approximated GeLU is implemented");
    d.unsupported("--fp32-residual-connection", false, "the residual stream is kept in the training dtype");
    d.unsupported("--init-method-xavier-uniform", false, "only normal initialization is implemented");
    d.unsupported("--use-bnb-optimizer", false, "bitsandbytes optimizers are not implemented");
    d.unsupported("--cpu-optimizer", false, "CPU optimizers are not implemented");
    d.unsupported("--cpu_torch_adam", false, "CPU optimizers are not implemented");
    d.unsupported("--universal-checkpoint", false, "universal checkpoints are not implemented yet");
    d.unsupported("--inference", false, "mds-train only trains");
    d.unsupported("--adlr-autoresume", false, "ADLR autoresume is NVIDIA-internal");
    d.unsupported("--use-contiguous-buffers-in-ddp", false, "mds has one data-parallel implementation");
    d.unsupported("--reset-position-ids", false, "position ids are never reset at document ends");
    d.unsupported("--reset-attention-mask", false, "attention is never masked at document ends");
    d.unsupported("--eod-mask-loss", false, "the loss is never masked at end-of-document tokens");
    d.unsupported("--loss-on-targets-only", false, "prefix-LM losses are not implemented");
    d.unsupported("--reweight-loss-based-on-position-frequency", false, "prefix-LM losses are not implemented");
    d.unsupported("--zero-reduce-scatter", false, "ZeRO-2/3 settings are not implemented");
    d.unsupported("--zero-contigious-gradients", false, "ZeRO-2/3 settings are not implemented");
    d.unsupported("--partition-activations", false, "activation partitioning is not implemented");
    d.unsupported("--contigious-checkpointing", false, "activation partitioning is not implemented");
    d.unsupported("--checkpoint-in-cpu", false, "CPU activation checkpoints are not implemented");
    d.unsupported("--distribute-checkpointed-activations", false, "activation partitioning is not implemented");
    d.unsupported("--scattered-embeddings", false, "ZeRO-3 features are not implemented");
    d.unsupported("--split-transformers", false, "ZeRO-3 features are not implemented");
    d.unsupported("--memory-centric-tiled-linear", false, "ZeRO-3 features are not implemented");
    d.unsupported("--no-masked-softmax-fusion", false, "the fused kernels are always used");
    d.unsupported("--no-bias-gelu-fusion", false, "the fused kernels are always used");
    d.unsupported("--no-bias-dropout-fusion", false, "the fused kernels are always used");
    d.unsupported("--no-query-key-layer-scaling", false, "query-key layer scaling is always on in fp16");
    d.unsupported("--attention-softmax-in-fp32", false, "not implemented yet");
    d.unsupported("--accumulate-allreduce-grads-in-fp32", false, "not implemented yet");
    d.unsupported("--fp16-lm-cross-entropy", false, "the cross entropy is computed in fp32");
}

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
    if (ds_fp16) {
        // DeepSpeed's loss scaler replaces Megatron's: its settings (or DeepSpeed's defaults) win.
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
    if (ds.curriculum_learning && ds.curriculum_learning->enabled) args.curriculum = ds.curriculum_learning;
    args.steps_per_print = ds.steps_per_print;
    args.wall_clock_breakdown = ds.wall_clock_breakdown;
    if (!ds.unknown_keys.empty()) {
        std::string keys;
        for (const auto& k : ds.unknown_keys) keys += (keys.empty() ? "" : ", ") + k;
        warnings.push_back(ds.source + ": keys mds-train does not read: " + keys);
    }
    if (ds.gradient_accumulation_steps && args.parallel.world_size && o.global_batch_size) {
        const std::int64_t dp =
            *args.parallel.world_size / (args.parallel.tensor_model_parallel_size * args.parallel.pipeline_model_parallel_size);
        const std::int64_t expect = o.micro_batch_size * *ds.gradient_accumulation_steps * dp;
        if (!o.rampup_batch_size && expect != *o.global_batch_size)
            usage(ds.source + " gradient_accumulation_steps " + std::to_string(*ds.gradient_accumulation_steps) +
                  " gives a global batch of " + std::to_string(expect) + " (micro batch × steps × data parallel " +
                  std::to_string(dp) + "), not --global-batch-size " + std::to_string(*o.global_batch_size));
    }
    return warnings;
}

void validate(TrainArgs& args) {
    auto& m = args.model;
    auto& o = args.optimizer;
    auto& p = args.parallel;
    const auto given = [&](const std::string& flag) { return args.flags_given.count(flag) > 0; };
    for (const char* flag : {"--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length",
                             "--max-position-embeddings", "--lr"})
        if (!given(flag)) usage(std::string(flag) + " is required");
    const auto positive = [](const std::string& flag, std::int64_t v) {
        if (v <= 0) usage(flag + " must be positive, got " + std::to_string(v));
    };
    positive("--num-layers", m.num_layers);
    positive("--hidden-size", m.hidden_size);
    positive("--num-attention-heads", m.num_attention_heads);
    positive("--seq-length", m.seq_length);
    positive("--micro-batch-size", o.micro_batch_size);
    positive("--tensor-model-parallel-size", p.tensor_model_parallel_size);
    positive("--pipeline-model-parallel-size", p.pipeline_model_parallel_size);
    if (!(p.distributed_timeout_minutes > 0)) usage("--distributed-timeout-minutes must be positive");
    positive("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by);

    // Model shape.
    if (m.hidden_size % m.num_attention_heads != 0)
        usage("--hidden-size " + std::to_string(m.hidden_size) + " is not divisible by --num-attention-heads " +
              std::to_string(m.num_attention_heads));
    if (!m.ffn_hidden_size) m.ffn_hidden_size = 4 * m.hidden_size;
    positive("--ffn-hidden-size", *m.ffn_hidden_size);
    if (*m.max_position_embeddings < m.seq_length)
        usage("--max-position-embeddings " + std::to_string(*m.max_position_embeddings) + " is smaller than --seq-length " +
              std::to_string(m.seq_length));
    if (m.pad_vocab_size_to && *m.pad_vocab_size_to % p.tensor_model_parallel_size != 0)
        usage("--pad-vocab-size-to " + std::to_string(*m.pad_vocab_size_to) +
              " is not divisible by --tensor-model-parallel-size " + std::to_string(p.tensor_model_parallel_size));

    // Training length and schedule units: iterations or samples, never both.
    auto& len = args.length;
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

    // Precision.
    if (o.fp16 && o.bf16) usage("--fp16 and --bf16 exclude each other");
    if (o.loss_scale && *o.loss_scale <= 0) usage(flag_value("--loss-scale", *o.loss_scale) + " must be positive");

    // Parallel layout and batch sizes.
    if (p.world_size) {
        const std::int64_t mp = p.tensor_model_parallel_size * p.pipeline_model_parallel_size;
        if (*p.world_size % mp != 0)
            usage("world size " + std::to_string(*p.world_size) + " is not divisible by --tensor-model-parallel-size " +
                  std::to_string(p.tensor_model_parallel_size) + " × --pipeline-model-parallel-size " +
                  std::to_string(p.pipeline_model_parallel_size));
        p.data_parallel_size = *p.world_size / mp;
    }
    if (!o.global_batch_size) o.global_batch_size = o.micro_batch_size * p.data_parallel_size;
    // Megatron's calculator asserts, with working alternatives; the batch sizes a ramp-up will have in
    // force are checked by the trainer once it knows the consumed samples it resumes from.
    (void)make_num_micro_batches_calculator(args);

    // DeepSpeed engine.
    if (!p.deepspeed_config.empty() && !p.deepspeed) usage("--deepspeed_config needs --deepspeed");
    if (p.deepspeed && p.deepspeed_config.empty()) usage("--deepspeed needs --deepspeed_config");
    if (p.zero_stage != 0 && p.zero_stage != 1)
        usage("ZeRO stage " + std::to_string(p.zero_stage) + " (--zero-stage / zero_optimization.stage) is not "
              "supported by mds-train: use 0 or 1");
    if (args.curriculum && args.curriculum->max_difficulty > m.seq_length)
        usage("curriculum_learning.max_difficulty " + std::to_string(args.curriculum->max_difficulty) +
              " is larger than --seq-length " + std::to_string(m.seq_length));

    // Data loading: Mode 1 (--data-path, --split) or Mode 2 (--(train|valid|test)-weighted-split-paths),
    // never both (Megatron-DeepSpeed's parse_args asserts). The files are read when training starts.
    {
        const auto& dt = args.data;
        bool mode2 = false;
        for (int k = 0; k < 3; ++k) {
            std::string flag = k == 0 ? "--train" : k == 1 ? "--valid" : "--test";
            flag += "-weighted-split-paths";
            if (given(flag) && given(flag + "-path")) usage(flag + " and " + flag + "-path exclude each other: give one");
            const auto kk = static_cast<std::size_t>(k);
            mode2 = mode2 || !dt.weighted_split_paths[kk].empty() || !dt.weighted_split_paths_path[kk].empty();
        }
        if (mode2 && (given("--data-path") || given("--split")))
            usage(std::string(given("--data-path") ? "--data-path" : "--split") +
                  ": data loading Mode 1 (--data-path and --split) and Mode 2 (--(train|valid|test)-weighted-split-paths) "
                  "are mutually exclusive");
        if (mode2 && dt.weighted_split_paths[0].empty() && dt.weighted_split_paths_path[0].empty())
            usage("--valid-weighted-split-paths and --test-weighted-split-paths (and their -path forms) need "
                  "--train-weighted-split-paths or --train-weighted-split-paths-path (Megatron-DeepSpeed: \"No "
                  "dataloading argument passed\")");
        if (given("--train-weighted-split-paths") && dt.weighted_split_paths[0].size() != 1)
            usage("--train-weighted-split-paths: only 1 dataset group is allowed, got " +
                  std::to_string(dt.weighted_split_paths[0].size()));
    }

    // Checkpoints and logging.
    if (!args.checkpoint.save.empty() && !args.checkpoint.save_interval) usage("--save needs --save-interval");
    if (args.checkpoint.save_interval) positive("--save-interval", *args.checkpoint.save_interval);
    positive("--log-interval", args.logging.log_interval);
    positive("--eval-interval", args.logging.eval_interval);
    if (args.logging.eval_iters < 0) usage("--eval-iters must not be negative");
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
    return optim::NumMicroBatchesCalculator(o.global_batch_size.value_or(o.micro_batch_size * args.parallel.data_parallel_size),
                                            o.micro_batch_size, args.parallel.data_parallel_size, o.rampup_batch_size);
}

}  // namespace mds::train
