// `mds-train --dry-run`: what a training would need, without training — parameter count, memory
// per GPU (weights, gradients, optimizer states, activations, for the fullest pipeline stage) and
// the estimated training days for a number of GPUs at an assumed TFLOPs per GPU. Formulas and
// their sources are at each function below and in dry_run.cpp (specs/perf.md §3).
#pragma once

#include <CLI/CLI.hpp>  // CLI::App

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>  // nlohmann::json

#include "mds/observe/flops.h"    // ModelShape
#include "mds/flags/train_args.h"  // TrainArgs, ModelArgs

namespace mds::flags {

// Megatron's _vocab_size_with_padding (BS Megatron-DeepSpeed megatron/tokenizer/tokenizer.py):
// --pad-vocab-size-to when given (at least the vocabulary, a multiple of
// --make-vocab-size-divisible-by), else the vocabulary rounded up to a multiple of
// --make-vocab-size-divisible-by × --tensor-model-parallel-size (GPT-2: 50257 → 50304 at TP 1,
// 50432 at TP 2). Throws mds::UsageError naming the flag.
std::int64_t padded_vocab_size(std::int64_t vocab_size, const ModelArgs& model, std::int64_t tensor_model_parallel_size);

// The shape the parameter-count and FLOPs formulas (observe/flops.h) need, from the model flags.
observe::ModelShape model_shape(const ModelArgs& model, std::int64_t padded_vocab_size);

struct DryRunOptions {
    // Print the report and exit without training. --dry-run.
    bool enabled = false;
    // GPUs of the planned run. Default: the launcher's world size, else TP × PP. --dry-run-gpus.
    std::optional<std::int64_t> num_gpus;
    // Achieved TFLOPs per GPU to assume, in Megatron-DeepSpeed's log-line convention (hardware
    // FLOPs: the recomputed forward counts). No days without it. --dry-run-tflops.
    std::optional<double> tflops_per_gpu;
    // Vocabulary before padding. The tool fills it from the tokenizer; --dry-run-vocab-size
    // overrides.
    std::optional<std::int64_t> vocab_size;
    // Tokens to train on. Default: what --train-iters / --train-samples and the batch-size ramp-up
    // and curriculum consume. --dry-run-train-tokens.
    std::optional<std::int64_t> train_tokens;
    // Whether attention keeps its a·s² scores, softmax and dropout mask for the backward (Megatron's
    // attention: yes). A fused flash / SDPA attention keeps only O(s) per head: set false.
    bool attention_scores_materialized = true;
    // Memory of one GPU, GiB, for the "largest GPT that fits" section. --dry-run-gpu-memory.
    double gpu_memory_gib = 80.0;
};

// --dry-run, --dry-run-gpus, --dry-run-tflops, --dry-run-vocab-size, --dry-run-train-tokens.
void add_dry_run_flags(CLI::App& app, DryRunOptions& options);

// Memory of one GPU of one pipeline stage, in bytes.
struct DryRunStage {
    std::string name;                     // "first", "last", or "only" when PP = 1
    std::int64_t stage = 0;               // pipeline rank
    std::int64_t num_layers = 0;          // transformer layers held (the larger share when uneven)
    std::int64_t in_flight_micro_batches = 0;  // micro batches whose activations are held at once
    std::int64_t parameters = 0;          // parameters on this GPU (its tensor-parallel shard)
    std::int64_t weights_bytes = 0;
    std::int64_t gradients_bytes = 0;
    std::int64_t optimizer_bytes = 0;     // after ZeRO-1 partitioning over data parallelism (0 when offloaded)
    // --cpu-optimizer / offload_optimizer: host memory of the rank for the optimizer (fp32 masters,
    // Adam moments, fp32 gradient copy), after partitioning; 0 without offload.
    std::int64_t host_optimizer_bytes = 0;
    std::int64_t activations_bytes = 0;
    std::int64_t total_bytes = 0;
};

// The deepest model the largest-fit search looks for (GPT-3 175B has 96 layers).
inline constexpr std::int64_t kDryRunMaxLayers = 4096;

// The largest model that fits one GPU's memory at the flags' micro batch, sequence, precision,
// vocabulary and parallel layout, with or without activation recomputation: the largest shape of
// GPT-3's table (Brown et al. 2020, Table 2.1; plus GPT-2 1.5B) and the deepest model of the flags'
// own width. "Fits": the estimate of the largest stage within 90% of the memory (the rest for what the
// estimate leaves out: CUDA context, communication buffers, fragmentation).
struct DryRunFit {
    bool recompute = false;
    std::string shape;                     // "GPT-3 2.7B"; empty when none of the table fits
    std::int64_t num_layers = 0, hidden_size = 0, num_attention_heads = 0;
    std::int64_t parameters = 0, per_gpu_bytes = 0;
    std::int64_t deepest_layers = 0;       // at --hidden-size / --num-attention-heads; 0 when not even one layer;
                                           // kDryRunMaxLayers: that many or more (the search stops there)
    std::int64_t deepest_parameters = 0, deepest_per_gpu_bytes = 0;
};

struct DryRunReport {
    // Model.
    std::int64_t num_layers = 0;
    std::int64_t hidden_size = 0;
    std::int64_t ffn_hidden_size = 0;
    std::int64_t num_attention_heads = 0;
    std::int64_t seq_length = 0;
    std::int64_t vocab_size = 0;
    std::int64_t padded_vocab_size = 0;
    std::int64_t parameters = 0;                     // observe::parameter_count (tied embeddings once)
    std::int64_t parameters_without_embeddings = 0;
    // Layout.
    std::int64_t num_gpus = 0;
    std::int64_t tensor_model_parallel_size = 1;
    std::int64_t pipeline_model_parallel_size = 1;
    std::int64_t data_parallel_size = 1;
    std::int64_t micro_batch_size = 0;
    std::int64_t global_batch_size = 0;              // the final one under a ramp-up
    std::int64_t num_micro_batches = 0;
    // The 1F1B schedule's idle share of a step: (PP - 1) / (micro batches + PP - 1); 0 when PP = 1.
    double pipeline_bubble = 0.0;
    // A run started from scratch on these GPUs would reach a ramp-up batch size not divisible by
    // micro batch × DP (Megatron's check stops it there): what and where, and from how many consumed
    // samples on a resumed run works (NumMicroBatchesCalculator::remaining_batch_sizes_problem).
    std::optional<std::string> rampup_problem;
    std::string precision;                           // "fp16", "bf16" or "fp32"
    std::int64_t zero_stage = 0;
    // Data-parallel ranks the optimizer states are partitioned over: DP under ZeRO stage 1 and under
    // DeepSpeed's BF16_Optimizer (bf16 at ZeRO stage 0), else 1.
    std::int64_t optimizer_partitions = 1;
    bool checkpoint_activations = false;
    std::int64_t checkpoint_num_layers = 1;
    bool attention_scores_materialized = true;
    // Memory.
    std::int64_t weight_bytes_per_parameter = 0;     // 2 (fp16/bf16) or 4
    std::int64_t gradient_bytes_per_parameter = 0;   // 2 or 4
    std::int64_t optimizer_bytes_per_parameter = 0;  // 12 (fp32 master, m, v) or 8 (m, v), before ZeRO; 0 offloaded
    // --cpu-optimizer / offload_optimizer: the optimizer lives in host memory, 16 bytes per parameter
    // (fp32 master, m, v, and the fp32 gradient copy the host step reads), before ZeRO.
    bool host_optimizer = false;
    std::int64_t host_optimizer_bytes_per_parameter = 0;
    std::vector<DryRunStage> stages;                 // first and last stage; one when PP = 1
    std::size_t largest_stage = 0;                   // index into stages of the largest total
    // Time.
    std::int64_t train_iters = 0;                    // scaled to train_tokens when those were given
    std::int64_t train_tokens = 0;
    bool train_tokens_given = false;                 // --dry-run-train-tokens, not the flags' schedule
    bool curriculum = false;                         // seqlen curriculum shortens the early steps
    double flops_per_parameter_token = 8.0;          // 8 with activation recomputation, else 6
    double total_flops = 0.0;                        // Σ Narayanan Eq. 3 over the iterations
    std::optional<double> tflops_per_gpu;
    std::optional<double> days;                      // flops_per_parameter_token · tokens · params
    std::optional<double> days_exact;                // total_flops (scaled to train_tokens)
    // What fits one GPU of gpu_memory_gib: without and with recomputation.
    double gpu_memory_gib = 80.0;
    std::vector<DryRunFit> fits;
};

// The report for resolved `args` (resolve_train_args). Throws mds::UsageError naming the flag for
// inputs it cannot plan with.
DryRunReport plan_dry_run(const TrainArgs& args, const DryRunOptions& options);

// Human-readable report for stdout, several lines, ending in a newline.
std::string format_dry_run(const DryRunReport& report);
// The same for --json.
nlohmann::json dry_run_json(const DryRunReport& report);

// BigScience math/README.md "Estimate model training time" (from Narayanan et al. 2021 §5.1):
//   days = flops_per_parameter_token · tokens · parameters / (gpus · tflops · 1e12) / 86400
// with 8 = 2 (multiply-add) × (1 forward + 1 recomputed forward + 2 backward). tr1-13B:
// 300e9 tokens, 13e9 parameters, 256 GPUs at 45 TFLOPs → 31.35 days.
double estimate_training_days(double tokens, double parameters, std::int64_t num_gpus, double tflops_per_gpu,
                              double flops_per_parameter_token = 8.0);

// Activation bytes one transformer layer keeps for the backward of one micro batch, without
// recomputation (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
// Models", §4 and Table 2, tensor parallelism without sequence parallelism as in Megatron-DeepSpeed):
//   s·b·h·(10 + 24/t) + 5·a·s²·b/t   for 16-bit activations,
// written with e bytes per activation value (1-byte dropout masks) as
//   s·b·h·(4e + 2 + 12e/t) + (2e + 1)·a·s²·b/t,
// the a·s² term only when attention scores are materialized.
double activation_bytes_per_layer(std::int64_t seq_length, std::int64_t micro_batch_size, std::int64_t hidden_size,
                                  std::int64_t num_attention_heads, std::int64_t tensor_model_parallel_size,
                                  std::int64_t bytes_per_value, bool attention_scores_materialized);

}  // namespace mds::flags
