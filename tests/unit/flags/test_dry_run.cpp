// mds-train --dry-run (mds/flags/dry_run.h): the training-time formula against BigScience's
// published figures (bigscience-workshop/bigscience math/README.md, train/tr1-13B-base/README.md,
// Narayanan et al. 2021 §5.1), Megatron's vocabulary padding, the activation formula against
// Korthikanti et al. 2022 as printed, and the memory of tr1-13B's layout worked out by hand.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mds/observe/flops.h"
#include "mds/flags/curriculum.h"
#include "mds/flags/dry_run.h"
#include "mds/flags/train_args.h"
#include "mds/util/error.h"
#include "flag_parse.h"

using namespace mds::flags;
using mds::flags_test::parse;

namespace {

// tr1-13B-round1.slurm: 64 nodes × 4 V100, TP 2, PP 4, fp16, activation checkpointing, ZeRO-1;
// GPT-2 vocabulary. The time is for the README's 300B tokens at 45 TFLOPs. (The script's ramp-up
// "16 16 5_000_000" cannot start on 256 GPUs — 16 samples over DP 32 — so it is left out here and
// checked on 128 GPUs below.)
std::vector<std::string> tr1_argv() {
    return {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "4", "--num-layers", "40",
            "--hidden-size", "5120", "--ffn-hidden-size", "20480", "--num-attention-heads", "32", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "1024",
            "--train-samples", "300_000_000", "--fp16", "--checkpoint-activations", "--lr", "1e-4", "--zero-stage", "1",
            "--dry-run", "--dry-run-tflops", "45", "--dry-run-vocab-size", "50257", "--dry-run-train-tokens",
            "300_000_000_000"};
}

std::vector<std::string> tiny_argv() {
    return {"--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "128",
            "--max-position-embeddings", "128", "--micro-batch-size", "2", "--train-iters", "100", "--lr", "1e-3"};
}

std::string error_of(std::vector<std::string> extra, std::int64_t world = 1, std::optional<std::int64_t> vocab = 1000) {
    TrainArgs args;
    DryRunOptions options;
    auto argv = tiny_argv();
    argv.insert(argv.end(), extra.begin(), extra.end());
    parse(args, options, argv, world);
    if (vocab && !options.vocab_size) options.vocab_size = vocab;
    try {
        plan_dry_run(args, options);
    } catch (const mds::UsageError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("dry run: the training-time formula gives BigScience's published figures") {
    // tr1-13B README and math/README: Btokens=300; Bmodel=13; n_gpus=256; Tflops=45 → "31.35 days".
    CHECK(estimate_training_days(300e9, 13e9, 256, 45) == doctest::Approx(31.35).epsilon(0.0002));
    // math/README second example: 8*300*200_000_000/(350*150)/(3600*24) → "105.82 days".
    CHECK(estimate_training_days(300e9, 200e9, 350, 150) == doctest::Approx(105.82).epsilon(0.0001));
    // Narayanan et al. 2021 §5.1: GPT-3 175B, 300B tokens, 1024 A100 at 140 TFLOPs → "34 days".
    CHECK(estimate_training_days(300e9, 175e9, 1024, 140) == doctest::Approx(33.9).epsilon(0.001));
}

TEST_CASE("dry run: Megatron's vocabulary padding") {
    ModelArgs m;  // --make-vocab-size-divisible-by 128
    CHECK(padded_vocab_size(50257, m, 1) == 50304);
    CHECK(padded_vocab_size(50257, m, 2) == 50432);
    CHECK(padded_vocab_size(50257, m, 4) == 50688);
    CHECK(padded_vocab_size(50304, m, 1) == 50304);
    m.pad_vocab_size_to = 250880;  // BLOOM (tr11-176B-ml): 250680 tokens
    CHECK(padded_vocab_size(250680, m, 4) == 250880);
    CHECK_THROWS_WITH_AS(padded_vocab_size(251000, m, 4),
                         "--pad-vocab-size-to 250880 is smaller than the vocabulary (251000 tokens); padding can only grow it",
                         mds::UsageError);
    m.pad_vocab_size_to = 250900;
    CHECK_THROWS_WITH_AS(padded_vocab_size(250680, m, 4),
                         "--pad-vocab-size-to 250900 is not divisible by --make-vocab-size-divisible-by 128",
                         mds::UsageError);
}

TEST_CASE("dry run: activations per layer are Korthikanti et al.'s Table 2") {
    // GPT-3 175B shape (a = 96, h = 12288, s = 2048), b = 1: sbh(34 + 5as/h) without parallelism,
    // sbh(10 + 24/t + 5as/(ht)) with tensor parallelism t = 8.
    const double s = 2048, b = 1, h = 12288, a = 96;
    CHECK(activation_bytes_per_layer(2048, 1, 12288, 96, 1, 2, true) == doctest::Approx(s * b * h * (34 + 5 * a * s / h)));
    CHECK(activation_bytes_per_layer(2048, 1, 12288, 96, 8, 2, true) ==
          doctest::Approx(s * b * h * (10 + 24.0 / 8 + 5 * a * s / (h * 8))));
    // Flash-style attention keeps no s² scores: the paper's selective-recompute term sbh(10 + 24/t).
    CHECK(activation_bytes_per_layer(2048, 1, 12288, 96, 8, 2, false) == doctest::Approx(s * b * h * (10 + 24.0 / 8)));
    // fp32 activations: 4-byte values, 1-byte masks → sbh(66 + 9as/h).
    CHECK(activation_bytes_per_layer(2048, 1, 12288, 96, 1, 4, true) == doctest::Approx(s * b * h * (66 + 9 * a * s / h)));
}

TEST_CASE("dry run: tr1-13B — parameters, memory per GPU, 300B tokens at 45 TFLOPs") {
    TrainArgs args;
    DryRunOptions options;
    parse(args, options, tr1_argv(), 256);
    CHECK(options.enabled);
    const DryRunReport r = plan_dry_run(args, options);
    CHECK(r.padded_vocab_size == 50432);
    // 40 × (12h² + 13h) + V·h + P·h + 2h with h = 5120, V = 50432, P = 2048.
    CHECK(r.parameters == 12'854'282'240);
    CHECK(r.parameters_without_embeddings == 12'585'584'640);
    CHECK(r.data_parallel_size == 32);
    CHECK(r.num_micro_batches == 32);
    CHECK(r.precision == "fp16");

    // Per GPU of a TP 2 shard: a layer is (4h² + 2hf + 3h + f)/2 + 6h = 157,335,040 parameters;
    // the embedding module V·h/2 + P·h = 139,591,680; the last stage adds the final norm 2h.
    REQUIRE(r.stages.size() == 2);
    const auto& first = r.stages[0];
    const auto& last = r.stages[1];
    CHECK(first.name == "first");
    CHECK(last.stage == 3);
    CHECK(first.num_layers == 10);
    CHECK(first.parameters == 10 * 157'335'040LL + 139'591'680LL);
    CHECK(last.parameters == first.parameters + 10240);
    CHECK(first.weights_bytes == 2 * first.parameters);
    CHECK(first.gradients_bytes == 2 * first.parameters);
    CHECK(first.optimizer_bytes == 12 * first.parameters / 32);  // ZeRO-1 over DP 32
    // Full recomputation: each of the 10 layers keeps its input 2sbh per micro batch in flight
    // (4 = PP on the first stage), plus one layer's sbh(10 + 24/2) + 5as²b/2 during its recompute;
    // the last stage holds one micro batch and the fp32 logits 4sbV/2.
    const std::int64_t sbh = 2048LL * 5120;
    const std::int64_t layer = sbh * 22 + 5LL * 32 * 2048 * 2048 / 2;
    CHECK(first.in_flight_micro_batches == 4);
    CHECK(first.activations_bytes == 4 * 10 * 2 * sbh + layer);
    CHECK(last.in_flight_micro_batches == 1);
    CHECK(last.activations_bytes == 10 * 2 * sbh + layer + 4LL * 2048 * 50432 / 2);
    CHECK(r.largest_stage == 0);
    CHECK(first.total_bytes ==
          first.weights_bytes + first.gradients_bytes + first.optimizer_bytes + first.activations_bytes);

    // The README's formula with the exact parameter count instead of "13": 31.00 days, not 31.35.
    CHECK(r.train_tokens == 300'000'000'000);
    REQUIRE(r.days);
    CHECK(*r.days == doctest::Approx(30.995086).epsilon(1e-6));
    CHECK(r.flops_per_parameter_token == 8.0);
    // Megatron's full formula adds attention (s/6h) and logits (V/16lh) FLOPs: about 8 % more.
    REQUIRE(r.days_exact);
    CHECK(*r.days_exact > *r.days * 1.05);
    CHECK(*r.days_exact < *r.days * 1.10);

    CHECK(r.train_iters == 300'000'000'000 / (1024 * 2048));  // the schedule scaled to the given tokens

    // With the ramp-up on 128 GPUs: what --train-samples 300M consumes, every ramp step and the
    // final batches, 2048 tokens per sample.
    TrainArgs ramp;
    DryRunOptions ramp_options;
    auto ramp_argv = tr1_argv();
    ramp_argv.resize(ramp_argv.size() - 2);  // no --dry-run-train-tokens
    ramp_argv.insert(ramp_argv.end(), {"--rampup-batch-size", "16", "16", "5_000_000"});
    parse(ramp, ramp_options, ramp_argv, 128);
    const DryRunReport full = plan_dry_run(ramp, ramp_options);
    CHECK(full.data_parallel_size == 16);
    CHECK(full.train_iters == make_num_micro_batches_calculator(ramp).train_iters_for_samples(300'000'000));
    CHECK(full.train_iters > r.train_iters);
    CHECK(full.train_tokens % 2048 == 0);
    CHECK(full.train_tokens <= 300'000'000LL * 2048);
    CHECK(full.train_tokens > (300'000'000LL - 1024) * 2048);

    const std::string text = format_dry_run(r);
    CHECK(text.find("parameters 12,854,282,240 (12.85 B)") != std::string::npos);
    CHECK(text.find("256 GPUs = TP 2 x PP 4 x DP 32") != std::string::npos);
    CHECK(text.find("vocabulary 50,257, padded to 50,432") != std::string::npos);
    // tr1-13B: 32 micro batches per step through 4 stages.
    CHECK(text.find("ranks: 64 per stage (TP 2 x DP 32)") != std::string::npos);
    CHECK(text.find("stage 0: ranks 0-63, stage 1: ranks 64-127, stage 2: ranks 128-191, stage 3: ranks 192-255\n") !=
          std::string::npos);
    CHECK(text.find("pipeline bubble (1F1B): (PP - 1) / (micro batches + PP - 1) = 3 / 35 = 8.6% of each step idle") !=
          std::string::npos);
    CHECK(text.find("at 45.0 TFLOPs per GPU on 256 GPUs: 31.00 days (8 x tokens x parameters)") != std::string::npos);
    CHECK(text.back() == '\n');

    const nlohmann::json j = dry_run_json(r);
    CHECK(j["model"]["parameters"] == 12'854'282'240);
    CHECK(j["layout"]["data_parallel_size"] == 32);
    CHECK(j["layout"]["ranks_per_stage"] == 64);
    CHECK(j["layout"]["pipeline_bubble"].get<double>() == doctest::Approx(3.0 / 35.0));
    CHECK(j["memory"]["stages"].size() == 2);
    CHECK(j["memory"]["largest_stage"] == "first");
    CHECK(j["memory"]["per_gpu_bytes"] == first.total_bytes);
    CHECK(j["time"]["days"].get<double>() == doctest::Approx(30.995086).epsilon(1e-6));
}

TEST_CASE("dry run: one stage holds the whole model; fp32 and ZeRO stage 0 accounting") {
    TrainArgs args;
    DryRunOptions options;
    auto argv = tiny_argv();
    argv.insert(argv.end(), {"--zero-stage", "0", "--dry-run-vocab-size", "1000"});
    parse(args, options, argv, 1);
    const DryRunReport r = plan_dry_run(args, options);
    REQUIRE(r.stages.size() == 1);
    const auto& only = r.stages[0];
    CHECK(only.name == "only");
    CHECK(r.padded_vocab_size == 1024);
    CHECK(only.parameters == r.parameters);  // TP 1, PP 1: everything, tied embeddings once
    CHECK(r.precision == "fp32");
    CHECK(only.weights_bytes == 4 * r.parameters);
    CHECK(only.gradients_bytes == 4 * r.parameters);
    CHECK(only.optimizer_bytes == 8 * r.parameters);
    // No recomputation: all 4 layers for one micro batch (b = 2) in fp32, plus the fp32 logits.
    const double per_layer = activation_bytes_per_layer(128, 2, 64, 4, 1, 4, true);
    CHECK(only.activations_bytes == static_cast<std::int64_t>(4 * per_layer + 4.0 * 128 * 2 * 1024));
    CHECK(r.train_tokens == 100 * 2 * 128);
    CHECK(r.flops_per_parameter_token == 6.0);
    CHECK_FALSE(r.days);
    CHECK(format_dry_run(r).find("training days: give --dry-run-tflops") != std::string::npos);
    CHECK(dry_run_json(r)["time"]["days"].is_null());

    // The same model over 8 GPUs of data parallelism with ZeRO-1: only the optimizer shrinks.
    TrainArgs z;
    DryRunOptions zo;
    auto zargv = tiny_argv();
    zargv.insert(zargv.end(), {"--bf16", "--dry-run-vocab-size", "1000", "--dry-run-gpus", "8"});
    parse(z, zo, zargv, 8);
    const DryRunReport zr = plan_dry_run(z, zo);
    CHECK(zr.data_parallel_size == 8);
    CHECK(zr.stages[0].weights_bytes == 2 * zr.parameters);
    CHECK(zr.stages[0].gradients_bytes == 4 * zr.parameters);  // bf16: the fp32 main gradients, whole on every rank
    CHECK(zr.stages[0].optimizer_bytes == (12 * zr.parameters + 7) / 8);
}

TEST_CASE("dry run: a sequence-length curriculum shortens the early steps") {
    TrainArgs args;
    DryRunOptions options;
    auto argv = tiny_argv();
    argv.insert(argv.end(), {"--dry-run-vocab-size", "1000", "--dry-run-tflops", "100"});
    parse(args, options, argv, 1);
    CurriculumLearningConfig c;
    c.enabled = true;
    c.min_difficulty = 16;
    c.max_difficulty = 128;
    c.total_curriculum_step = 40;
    c.difficulty_step = 8;
    args.curriculum = c;
    const DryRunReport r = plan_dry_run(args, options);
    CurriculumScheduler s(c);
    std::int64_t tokens = 0;
    double flops = 0;
    mds::observe::ThroughputShape shape;
    shape.num_layers = 4;
    shape.hidden_size = 64;
    shape.padded_vocab_size = 1024;
    shape.global_batch_size = 2;
    for (std::int64_t it = 0; it < 100; ++it) {
        shape.seq_length = s.update_difficulty(it + 1);
        tokens += 2 * shape.seq_length;
        flops += mds::observe::flops_per_iteration(shape);
    }
    CHECK(r.curriculum);
    CHECK(r.train_tokens == tokens);
    CHECK(r.train_tokens < 100 * 2 * 128);
    CHECK(r.total_flops == doctest::Approx(flops));
}

TEST_CASE("dry run: inputs it cannot plan with are usage errors naming the flag") {
    CHECK(error_of({}, 1, std::nullopt) == "the vocabulary size is unknown: give --dry-run-vocab-size (GPT-2: 50257)");
    CHECK(error_of({"--dry-run-gpus", "6", "--tensor-model-parallel-size", "4"}, 4) ==
          "--dry-run-gpus 6 is not divisible by --tensor-model-parallel-size 4 x --pipeline-model-parallel-size 1");
    CHECK(error_of({"--dry-run-gpus", "8", "--global-batch-size", "12"}, 1) ==
          "--global-batch-size 12 is not divisible by --micro-batch-size 2 x data-parallel size 8 (8 GPUs / TP 1 / PP 1); "
          "16 would divide");
    CHECK(error_of({"--dry-run-tflops", "0"}) == "--dry-run-tflops must be a positive number");
    CHECK(error_of({"--pipeline-model-parallel-size", "8"}, 8) ==
          "--pipeline-model-parallel-size 8 is larger than --num-layers 4: every stage needs a transformer layer");
    CHECK(error_of({"--tensor-model-parallel-size", "8"}, 8) ==
          "--num-attention-heads 4 is not divisible by --tensor-model-parallel-size 8");
    CHECK(error_of({"--dry-run-vocab-size", "0"}) == "the vocabulary size must be positive, got 0");
    CHECK(error_of({"--dry-run-train-tokens", "0"}) == "--dry-run-train-tokens must be positive, got 0");
}

TEST_CASE("dry run: the largest GPT that fits one GPU, with and without recomputation") {
    TrainArgs args;
    DryRunOptions options;
    // bench/gpu's 124M run: GPT-2 small, micro batch 16, T = 1024, bf16, fused attention.
    parse(args, options,
          {"--num-layers", "12", "--hidden-size", "768", "--num-attention-heads", "12", "--seq-length", "1024",
           "--max-position-embeddings", "1024", "--micro-batch-size", "16", "--train-iters", "10", "--lr", "6e-4", "--bf16",
           "--dry-run", "--dry-run-vocab-size", "50257", "--dry-run-fused-attention"},
          1);
    const DryRunReport r = plan_dry_run(args, options);
    REQUIRE(r.fits.size() == 2);
    const double budget = 0.9 * 80.0 * 1073741824.0;
    for (const auto& f : r.fits) {
        // The shape named fits, and its memory is what a dry run of that shape itself says.
        REQUIRE_FALSE(f.shape.empty());
        TrainArgs shaped;
        DryRunOptions so;
        parse(shaped, so,
              {"--num-layers", std::to_string(f.num_layers), "--hidden-size", std::to_string(f.hidden_size),
               "--num-attention-heads", std::to_string(f.num_attention_heads), "--seq-length", "1024",
               "--max-position-embeddings", "1024", "--micro-batch-size", "16", "--train-iters", "10", "--lr", "6e-4",
               "--bf16", "--dry-run", "--dry-run-vocab-size", "50257", "--dry-run-fused-attention"},
              1);
        if (f.recompute) shaped.model.checkpoint_activations = true;
        const DryRunReport own = plan_dry_run(shaped, so);
        CHECK(own.stages[own.largest_stage].total_bytes == f.per_gpu_bytes);
        CHECK(static_cast<double>(f.per_gpu_bytes) <= budget);
        CHECK(own.parameters == f.parameters);
        // One layer more at the flags' width does not fit; the deepest does.
        CHECK(static_cast<double>(f.deepest_per_gpu_bytes) <= budget);
        TrainArgs deeper = args;
        deeper.model.num_layers = f.deepest_layers + 1;
        deeper.model.checkpoint_activations = f.recompute;
        const DryRunReport more = plan_dry_run(deeper, options);
        CHECK(static_cast<double>(more.stages[more.largest_stage].total_bytes) > budget);
    }
    // Recomputation keeps only each layer's input: more fits.
    CHECK(r.fits[1].parameters >= r.fits[0].parameters);
    CHECK(r.fits[1].deepest_layers > 2 * r.fits[0].deepest_layers);
    CHECK(format_dry_run(r).find("largest GPT that fits one GPU of 80 GiB") != std::string::npos);
    CHECK(dry_run_json(r)["fits"]["with_recomputation"]["shape"] == r.fits[1].shape);
    // A smaller GPU fits less; a nonsense size is a usage error.
    options.gpu_memory_gib = 16;
    const DryRunReport small = plan_dry_run(args, options);
    CHECK(small.fits[0].deepest_layers < r.fits[0].deepest_layers);
    options.gpu_memory_gib = 0;
    CHECK_THROWS_AS(plan_dry_run(args, options), mds::UsageError);
}
