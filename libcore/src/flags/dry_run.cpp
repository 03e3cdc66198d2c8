// mds-train --dry-run (dry_run.h): parameter count, memory per GPU, training days.
#include "mds/flags/dry_run.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mds/ckpt/ds_optimizer_layout.h"  // ds_partitions_optimizer_states
#include "mds/ckpt/partition.h"         // gpt_stage_cuts, gpt_shard_parameters
#include "mds/observe/flops.h"          // parameter_count, flops_per_iteration
#include "mds/optim/batch_size_rampup.h"  // NumMicroBatchesCalculator
#include "mds/flags/curriculum.h"       // CurriculumScheduler, curriculum_step
#include "mds/util/error.h"
#include "mds/util/text.h"  // format_fixed
#include "flag_rows.h"      // usage, positive, text

namespace mds::flags {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// 12854282240 → "12,854,282,240".
std::string grouped(std::int64_t v) {
    std::string digits = std::to_string(v < 0 ? -v : v);
    std::string out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return v < 0 ? "-" + out : out;
}

std::string gib(std::int64_t bytes) { return format_fixed(static_cast<double>(bytes) / 1073741824.0, 2); }

// Integers as Python's int() reads them, underscores between digits included (300_000_000_000),
// as in BigScience's slurm scripts.
std::int64_t parse_count(const std::string& flag, const std::string& value) {
    std::string clean;
    for (std::size_t i = 0; i < value.size(); ++i) {
        if (value[i] == '_' && i > 0 && i + 1 < value.size() && std::isdigit(static_cast<unsigned char>(value[i - 1])) &&
            std::isdigit(static_cast<unsigned char>(value[i + 1])))
            continue;
        clean += value[i];
    }
    std::size_t used = 0;
    long long v = 0;
    try {
        v = std::stoll(clean, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (clean.empty() || used != clean.size()) throw CLI::ValidationError(flag, "expected an integer, found '" + value + "'");
    return static_cast<std::int64_t>(v);
}

// Iterations, tokens and FLOPs of the whole run, step by step while the batch-size ramp-up or the
// curriculum still change the step, then in one multiplication.
struct Consumption {
    std::int64_t iterations = 0;
    std::int64_t tokens = 0;
    double flops = 0.0;
};

Consumption consumption(const TrainArgs& args, std::int64_t dp, std::int64_t global_batch_size,
                        std::int64_t padded_vocab) {
    const auto& o = args.optimizer;
    optim::NumMicroBatchesCalculator calc(global_batch_size, o.micro_batch_size, dp, o.rampup_batch_size);
    Consumption c;
    c.iterations = args.length.train_iters ? *args.length.train_iters
                                           : calc.train_iters_for_samples(args.length.train_samples.value_or(0));
    std::optional<CurriculumScheduler> curriculum;
    if (args.curriculum && args.curriculum->enabled) curriculum.emplace(*args.curriculum);
    observe::ThroughputShape shape;
    shape.num_layers = args.model.num_layers;
    shape.hidden_size = args.model.hidden_size;
    shape.padded_vocab_size = padded_vocab;
    shape.checkpoint_activations = args.model.checkpoint_activations;
    std::int64_t consumed_samples = 0;
    for (std::int64_t it = 0; it < c.iterations; ++it) {
        shape.global_batch_size = calc.global_batch_size_at(consumed_samples);
        // Megatron-DeepSpeed's TFLOPs use the curriculum seqlen as s (training.py training_log).
        shape.seq_length = curriculum ? curriculum_step(*curriculum, it, args.model.seq_length).batch_seq_length
                                      : args.model.seq_length;
        const bool steady = shape.global_batch_size == global_batch_size &&
                            (!curriculum || curriculum->current_difficulty() >= curriculum->config().max_difficulty);
        const std::int64_t repeat = steady ? c.iterations - it : 1;
        c.tokens += repeat * shape.global_batch_size * shape.seq_length;
        c.flops += static_cast<double>(repeat) * observe::flops_per_iteration(shape);
        if (steady) break;
        consumed_samples += shape.global_batch_size;
    }
    return c;
}

}  // namespace

std::int64_t padded_vocab_size(std::int64_t vocab_size, const ModelArgs& model, std::int64_t tensor_model_parallel_size) {
    if (vocab_size <= 0) usage("the vocabulary size must be positive, got " + text(vocab_size));
    if (model.make_vocab_size_divisible_by <= 0)
        usage("--make-vocab-size-divisible-by must be positive, got " + text(model.make_vocab_size_divisible_by));
    if (model.pad_vocab_size_to) {
        const std::int64_t to = *model.pad_vocab_size_to;
        if (to < vocab_size)
            usage("--pad-vocab-size-to " + text(to) + " is smaller than the vocabulary (" + text(vocab_size) +
                  " tokens); padding can only grow it");
        if (to % model.make_vocab_size_divisible_by != 0)
            usage("--pad-vocab-size-to " + text(to) + " is not divisible by --make-vocab-size-divisible-by " +
                  text(model.make_vocab_size_divisible_by));
        return to;
    }
    const std::int64_t multiple = model.make_vocab_size_divisible_by * tensor_model_parallel_size;
    return ceil_div(vocab_size, multiple) * multiple;
}

void add_dry_run_flags(CLI::App& app, DryRunOptions& options) {
    const std::string group = "Dry run";
    app.add_flag("--dry-run", options.enabled,
                 "Print parameters, memory per GPU and training days for these flags, then exit without training")
        ->group(group);
    app.add_option_function<std::string>(
           "--dry-run-gpus", [&options](const std::string& v) { options.num_gpus = parse_count("--dry-run-gpus", v); },
           "GPUs of the planned run [default: the launcher's world size, else TP x PP]")
        ->group(group);
    app.add_option("--dry-run-tflops", options.tflops_per_gpu,
                   "Achieved TFLOPs per GPU to assume, as Megatron-DeepSpeed logs them (e.g. 45 on V100, 150 on A100)")
        ->group(group);
    app.add_option_function<std::string>(
           "--dry-run-vocab-size",
           [&options](const std::string& v) { options.vocab_size = parse_count("--dry-run-vocab-size", v); },
           "Vocabulary size before padding [default: the tokenizer's]")
        ->group(group);
    app.add_option_function<std::string>(
           "--dry-run-train-tokens",
           [&options](const std::string& v) { options.train_tokens = parse_count("--dry-run-train-tokens", v); },
           "Tokens to estimate the time for [default: what --train-iters / --train-samples consume]")
        ->group(group);
    app.add_flag_function(
           "--dry-run-fused-attention", [&options](std::int64_t) { options.attention_scores_materialized = false; },
           "Count no s x s attention scores in the activations: mds-train on a GPU runs causal attention (learned "
           "positions) through SDPA's fused kernels, which keep O(s) per head")
        ->group(group);
    app.add_option("--dry-run-gpu-memory", options.gpu_memory_gib,
                   "GiB of one GPU, for the largest GPT that fits it with and without recomputation [default: 80]")
        ->group(group);
}

double activation_bytes_per_layer(std::int64_t seq_length, std::int64_t micro_batch_size, std::int64_t hidden_size,
                                  std::int64_t num_attention_heads, std::int64_t tensor_model_parallel_size,
                                  std::int64_t bytes_per_value, bool attention_scores_materialized) {
    const auto s = static_cast<double>(seq_length);
    const auto b = static_cast<double>(micro_batch_size);
    const auto h = static_cast<double>(hidden_size);
    const auto a = static_cast<double>(num_attention_heads);
    const auto t = static_cast<double>(tensor_model_parallel_size);
    const auto e = static_cast<double>(bytes_per_value);
    // Korthikanti et al. 2022 §4.1, per layer, 16-bit values (e = 2) and 1-byte dropout masks:
    //   attention 11sbh + 5as²b: QKV input 2sbh, Q and K 4sbh, V 2sbh, output-projection input
    //     2sbh, output dropout mask sbh; softmax output 2as²b, its dropout mask as²b, dropout
    //     output 2as²b;
    //   MLP 19sbh: inputs of the two linears 2sbh + 8sbh, GeLU input 8sbh, dropout mask sbh;
    //   two layer-norm inputs 4sbh.
    // Without sequence parallelism (Megatron-DeepSpeed has none) the layer-norm inputs, the QKV and
    // first-MLP inputs and both dropout masks (10sbh) are whole on every tensor-parallel rank; the
    // rest (24sbh and the scores) is split over t.
    const double replicated = 4.0 * e + 2.0;
    const double split = 12.0 * e;
    double bytes = s * b * h * (replicated + split / t);
    if (attention_scores_materialized) bytes += (2.0 * e + 1.0) * a * s * s * b / t;
    return bytes;
}

double estimate_training_days(double tokens, double parameters, std::int64_t num_gpus, double tflops_per_gpu,
                              double flops_per_parameter_token) {
    return flops_per_parameter_token * tokens * parameters /
           (static_cast<double>(num_gpus) * tflops_per_gpu * 1e12) / 86400.0;
}

observe::ModelShape model_shape(const ModelArgs& m, std::int64_t padded_vocab) {
    observe::ModelShape shape;
    shape.num_layers = m.num_layers;
    shape.hidden_size = m.hidden_size;
    shape.ffn_hidden_size = m.ffn_hidden();
    shape.padded_vocab_size = padded_vocab;
    shape.max_position_embeddings =
        m.position_embedding_type == "absolute" ? m.max_positions() : 0;
    shape.embedding_layernorm = m.embed_layernorm;
    shape.glu_activation = m.glu_activation.has_value();
    shape.projection_size = m.kv() * m.num_attention_heads;
    return shape;
}

namespace {

// The model and parallel sizes were checked positive by validate() (resolve_train_args), which
// every caller runs first; what the dry run needs beyond that is checked here.
void check_plannable(const TrainArgs& args, const DryRunOptions& options) {
    const auto& m = args.model;
    const auto& p = args.parallel;
    const std::int64_t t = p.tensor_model_parallel_size;
    const std::int64_t pp = p.pipeline_model_parallel_size;
    const std::int64_t ffn = m.ffn_hidden();
    positive("--ffn-hidden-size", ffn);
    if (m.num_attention_heads % t != 0)
        usage("--num-attention-heads " + text(m.num_attention_heads) + " is not divisible by --tensor-model-parallel-size " +
              text(t));
    if (ffn % t != 0)
        usage("--ffn-hidden-size " + text(ffn) + " is not divisible by --tensor-model-parallel-size " + text(t));
    if (pp > m.num_layers)
        usage("--pipeline-model-parallel-size " + text(pp) + " is larger than --num-layers " + text(m.num_layers) +
              ": every stage needs a transformer layer");
    if (p.zero_stage != 0 && p.zero_stage != 1)
        usage("--zero-stage " + text(p.zero_stage) + " is not supported by mds-train: use 0 or 1");
    if (!options.vocab_size) usage("the vocabulary size is unknown: give --dry-run-vocab-size (GPT-2: 50257)");
    if (options.tflops_per_gpu && !(*options.tflops_per_gpu > 0.0 && std::isfinite(*options.tflops_per_gpu)))
        usage("--dry-run-tflops must be a positive number");
    if (options.train_tokens) positive("--dry-run-train-tokens", *options.train_tokens);
    if (!args.length.train_iters && !args.length.train_samples)
        usage("one of --train-iters and --train-samples is required");
}

// GPUs, data parallelism and batches into the report's layout fields.
void plan_layout(const TrainArgs& args, const DryRunOptions& options, DryRunReport& r) {
    const auto& o = args.optimizer;
    const auto& p = args.parallel;
    const std::int64_t t = p.tensor_model_parallel_size;
    const std::int64_t pp = p.pipeline_model_parallel_size;
    const std::string gpus_flag = options.num_gpus ? "--dry-run-gpus" : "world size";
    const std::int64_t gpus = options.num_gpus.value_or(p.world_size.value_or(t * pp));
    positive(gpus_flag, gpus);
    if (gpus % (t * pp) != 0)
        usage(gpus_flag + " " + text(gpus) + " is not divisible by --tensor-model-parallel-size " + text(t) +
              " x --pipeline-model-parallel-size " + text(pp));
    const std::int64_t dp = gpus / (t * pp);
    const std::int64_t gbs = o.global_batch_size.value_or(o.micro_batch_size * dp);
    if (gbs % (o.micro_batch_size * dp) != 0)
        usage("--global-batch-size " + text(gbs) + " is not divisible by --micro-batch-size " + text(o.micro_batch_size) +
              " x data-parallel size " + text(dp) + " (" + text(gpus) + " GPUs / TP " + text(t) + " / PP " + text(pp) +
              "); " + optim::nearest_multiples_text(gbs, o.micro_batch_size * dp) + " would divide");
    r.num_gpus = gpus;
    r.tensor_model_parallel_size = t;
    r.pipeline_model_parallel_size = pp;
    r.data_parallel_size = dp;
    r.micro_batch_size = o.micro_batch_size;
    r.global_batch_size = gbs;
    r.num_micro_batches = gbs / (o.micro_batch_size * dp);
    r.pipeline_bubble = static_cast<double>(pp - 1) / static_cast<double>(r.num_micro_batches + pp - 1);
}

// The model's sizes and parameter counts into the report.
void plan_model(const TrainArgs& args, const DryRunOptions& options, DryRunReport& r) {
    const auto& m = args.model;
    r.num_layers = m.num_layers;
    r.hidden_size = m.hidden_size;
    r.ffn_hidden_size = m.ffn_hidden();
    r.num_attention_heads = m.num_attention_heads;
    r.seq_length = m.seq_length;
    r.vocab_size = *options.vocab_size;
    r.padded_vocab_size = padded_vocab_size(r.vocab_size, m, args.parallel.tensor_model_parallel_size);
    const observe::ModelShape shape = model_shape(m, r.padded_vocab_size);
    r.parameters = observe::parameter_count(shape);
    r.parameters_without_embeddings = observe::parameter_count_without_embeddings(shape);
}

// Bytes per parameter (ZeRO paper, Rajbhandari et al. 2020 §3.1, K = 12 for mixed-precision
// Adam): 16-bit weights, fp32 master weights, momentum and variance; in fp32 the weights are the
// master copy. Gradients: fp16's in fp16; bf16's in fp32, the main gradients mds-train (as
// DeepSpeed's BF16_Optimizer) sums the micro batches into (trainer/main_grads.h; each micro
// batch's bf16 gradient lives only until it is added). ZeRO-1 partitions the optimizer states over
// data parallelism, and so does DeepSpeed's BF16_Optimizer, which bf16 gets at ZeRO stage 0 (each
// rank keeps the fp32 master and Adam moments of its 1/DP share of each flat group:
// bf16_optimizer.py). DeepSpeed's fp32 gradient partition of its fp16 ZeRO optimizer is not counted
// (tr1-13B's README counts 4-byte gradients: 18 bytes per parameter in all, before ZeRO). The flat
// groups' padding to 2 × DP (ckpt/ds_optimizer_layout.h) is left out: at most 2·DP - 1 elements per group.
void plan_precision(const TrainArgs& args, const DryRunOptions& options, DryRunReport& r) {
    const auto& o = args.optimizer;
    const auto& m = args.model;
    r.precision = o.fp16 ? "fp16" : o.bf16 ? "bf16" : "fp32";
    r.zero_stage = args.parallel.zero_stage;
    r.checkpoint_activations = m.checkpoint_activations;
    r.checkpoint_num_layers = std::max<std::int64_t>(1, m.checkpoint_num_layers);
    r.attention_scores_materialized = options.attention_scores_materialized;
    const bool mixed = o.fp16 || o.bf16;
    r.weight_bytes_per_parameter = mixed ? 2 : 4;
    r.gradient_bytes_per_parameter = o.fp16 ? 2 : 4;
    r.optimizer_bytes_per_parameter = mixed ? 12 : 8;
    r.optimizer_partitions = ckpt::ds_partitions_optimizer_states(r.zero_stage, o.bf16) ? r.data_parallel_size : 1;
    // Offloaded (docs/cpu-optimizer.md), the GPU keeps only the model's weights and gradients; the host
    // keeps the fp32 masters (a copy even in fp32), both moments and an fp32 copy of the gradients.
    r.host_optimizer = args.parallel.host_optimizer();
    if (r.host_optimizer) {
        r.host_optimizer_bytes_per_parameter = 16;
        r.optimizer_bytes_per_parameter = 0;
    }
}

// Activation bytes a stage of `stage_layers` blocks keeps with `in_flight` micro batches.
double stage_activations(const TrainArgs& args, const DryRunReport& r, std::int64_t stage_layers, std::int64_t in_flight_micro_batches,
                         double per_layer) {
    const auto& m = args.model;
    const std::int64_t e = r.weight_bytes_per_parameter;
    const auto in_flight = static_cast<double>(in_flight_micro_batches);
    if (!r.checkpoint_activations) return in_flight * static_cast<double>(stage_layers) * per_layer;
    // Full recomputation (Korthikanti Table 2, "full recompute"): only the input of each
    // checkpointed chunk of --checkpoint-num-layers layers is kept, e·s·b·h, whole on every
    // tensor-parallel rank; one chunk's full activations exist while it is recomputed.
    const std::int64_t k = std::min(r.checkpoint_num_layers, stage_layers);  // 0: a stage without blocks
    const double chunk_input = static_cast<double>(e) * static_cast<double>(m.seq_length) *
                               static_cast<double>(args.optimizer.micro_batch_size) * static_cast<double>(m.hidden_size);
    return in_flight * static_cast<double>(k > 0 ? ceil_div(stage_layers, k) : 0) * chunk_input + static_cast<double>(k) * per_layer;
}

// Pipeline stages as DeepSpeed cuts Megatron-DeepSpeed's GPTModelPipe with --pp-partition-method
// ('type:transformer' by default): the first stage holds the embedding module (word and position
// embeddings, embedding norm), the last one the final norm and a tied copy of the whole embedding
// module for the logits. The first stage
// of DeepSpeed's 1F1B TrainSchedule keeps min(PP, micro batches) forward passes in flight, the
// last one a single one, which also holds the fp32 logits of the cross entropy (4·s·b·V/t,
// Korthikanti §4.1). Embedding dropout mask and final norm input (~3sbh) are left out.
void plan_stages(const TrainArgs& args, DryRunReport& r) {
    const auto& m = args.model;
    const std::int64_t t = r.tensor_model_parallel_size, pp = r.pipeline_model_parallel_size;
    const bool mixed = args.optimizer.fp16 || args.optimizer.bf16;
    const std::int64_t positions =
        m.position_embedding_type == "absolute" ? m.max_positions() : 0;
    const auto sharded = ckpt::gpt_shard_parameters(m.hidden_size, r.ffn_hidden_size, r.padded_vocab_size, positions,
                                                    m.embed_layernorm, t, m.kv() * m.num_attention_heads,
                                                    m.glu_activation.has_value());
    std::vector<ckpt::GptStageCut> cuts;
    try {
        cuts = ckpt::gpt_stage_cuts(m.num_layers, static_cast<int>(pp), args.parallel.pp_partition_method.value_or("type:transformer"),
                                    mixed, sharded.embedding, sharded.block, sharded.final_norm);
    } catch (const Error& err) {
        usage(std::string("--pp-partition-method: ") + err.what());
    }
    const double per_layer = activation_bytes_per_layer(m.seq_length, r.micro_batch_size, m.hidden_size, m.num_attention_heads, t,
                                                        r.weight_bytes_per_parameter, r.attention_scores_materialized);
    const double logits = 4.0 * static_cast<double>(m.seq_length) * static_cast<double>(r.micro_batch_size) *
                          static_cast<double>(r.padded_vocab_size) / static_cast<double>(t);
    const auto make_stage = [&](std::string name, std::int64_t stage, bool first, bool last) {
        DryRunStage st;
        st.name = std::move(name);
        st.stage = stage;
        const auto& cut = cuts[static_cast<std::size_t>(stage)];
        st.num_layers = cut.end_block - cut.first_block;
        st.in_flight_micro_batches = first ? std::min(pp, r.num_micro_batches) : 1;
        st.parameters = st.num_layers * sharded.block + sharded.embedding + (last ? sharded.final_norm : 0);
        st.weights_bytes = st.parameters * r.weight_bytes_per_parameter;
        st.gradients_bytes = st.parameters * r.gradient_bytes_per_parameter;
        st.optimizer_bytes = ceil_div(st.parameters * r.optimizer_bytes_per_parameter, r.optimizer_partitions);
        st.host_optimizer_bytes = ceil_div(st.parameters * r.host_optimizer_bytes_per_parameter, r.optimizer_partitions);
        const double activations = stage_activations(args, r, st.num_layers, st.in_flight_micro_batches, per_layer) + (last ? logits : 0.0);
        st.activations_bytes = static_cast<std::int64_t>(std::ceil(activations));
        st.total_bytes = st.weights_bytes + st.gradients_bytes + st.optimizer_bytes + st.activations_bytes;
        return st;
    };
    if (pp == 1) {
        r.stages.push_back(make_stage("only", 0, true, true));
    } else {
        r.stages.push_back(make_stage("first", 0, true, false));
        r.stages.push_back(make_stage("last", pp - 1, false, true));
    }
    r.largest_stage = r.stages.size() == 2 && r.stages[1].total_bytes > r.stages[0].total_bytes ? 1 : 0;
}

// Iterations, tokens, FLOPs and days into the report.
void plan_time(const TrainArgs& args, const DryRunOptions& options, DryRunReport& r) {
    const auto& o = args.optimizer;
    const std::int64_t dp = r.data_parallel_size, gbs = r.global_batch_size;
    const Consumption c = consumption(args, dp, gbs, r.padded_vocab_size);
    // Said, not refused: a ramp-up start below micro batch × DP works for a run resumed past it
    // (tr1-13B ramped up on 16 nodes and resumed on 64), and the plan may be for that part.
    if (o.rampup_batch_size)
        r.rampup_problem = optim::NumMicroBatchesCalculator(gbs, o.micro_batch_size, dp, o.rampup_batch_size)
                               .remaining_batch_sizes_problem(0, 0, c.iterations);
    r.curriculum = args.curriculum && args.curriculum->enabled;
    r.train_tokens_given = options.train_tokens.has_value();
    r.train_tokens = options.train_tokens.value_or(c.tokens);
    // Other token counts run the same schedule for longer or shorter: iterations and FLOPs scale.
    const double scale = c.tokens > 0 ? static_cast<double>(r.train_tokens) / static_cast<double>(c.tokens) : 0.0;
    r.train_iters = r.train_tokens_given ? std::llround(static_cast<double>(c.iterations) * scale) : c.iterations;
    r.total_flops = c.flops * scale;
    // Megatron-DeepSpeed's TFLOPs count the recomputed forward (factor 4 of 24·…) only with
    // --checkpoint-activations; the per-parameter factor follows so that a TFLOPs figure read from
    // the log line gives a consistent estimate: 2 × (1 + 1 + 2) = 8, or 2 × (1 + 2) = 6.
    r.flops_per_parameter_token = r.checkpoint_activations ? 8.0 : 6.0;
    if (options.tflops_per_gpu) {
        r.tflops_per_gpu = options.tflops_per_gpu;
        r.days = estimate_training_days(static_cast<double>(r.train_tokens), static_cast<double>(r.parameters), r.num_gpus,
                                        *options.tflops_per_gpu, r.flops_per_parameter_token);
        r.days_exact = r.total_flops / (static_cast<double>(r.num_gpus) * *options.tflops_per_gpu * 1e12) / 86400.0;
    }
}

}  // namespace

namespace {

// The memory of the largest stage for `args` (no time, no checks beyond what the shape needs).
std::optional<DryRunReport> plan_memory(const TrainArgs& args, const DryRunOptions& options) {
    const auto& m = args.model;
    const std::int64_t t = args.parallel.tensor_model_parallel_size;
    if (m.num_layers < args.parallel.pipeline_model_parallel_size || m.num_attention_heads % t != 0 || m.ffn_hidden() % t != 0 ||
        m.hidden_size % m.num_attention_heads != 0)
        return std::nullopt;
    DryRunReport r;
    plan_layout(args, options, r);
    plan_model(args, options, r);
    plan_precision(args, options, r);
    plan_stages(args, r);
    return r;
}

// Brown et al. 2020 Table 2.1 (GPT-3's eight sizes) and GPT-2 1.5B: (name, layers, hidden, heads).
struct GptShape {
    const char* name;
    std::int64_t layers, hidden, heads;
};
constexpr GptShape kGptShapes[] = {
    {"GPT-3 125M", 12, 768, 12},  {"GPT-3 350M", 24, 1024, 16}, {"GPT-3 760M", 24, 1536, 16},  {"GPT-3 1.3B", 24, 2048, 16},
    {"GPT-2 1.5B", 48, 1600, 25}, {"GPT-3 2.7B", 32, 2560, 32}, {"GPT-3 6.7B", 32, 4096, 32},  {"GPT-3 13B", 40, 5120, 40},
    {"GPT-3 175B", 96, 12288, 96},
};

void plan_fits(const TrainArgs& args, const DryRunOptions& options, DryRunReport& r) {
    r.gpu_memory_gib = options.gpu_memory_gib;
    const double budget = 0.9 * options.gpu_memory_gib * 1073741824.0;
    for (const bool recompute : {false, true}) {
        DryRunFit fit;
        fit.recompute = recompute;
        TrainArgs a = args;
        a.model.checkpoint_activations = recompute;
        // The table's shapes, each with Megatron's defaults for the rest (FFN 4h, head size h / heads).
        TrainArgs shaped = a;
        shaped.model.ffn_hidden_size.reset();
        shaped.model.kv_channels.reset();
        for (const auto& g : kGptShapes) {
            shaped.model.num_layers = g.layers;
            shaped.model.hidden_size = g.hidden;
            shaped.model.num_attention_heads = g.heads;
            const auto plan = plan_memory(shaped, options);
            if (!plan) continue;
            const auto bytes = plan->stages[plan->largest_stage].total_bytes;
            if (static_cast<double>(bytes) > budget || (!fit.shape.empty() && plan->parameters <= fit.parameters)) continue;
            fit.shape = g.name;
            fit.num_layers = g.layers;
            fit.hidden_size = g.hidden;
            fit.num_attention_heads = g.heads;
            fit.parameters = plan->parameters;
            fit.per_gpu_bytes = bytes;
        }
        // The deepest model of the flags' width: memory grows with the layers, so bisect them.
        std::int64_t lo = 0, hi = 1;
        const auto fits_with = [&](std::int64_t layers) -> std::optional<DryRunReport> {
            a.model.num_layers = layers;
            auto plan = plan_memory(a, options);
            if (!plan || static_cast<double>(plan->stages[plan->largest_stage].total_bytes) > budget) return std::nullopt;
            return plan;
        };
        // Up to kDryRunMaxLayers: with the optimizer states in host memory (--cpu-optimizer) a layer costs the
        // GPU so little that the search would otherwise run on for millions of layers.
        while (hi <= kDryRunMaxLayers && fits_with(hi)) lo = hi, hi *= 2;
        hi = std::min(hi, kDryRunMaxLayers + 1);
        while (hi - lo > 1) {
            const std::int64_t mid = lo + (hi - lo) / 2;
            (fits_with(mid) ? lo : hi) = mid;
        }
        if (lo > 0) {
            const auto plan = fits_with(lo);
            fit.deepest_layers = lo;
            fit.deepest_parameters = plan->parameters;
            fit.deepest_per_gpu_bytes = plan->stages[plan->largest_stage].total_bytes;
        }
        r.fits.push_back(fit);
    }
}

}  // namespace

DryRunReport plan_dry_run(const TrainArgs& args, const DryRunOptions& options) {
    check_plannable(args, options);
    if (!(options.gpu_memory_gib > 0.0 && std::isfinite(options.gpu_memory_gib)))
        usage("--dry-run-gpu-memory must be a positive number of GiB");
    DryRunReport r;
    plan_layout(args, options, r);
    plan_model(args, options, r);
    plan_precision(args, options, r);
    plan_stages(args, r);
    plan_time(args, options, r);
    plan_fits(args, options, r);
    return r;
}

namespace {

// The report's sections, in the order format_dry_run prints them.
void format_model(std::ostream& out, const DryRunReport& r) {
    out << "mds-train dry run (nothing is trained)\n\n";
    out << "model\n";
    out << "  " << r.num_layers << " layers, hidden " << r.hidden_size << ", FFN " << r.ffn_hidden_size << ", "
        << r.num_attention_heads << " heads, sequence " << r.seq_length << "\n";
    out << "  vocabulary " << grouped(r.vocab_size) << ", padded to " << grouped(r.padded_vocab_size) << "\n";
    out << "  parameters " << grouped(r.parameters) << " (" << format_fixed(static_cast<double>(r.parameters) / 1e9, 2)
        << " B), without embeddings " << grouped(r.parameters_without_embeddings) << " ("
        << format_fixed(static_cast<double>(r.parameters_without_embeddings) / 1e9, 2) << " B)\n\n";
}

void format_layout(std::ostream& out, const DryRunReport& r) {
    out << "layout\n";
    out << "  " << r.num_gpus << " GPUs = TP " << r.tensor_model_parallel_size << " x PP " << r.pipeline_model_parallel_size
        << " x DP " << r.data_parallel_size << "\n";
    out << "  micro batch " << r.micro_batch_size << ", global batch " << r.global_batch_size << " = "
        << r.num_micro_batches << " micro batches x DP " << r.data_parallel_size << "\n";
    if (r.rampup_problem) out << "  started from scratch on these GPUs: " << *r.rampup_problem << "\n";
    // Megatron's rank order (dist/layout.h): TP fastest, then DP, then PP.
    const std::int64_t per_stage = r.tensor_model_parallel_size * r.data_parallel_size;
    out << "  ranks: " << per_stage << " per stage (TP " << r.tensor_model_parallel_size << " x DP " << r.data_parallel_size
        << "); a replica's TP ranks are neighbours, DP peers " << r.tensor_model_parallel_size << " apart, stages "
        << per_stage << " apart\n   ";
    const std::int64_t pp_size = r.pipeline_model_parallel_size;
    for (std::int64_t s = 0; s < pp_size; ++s) {
        if (pp_size > 4 && s == 2) {
            out << " ...,";
            s = pp_size - 2;
            continue;
        }
        out << " stage " << s << ": ranks " << s * per_stage << "-" << (s + 1) * per_stage - 1 << (s + 1 < pp_size ? "," : "\n");
    }
    if (pp_size > 1)
        out << "  pipeline bubble (1F1B): (PP - 1) / (micro batches + PP - 1) = " << pp_size - 1 << " / "
            << r.num_micro_batches + pp_size - 1 << " = " << format_fixed(100.0 * r.pipeline_bubble, 1) << "% of each step idle\n";
    else
        out << "  no pipeline: no bubble\n";
    out << "  " << r.precision << (r.precision == "fp32" ? "" : " mixed precision") << ", ZeRO stage " << r.zero_stage
        << ", ";
    if (r.checkpoint_activations)
        out << "activation checkpointing every " << r.checkpoint_num_layers << " layer"
            << (r.checkpoint_num_layers == 1 ? "" : "s") << "\n\n";
    else
        out << "no activation checkpointing\n\n";
}

void format_memory(std::ostream& out, const DryRunReport& r) {
    out << "memory per GPU (GiB)\n";
    char line[256];
    std::snprintf(line, sizeof line, "  %-10s %7s %15s %9s %10s %10s %12s %9s\n", "stage", "layers", "params/GPU",
                  "weights", "gradients", "optimizer", "activations", "total");
    out << line;
    for (const auto& st : r.stages) {
        const std::string name = st.name + " (" + std::to_string(st.stage) + ")";
        std::snprintf(line, sizeof line, "  %-10s %7lld %15s %9s %10s %10s %12s %9s\n", name.c_str(),
                      static_cast<long long>(st.num_layers), grouped(st.parameters).c_str(), gib(st.weights_bytes).c_str(),
                      gib(st.gradients_bytes).c_str(), gib(st.optimizer_bytes).c_str(),
                      gib(st.activations_bytes).c_str(), gib(st.total_bytes).c_str());
        out << line;
    }
    const DryRunStage& big = r.stages[r.largest_stage];
    out << "  per GPU: " << gib(big.total_bytes) << " GiB"
        << (r.stages.size() > 1 ? " (" + big.name + " stage)" : std::string()) << "\n";
    out << "  bytes per parameter: weights " << r.weight_bytes_per_parameter << ", gradients "
        << r.gradient_bytes_per_parameter << ", optimizer " << r.optimizer_bytes_per_parameter;
    if (r.optimizer_partitions > 1 && !r.host_optimizer)
        out << " / DP " << r.data_parallel_size << (r.zero_stage == 1 ? " (ZeRO-1)" : " (BF16 optimizer)");
    if (r.host_optimizer) out << " (on the host)";
    out << "\n";
    if (r.host_optimizer) {
        out << "  host memory per rank (--cpu-optimizer): " << gib(big.host_optimizer_bytes)
            << " GiB of optimizer states: fp32 master weights, Adam moments, fp32 gradient copy, "
            << r.host_optimizer_bytes_per_parameter << " bytes per parameter";
        if (r.optimizer_partitions > 1)
            out << " / DP " << r.data_parallel_size << (r.zero_stage == 1 ? " (ZeRO-1)" : " (BF16 optimizer)");
        out << (r.stages.size() > 1 ? " (" + big.name + " stage)" : std::string()) << "\n";
    }
    out << "  activations (Korthikanti et al. 2022): " << (r.checkpoint_activations ? "full recomputation, " : "")
        << r.stages.front().in_flight_micro_batches << " micro batch"
        << (r.stages.front().in_flight_micro_batches == 1 ? "" : "es") << " in flight on the first stage"
        << (r.attention_scores_materialized ? "" : ", fused attention (no s^2 scores)") << "\n";
    out << "  not counted: CUDA context, communication buffers, temporaries, allocator fragmentation\n\n";
}

void format_time(std::ostream& out, const DryRunReport& r) {
    out << "time\n";
    out << "  " << (r.train_tokens_given ? "about " : "") << grouped(r.train_iters) << " iterations, "
        << grouped(r.train_tokens) << " tokens" << (r.train_tokens_given ? " (--dry-run-train-tokens)" : "")
        << (r.curriculum ? ", sequence-length curriculum included" : "") << "\n";
    if (r.days) {
        out << "  at " << format_fixed(*r.tflops_per_gpu, 1) << " TFLOPs per GPU on " << r.num_gpus
            << " GPUs: " << format_fixed(*r.days, 2) << " days (" << format_fixed(r.flops_per_parameter_token, 0)
            << " x tokens x parameters); " << format_fixed(*r.days_exact, 2)
            << " days with Megatron's full FLOPs formula\n";
    } else {
        out << "  training days: give --dry-run-tflops (the TFLOPs per GPU to expect)\n";
    }
}

void format_fits(std::ostream& out, const DryRunReport& r) {
    out << "\nlargest GPT that fits one GPU of " << format_fixed(r.gpu_memory_gib, 0) << " GiB (estimate within 90%; micro batch "
        << r.micro_batch_size << ", sequence " << r.seq_length << ", " << r.precision << ", TP " << r.tensor_model_parallel_size
        << " x PP " << r.pipeline_model_parallel_size << ", DP " << r.data_parallel_size << ")\n";
    for (const auto& f : r.fits) {
        out << "  " << (f.recompute ? "with recomputation:   " : "without recomputation:") << " ";
        if (f.shape.empty())
            out << "none of GPT-3's sizes";
        else
            out << f.shape << " (" << f.num_layers << " layers x " << f.hidden_size << ", " << format_fixed(static_cast<double>(f.parameters) / 1e9, 2)
                << " B parameters, " << gib(f.per_gpu_bytes) << " GiB)";
        out << "; at hidden " << r.hidden_size << ": ";
        if (f.deepest_layers == 0)
            out << "not one layer\n";
        else
            out << f.deepest_layers << (f.deepest_layers >= kDryRunMaxLayers ? " layers or more" : " layers") << " ("
                << format_fixed(static_cast<double>(f.deepest_parameters) / 1e9, 2) << " B parameters, "
                << gib(f.deepest_per_gpu_bytes) << " GiB)\n";
    }
}

}  // namespace

std::string format_dry_run(const DryRunReport& r) {
    std::ostringstream out;
    format_model(out, r);
    format_layout(out, r);
    format_memory(out, r);
    format_time(out, r);
    format_fits(out, r);
    return out.str();
}

nlohmann::json dry_run_json(const DryRunReport& r) {
    using nlohmann::json;
    json stages = json::array();
    for (const auto& st : r.stages)
        stages.push_back({{"name", st.name},
                          {"stage", st.stage},
                          {"num_layers", st.num_layers},
                          {"in_flight_micro_batches", st.in_flight_micro_batches},
                          {"parameters", st.parameters},
                          {"weights_bytes", st.weights_bytes},
                          {"gradients_bytes", st.gradients_bytes},
                          {"optimizer_bytes", st.optimizer_bytes},
                          {"host_optimizer_bytes", st.host_optimizer_bytes},
                          {"activations_bytes", st.activations_bytes},
                          {"total_bytes", st.total_bytes}});
    const auto optional_number = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
    return {
        {"model",
         {{"num_layers", r.num_layers},
          {"hidden_size", r.hidden_size},
          {"ffn_hidden_size", r.ffn_hidden_size},
          {"num_attention_heads", r.num_attention_heads},
          {"seq_length", r.seq_length},
          {"vocab_size", r.vocab_size},
          {"padded_vocab_size", r.padded_vocab_size},
          {"parameters", r.parameters},
          {"parameters_without_embeddings", r.parameters_without_embeddings}}},
        {"layout",
         {{"gpus", r.num_gpus},
          {"tensor_model_parallel_size", r.tensor_model_parallel_size},
          {"pipeline_model_parallel_size", r.pipeline_model_parallel_size},
          {"data_parallel_size", r.data_parallel_size},
          {"micro_batch_size", r.micro_batch_size},
          {"global_batch_size", r.global_batch_size},
          {"num_micro_batches", r.num_micro_batches},
          {"ranks_per_stage", r.tensor_model_parallel_size * r.data_parallel_size},
          {"pipeline_bubble", r.pipeline_bubble},
          {"rampup_problem", r.rampup_problem ? json(*r.rampup_problem) : json(nullptr)},
          {"precision", r.precision},
          {"zero_stage", r.zero_stage},
          {"optimizer_partitions", r.optimizer_partitions},
          {"host_optimizer", r.host_optimizer},
          {"checkpoint_activations", r.checkpoint_activations},
          {"checkpoint_num_layers", r.checkpoint_num_layers},
          {"attention_scores_materialized", r.attention_scores_materialized}}},
        {"memory",
         {{"bytes_per_parameter",
           {{"weights", r.weight_bytes_per_parameter},
            {"gradients", r.gradient_bytes_per_parameter},
            {"optimizer", r.optimizer_bytes_per_parameter},
            {"host_optimizer", r.host_optimizer_bytes_per_parameter}}},
          {"stages", stages},
          {"largest_stage", r.stages[r.largest_stage].name},
          {"per_gpu_bytes", r.stages[r.largest_stage].total_bytes}}},
        {"time",
         {{"train_iters", r.train_iters},
          {"train_tokens", r.train_tokens},
          {"train_tokens_given", r.train_tokens_given},
          {"curriculum", r.curriculum},
          {"flops_per_parameter_token", r.flops_per_parameter_token},
          {"total_flops", r.total_flops},
          {"tflops_per_gpu", optional_number(r.tflops_per_gpu)},
          {"days", optional_number(r.days)},
          {"days_exact", optional_number(r.days_exact)}}},
        {"fits", [&] {
             json fits = {{"gpu_memory_gib", r.gpu_memory_gib}, {"budget_share", 0.9}};
             for (const auto& f : r.fits)
                 fits[f.recompute ? "with_recomputation" : "without_recomputation"] = {
                     {"shape", f.shape.empty() ? json(nullptr) : json(f.shape)},
                     {"num_layers", f.num_layers},
                     {"hidden_size", f.hidden_size},
                     {"num_attention_heads", f.num_attention_heads},
                     {"parameters", f.parameters},
                     {"per_gpu_bytes", f.per_gpu_bytes},
                     {"deepest_layers_at_hidden_size", f.deepest_layers},
                     {"deepest_parameters", f.deepest_parameters},
                     {"deepest_per_gpu_bytes", f.deepest_per_gpu_bytes}};
             return fits;
         }()},
    };
}

}  // namespace mds::flags
