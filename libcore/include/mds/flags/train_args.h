// TrainArgs: the command line of mds-train, with Megatron-DeepSpeed's flag names, defaults and
// meaning (BigScience fork megatron/arguments.py), so a BigScience slurm script ports unchanged.
// Flow: add_train_flags() + parse, then resolve_train_args() = DeepSpeed config + validate().
// Megatron flags mds does not implement are declared too, and fail with a message naming them.
#pragma once

#include <CLI/CLI.hpp>  // CLI::App

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mds/optim/batch_size_rampup.h"   // NumMicroBatchesCalculator
#include "mds/optim/optimizer_config.h"    // OptimizerConfig: optimizer, LR, batch, fp16/bf16, loss scale
#include "mds/flags/deepspeed_config.h"
#include "mds/flags/save_schedule.h"      // SaveSchedule: --save-interval
#include "mds/observe/straggler.h"         // StragglerConfig: --log-straggler, --straggler-*

namespace mds::flags {

struct ModelArgs {
    std::int64_t num_layers = 0;                         // --num-layers (required)
    std::int64_t hidden_size = 0;                        // --hidden-size (required)
    std::optional<std::int64_t> ffn_hidden_size;        // --ffn-hidden-size; default 4 × hidden
    std::int64_t num_attention_heads = 0;                // --num-attention-heads (required)
    std::optional<std::int64_t> kv_channels;             // --kv-channels: head size; default hidden / heads
    std::int64_t seq_length = 0;                         // --seq-length (required)
    std::optional<std::int64_t> max_position_embeddings; // --max-position-embeddings (required)
    std::int64_t make_vocab_size_divisible_by = 128;     // --make-vocab-size-divisible-by
    std::optional<std::int64_t> pad_vocab_size_to;       // --pad-vocab-size-to (BS: 250880 for BLOOM)
    double init_method_std = 0.02;                       // --init-method-std
    std::string position_embedding_type = "absolute";   // --position-embedding-type absolute|rotary|alibi
    bool embed_layernorm = false;                        // --embed-layernorm (BLOOM)
    std::string attention_backend = "auto";             // --attention-backend (Megatron-LM's): SDPA's kernel
    std::optional<std::string> glu_activation;           // --glu-activation geglu|liglu|reglu|swiglu
    bool bias_gelu_fusion = true;                        // --no-bias-gelu-fusion stores false
    bool openai_gelu = false;                            // --openai-gelu
    std::optional<std::string> onnx_safe;                // --onnx-safe VALUE (argparse type=bool: non-empty is True)
    bool apply_residual_connection_post_layernorm = false; // --apply-residual-connection-post-layernorm
    // Accepted with no effect on mds's numbers (the rows say why); kept for the checkpoint's args.
    bool apply_query_key_layer_scaling = true;           // --no-query-key-layer-scaling stores false
    bool attention_softmax_in_fp32 = false;              // --attention-softmax-in-fp32
    bool fp16_lm_cross_entropy = false;                  // --fp16-lm-cross-entropy (needs --fp16, as in BMD)
    bool init_method_xavier_uniform = false;             // --init-method-xavier-uniform (BMD's ViT only)
    bool layernorm_backward_fusion = false;              // --layernorm-backward-fusion (mds only): kernels/layer_norm
    bool bias_grad_fusion = false;                       // --bias-grad-fusion (mds only): kernels/bias_grad
    bool gradient_accumulation_fusion = false;           // --gradient-accumulation-fusion (Megatron-LM's): cuBLAS into fp32
    bool residual_layernorm_fusion = false;              // --residual-layernorm-fusion (mds only): kernels/layer_norm forward
    bool gelu_epilogue_fusion = false;                   // --gelu-epilogue-fusion (mds only): cuBLASLt's GeLU epilogues
    bool cross_entropy_loss_fusion = false;              // --cross-entropy-loss-fusion (Megatron-LM's): kernels/cross_entropy
    bool fp32_residual_connection = false;               // --fp32-residual-connection (needs --fp16 or --bf16)
    double layernorm_epsilon = 1e-5;                     // --layernorm-epsilon
    double attention_dropout = 0.1;                      // --attention-dropout
    double hidden_dropout = 0.1;                         // --hidden-dropout
    bool sync_tp_duplicated_parameters = false;          // --sync-tp-duplicated-parameters
    bool checkpoint_activations = false;                 // --checkpoint-activations
    std::int64_t checkpoint_num_layers = 1;              // --checkpoint-num-layers
    bool deepspeed_activation_checkpointing = false;     // --deepspeed-activation-checkpointing
    bool abort_on_unmet_fused_kernel_constraints = false; // --abort-on-unmet-fused-kernel-constraints

    // Megatron's defaults of the optional sizes (validate() fills ffn_hidden_size too).
    std::int64_t ffn_hidden() const { return ffn_hidden_size.value_or(4 * hidden_size); }
    std::int64_t max_positions() const { return max_position_embeddings.value_or(seq_length); }
    std::int64_t kv() const { return kv_channels.value_or(num_attention_heads > 0 ? hidden_size / num_attention_heads : 0); }
    // --onnx-safe as argparse's bool(str) reads it: any non-empty value is True.
    bool onnx_safe_on() const { return onnx_safe && !onnx_safe->empty(); }
};

struct DataArgs {
    std::vector<std::string> data_path;                  // --data-path [weight prefix ...]
    std::optional<std::string> split;                    // --split "949,50,1"
    // Megatron-DeepSpeed's data loading "Mode 2" (exclusive with --data-path/--split): groups
    // "NAME: W1 START:END P1, W2 START:END P2", given directly or in a file (data/weighted_split.h).
    // Indexed by split (0 train, 1 valid, 2 test: data::weighted_split_flag names the flag).
    std::array<std::vector<std::string>, 3> weighted_split_paths;  // --{train,valid,test}-weighted-split-paths GROUP...
    std::array<std::string, 3> weighted_split_paths_path;          // --{train,valid,test}-weighted-split-paths-path FILE
    std::string vocab_file;                              // --vocab-file
    std::string merge_file;                              // --merge-file
    std::optional<std::string> tokenizer_type;           // --tokenizer-type GPT2BPETokenizer|PretrainedFromHF
    std::string tokenizer_name_or_path;                  // --tokenizer-name-or-path
    std::string data_impl = "infer";                     // --data-impl infer|mmap
    std::int64_t num_workers = 2;                        // --num-workers
    std::int64_t valid_num_workers = 2;                  // --valid-num-workers
    // Issue 18, as pretrain_gpt.py reads them (docs/data-flags.md).
    bool eod_mask_loss = false;                          // --eod-mask-loss: no loss where the input token is EOD
    bool reset_position_ids = false;                     // --reset-position-ids: positions restart after each EOD
    bool reset_attention_mask = false;                   // --reset-attention-mask: no effect (GPTModelPipe drops the mask)
    std::string dataloader_type = "single";              // --dataloader-type single|cyclic (Megatron's samplers)
    std::vector<std::string> skip_train_iteration_range; // --skip-train-iteration-range START-END ...
    // validate(): the ranges above as BMD's parse_args leaves them: sorted, overlapping ones merged.
    std::vector<std::array<std::int64_t, 2>> skip_ranges;
    std::int64_t vocab_extra_ids = 0;                    // --vocab-extra-ids (GPT2BPETokenizer ignores it, as BMD)
    // --sft (Megatron-LM's name): the data are prompt / answer pairs packed as BMD's decoder-packed MTF
    // dataset (data/packed_sft_datasets.h): attention and positions restart at each packed example.
    bool sft = false;
    bool loss_on_targets_only = false;                   // --loss-on-targets-only: with --sft, loss on answers only (else no effect)
    bool reweight_loss_based_on_position_frequency = false;  // (prefix LM only: no effect)
};

// Training length: exactly one of the two.
struct LengthArgs {
    std::optional<std::int64_t> train_iters;             // --train-iters
    std::optional<std::int64_t> train_samples;           // --train-samples
    std::optional<std::int64_t> train_tokens;            // --train-tokens (BMD reads it nowhere: no effect)
};

struct LoggingArgs {
    std::int64_t log_interval = 100;                     // --log-interval
    std::int64_t eval_interval = 1000;                   // --eval-interval
    std::int64_t eval_iters = 100;                       // --eval-iters
    std::string tensorboard_dir;                         // --tensorboard-dir
    std::string codecarbon_dir;                          // --codecarbon-dir
    // MLflow (docs/mlflow.md): the tracking server (else $MLFLOW_TRACKING_URI), the experiment (else
    // $MLFLOW_EXPERIMENT_NAME, else the --save folder's name, else "mds"), a new run's name, and how long
    // the end of training waits for what is still queued.
    std::string mlflow_tracking_uri;                     // --mlflow-tracking-uri
    std::string mlflow_experiment_name;                  // --mlflow-experiment-name
    std::string mlflow_run_name;                         // --mlflow-run-name
    double mlflow_flush_timeout = 10;                    // --mlflow-flush-timeout SECONDS
    std::int64_t tensorboard_log_interval = 1;           // --tensorboard-log-interval
    std::int64_t tensorboard_queue_size = 1000;          // --tensorboard-queue-size
    bool log_timers_to_tensorboard = false;              // --log-timers-to-tensorboard
    // Megatron-LM's timers: which run (0, 1, 2; default 2 = every timer, BMD's line) and how the line
    // reduces them over the ranks (max, minmax, all; default max = one number per timer, as BMD's line).
    std::int64_t timing_log_level = 2;                   // --timing-log-level (mds only)
    std::string timing_log_option = "max";               // --timing-log-option (mds only)
    bool log_batch_size_to_tensorboard = false;          // --log-batch-size-to-tensorboard
    bool log_learning_rate_to_tensorboard = true;        // off with --no-log-learnig-rate-to-tensorboard (sic)
    bool log_loss_scale_to_tensorboard = true;           // off with --no-log-loss-scale-to-tensorboard
    bool log_validation_ppl_to_tensorboard = false;      // --log-validation-ppl-to-tensorboard
    bool log_params_norm = false;                        // --log-params-norm
    bool log_num_zeros_in_grad = false;                  // --log-num-zeros-in-grad
    std::optional<std::string> log_level;                // --log-level
    std::optional<std::string> log_level_replica;        // --log-level-replica
    observe::StragglerConfig straggler;                  // --log-straggler, --straggler-minmax-count, ... (mds: on)
    std::optional<std::string> eval_only;                // --eval-only VALUE (BMD's type=bool: any non-empty VALUE is true)
    // Megatron-LM's profiling flags (not in BMD; docs/mds-train.md "Profiling"): a window of iterations under
    // LibTorch's profiler (--use-pytorch-profiler) or Nsight Systems' capture range, on --profile-ranks.
    bool profile = false;                                // --profile
    bool use_pytorch_profiler = false;                   // --use-pytorch-profiler
    std::int64_t profile_step_start = 10;                // --profile-step-start
    std::int64_t profile_step_end = 12;                  // --profile-step-end
    std::vector<std::string> profile_ranks;              // --profile-ranks (empty: 0)

    // --eval-only as BMD reads it: Python's bool() of the string given.
    bool evaluate_only() const { return eval_only && !eval_only->empty(); }
};

struct ExitArgs {
    std::optional<std::int64_t> exit_interval;           // --exit-interval (iterations)
    std::optional<std::int64_t> exit_duration_in_mins;   // --exit-duration-in-mins
    std::string kill_switch_path;                        // --kill-switch-path: exit when this file exists
    std::optional<std::int64_t> exit_iteration;          // --exit-iteration: stop after this iteration (absolute)
    std::optional<std::int64_t> exit_samples;            // --exit-samples: stop once the consumed samples reach it
};

struct CheckpointArgs {
    std::string save;                                    // --save DIR
    std::string load;                                    // --load DIR
    std::optional<SaveSchedule> save_interval;           // --save-interval N or N@A-B,... (required with --save)
    bool no_save_optim = false;                          // --no-save-optim: no optimizer files
    bool no_save_rng = false;                            // --no-save-rng: no RNG states
    bool async_save = true;                              // --async-save / --no-async-save (mds: on; Megatron-LM's name)
    bool no_load_optim = false;                          // --no-load-optim: Adam restarts, masters from the weights
    bool no_load_rng = false;                            // --no-load-rng
    bool finetune = false;                               // --finetune: weights only, iteration 0
    bool universal_checkpoint = false;                   // --universal-checkpoint: --load's latest_universal folder
};

struct ParallelArgs {
    std::int64_t tensor_model_parallel_size = 1;         // --tensor-model-parallel-size
    std::int64_t pipeline_model_parallel_size = 1;       // --pipeline-model-parallel-size
    std::optional<std::string> pp_partition_method;      // --pp-partition-method / --partition-method
    std::string distributed_backend = "nccl";            // --distributed-backend nccl|gloo (CPU training: gloo)
    double distributed_timeout_minutes = 10;             // --distributed-timeout-minutes (fractions allowed)
    bool deepspeed = false;                              // --deepspeed
    std::string deepspeed_config;                        // --deepspeed_config FILE
    std::int64_t zero_stage = 1;                         // --zero-stage (0 or 1)
    bool overlap_grad_reduce = true;                     // --no-overlap-grad-reduce / zero_optimization.overlap_comm
    std::optional<std::int64_t> local_rank;              // --local_rank (torch.distributed.launch): must be the launcher's local rank
    std::optional<std::int64_t> reduce_bucket_elements;  // zero_optimization.reduce_bucket_size (default: 25 MiB)
    // Optimizer states and step on the host (docs/cpu-optimizer.md): the flag, or the DeepSpeed
    // config's zero_optimization.offload_optimizer.device "cpu" (kept apart: the checkpoint's
    // args.cpu_optimizer records the flag only, as BMD's does).
    bool cpu_optimizer = false;                          // --cpu-optimizer
    bool cpu_torch_adam = false;                         // --cpu_torch_adam (BMD reads it nowhere)
    bool offload_optimizer = false;                      // zero_optimization.offload_optimizer.device "cpu"
    bool host_optimizer() const { return cpu_optimizer || offload_optimizer; }
    // Not flags: the launcher's WORLD_SIZE, and dp = world / (tp × pp) set by validate(); without
    // a world size validate() checks batch sizes for dp = 1.
    std::optional<std::int64_t> world_size;
    std::int64_t data_parallel_size = 1;
};

struct TrainArgs {
    ModelArgs model;
    DataArgs data;
    LengthArgs length;
    optim::OptimizerConfig optimizer;  // optimizer, LR schedule, batch sizes, precision, loss scale
    LoggingArgs logging;
    ExitArgs exit;
    CheckpointArgs checkpoint;
    ParallelArgs parallel;
    std::int64_t seed = 1234;          // --seed
    // From the DeepSpeed config (apply_deepspeed_config).
    std::optional<CurriculumLearningConfig> curriculum;
    std::int64_t steps_per_print = 10;
    bool wall_clock_breakdown = false;
    // The long names of the flags given on the command line ("--fp16"): a DeepSpeed config value
    // conflicts only with a flag that was given.
    std::set<std::string> flags_given;
    // The values of the given NoEffect flags mds keeps nowhere else ("--tile-factor" -> {"4"}), for
    // the checkpoint's args Namespace.
    std::map<std::string, std::vector<std::string>> unread_values;

    // --global-batch-size, or Megatron's default micro batch × data parallel (validate() fills it).
    std::int64_t global_batch_size() const {
        return optimizer.global_batch_size.value_or(optimizer.micro_batch_size * parallel.data_parallel_size);
    }
};

// Declares every flag of the flag table (mds/flags/flag_table.h) that mds-train takes on `app`,
// writing into `args`. Megatron-DeepSpeed flags that mds does not implement fail the parse with
// "--flag: not supported by mds-train: <why>"; unknown flags fail as CLI11 extras. Integers accept
// Python's underscores (5_000_000).
void add_train_flags(CLI::App& app, TrainArgs& args);

// Merges a DeepSpeed config into `args`: values the flags left unset are taken from it; a value
// that disagrees with a given flag throws mds::UsageError naming both. fp16 loss-scaler settings
// come from the config, as under Megatron-DeepSpeed; a given --loss-scale etc. that differs is
// reported in the returned warnings, with the unknown keys.
std::vector<std::string> apply_deepspeed_config(const DeepSpeedConfig& config, TrainArgs& args);

// Megatron's checks between flags, filling derived defaults (ffn = 4 × hidden, global batch size
// = micro × dp, data-parallel size), and the refusal of values mds cannot train with (--optimizer
// sgd, rotary positions), all before any rendezvous or file. Throws mds::UsageError naming the flags.
void validate(TrainArgs& args);

// Reads --deepspeed_config (when given), applies it, validates. Returns the warnings.
std::vector<std::string> resolve_train_args(TrainArgs& args);

// The batch-size calculator for validated args.
optim::NumMicroBatchesCalculator make_num_micro_batches_calculator(const TrainArgs& args);

}  // namespace mds::flags
