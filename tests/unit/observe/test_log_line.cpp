// Megatron-DeepSpeed log lines: expected strings produced by the format code of
// bigscience-workshop/Megatron-DeepSpeed (HEAD 8387ae17) megatron/training.py run in Python; TFLOPs
// and parameter counts against BLOOM-176B and GPT-2 figures.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "mds/observe/flops.h"
#include "mds/observe/log_line.h"

using namespace mds::observe;

namespace {

ThroughputShape bloom_176b() {
    ThroughputShape s;
    s.num_layers = 70;
    s.hidden_size = 14336;
    s.padded_vocab_size = 250880;
    s.seq_length = 2048;
    s.global_batch_size = 2048;
    s.checkpoint_activations = true;
    return s;
}

}  // namespace

TEST_CASE("log line: BLOOM-176B style (bf16, no loss scale)") {
    TrainingLogLine l;
    l.iteration = 85376;
    l.train_iters = 95000;
    l.consumed_samples = 174850048;
    l.consumed_tokens = 358092898304;
    l.seconds_per_iteration = 104.70;
    l.learning_rate = 6e-06;
    l.global_batch_size = 2048;
    l.losses = {{"lm loss", 2.2612345}};
    l.grad_norm = 0.1234567;
    l.samples_per_second = 2048 / 104.70;
    l.tflops = tflops_per_gpu(bloom_176b(), 104.70, 384);
    CHECK(format_training_log_line(l) ==
          " iteration    85376/   95000 | consumed samples:    174850048 | consumed tokens: 358092898304 | elapsed "
          "time per iteration (s): 104.70 | learning rate: 6.000E-06 | global batch size:  2048 | lm loss: "
          "2.261235E+00 | grad norm: 0.123 | number of skipped iterations:   0 | number of nan iterations:   0 | "
          "samples per second: 19.561 | TFLOPs: 149.76 |");
}

TEST_CASE("log line: every optional field") {
    TrainingLogLine l;
    l.iteration = 490;
    l.train_iters = 311541;
    l.consumed_samples = 15680;
    l.consumed_tokens = 32112640;
    l.seconds_per_iteration = 1.23456;
    l.learning_rate = 1.2345e-4;
    l.global_batch_size = 32;
    l.losses = {{"lm loss", 1.2345678}};
    l.loss_scale = 4096.0;
    l.grad_norm = 1.5e3;
    l.num_zeros = 12.0;
    l.params_norm = 245.6789;
    l.curriculum_seqlen = 128;
    l.skipped_iterations = 1;
    l.nan_iterations = 2;
    l.samples_per_second = 25.92;
    l.tflops = 45.678;
    const std::string megatron =
        " iteration      490/  311541 | consumed samples:        15680 | consumed tokens:     32112640 | elapsed time "
        "per iteration (s): 1.23 | learning rate: 1.234E-04 | global batch size:    32 | lm loss: 1.234568E+00 | loss "
        "scale: 4096.0 | grad norm: 1500.000 | num zeros: 12.0 | params norm: 245.679 | curriculum seqlen:   128 | "
        "number of skipped iterations:   1 | number of nan iterations:   2 | samples per second: 25.920 | TFLOPs: "
        "45.68 |";
    CHECK(format_training_log_line(l) == megatron);

    l.tokens_per_second = 53084.16;
    l.energy_kwh = 12.3456;
    l.co2_kg = 0.69183;
    CHECK(format_training_log_line(l) ==
          megatron + " tokens per second: 53084.2 | energy (kWh): 1.235E+01 | CO2 (kg): 6.918E-01 |");
}

TEST_CASE("log line: NaN, inf, zero losses, wide counters") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    TrainingLogLine l;
    l.iteration = 7;
    l.train_iters = 10;
    l.consumed_samples = 1;
    l.consumed_tokens = 2;
    l.seconds_per_iteration = 0.005;
    l.learning_rate = nan;
    l.global_batch_size = 1;
    l.losses = {{"lm loss", nan}, {"other", 0.0}};  // neither printed: Megatron prints averages > 0
    l.loss_scale = inf;
    l.grad_norm = -nan;  // Python prints NaN without a sign
    l.skipped_iterations = 100;
    l.nan_iterations = 1000;
    l.samples_per_second = inf;
    l.tflops = 0.0;
    CHECK(format_training_log_line(l) ==
          " iteration        7/      10 | consumed samples:            1 | consumed tokens:            2 | elapsed time "
          "per iteration (s): 0.01 | learning rate: NAN | global batch size:     1 | loss scale: inf | grad norm: nan | "
          "number of skipped iterations: 100 | number of nan iterations: 1000 | samples per second: inf | TFLOPs: 0.00 |");
}

TEST_CASE("log line: legacy Megatron-LM v2 format (elapsed ms, no throughput fields)") {
    TrainingLogLine l;
    l.iteration = 490;
    l.train_iters = 311541;
    l.consumed_samples = 15680;
    l.consumed_tokens = 32112640;
    l.seconds_per_iteration = 1.23456;
    l.learning_rate = 1.2345e-4;
    l.global_batch_size = 32;
    l.losses = {{"lm loss", 1.2345678}};
    l.loss_scale = 4096.0;
    l.legacy_ms_format = true;
    CHECK(format_training_log_line(l) ==
          " iteration      490/  311541 | consumed samples:        15680 | consumed tokens:     32112640 | elapsed time "
          "per iteration (ms): 1234.6 | learning rate: 1.234E-04 | global batch size:    32 | lm loss: 1.234568E+00 | "
          "loss scale: 4096.0 | number of skipped iterations:   0 | number of nan iterations:   0 |");
}

TEST_CASE("validation block") {
    CHECK(format_validation_block("iteration 490", {{"lm loss", 2.345678}}) ==
          "----------------------------------------------------------------------------------------------\n"
          "validation loss at iteration 490 | lm loss value: 2.345678E+00 | lm loss PPL: 1.044035E+01 | \n"
          "----------------------------------------------------------------------------------------------\n");
    // Several validation sets: the set's name replaces "validation"; PPL is capped at exp(20), and
    // Python's min(20, nan) is 20.
    const std::string block = format_validation_block(
        "iteration 5", {{"lm loss", std::numeric_limits<double>::quiet_NaN()}, {"x", 25.0}}, "wiki");
    const std::string middle =
        "wiki loss at iteration 5 | lm loss value: NAN | lm loss PPL: 4.851652E+08 | x value: 2.500000E+01 | x PPL: "
        "4.851652E+08 | ";
    CHECK(block == std::string(middle.size() + 1, '-') + "\n" + middle + "\n" + std::string(middle.size() + 1, '-') + "\n");
}

TEST_CASE("flops: BLOOM-176B hardware TFLOPs") {
    // Python: (24*4*b*s*l*h**2) * (1 + s/(6h) + V/(16 l h)) = 6.021189556492042e+18; / (104.70 * 384 * 1e12)
    CHECK(flops_per_iteration(bloom_176b()) == doctest::Approx(6.021189556492042e18).epsilon(1e-15));
    CHECK(tflops_per_gpu(bloom_176b(), 104.70, 384) == doctest::Approx(149.76295259501458).epsilon(1e-14));
    auto model_flops = bloom_176b();
    model_flops.checkpoint_activations = false;
    CHECK(flops_per_iteration(model_flops) == doctest::Approx(6.021189556492042e18 * 3 / 4).epsilon(1e-15));
    auto glu = bloom_176b();
    glu.glu_activation = true;
    CHECK(flops_per_iteration(glu) == doctest::Approx(6.021189556492042e18 * 32 / 24).epsilon(1e-15));
}

TEST_CASE("parameter counts") {
    // GPT-2 small as Hugging Face counts it (tied embeddings, vocab 50257, 1024 positions): 124,439,808.
    ModelShape gpt2{.num_layers = 12, .hidden_size = 768, .ffn_hidden_size = 3072, .padded_vocab_size = 50257,
                    .max_position_embeddings = 1024};
    CHECK(parameter_count(gpt2) == 124439808);
    CHECK(parameter_count_without_embeddings(gpt2) == 124439808 - (50257 + 1024) * 768);
    // BLOOM-176B: 176,247,271,424 parameters (bigscience/bloom model card).
    ModelShape bloom{.num_layers = 70, .hidden_size = 14336, .ffn_hidden_size = 4 * 14336,
                     .padded_vocab_size = 250880, .max_position_embeddings = 0, .embedding_layernorm = true};
    CHECK(parameter_count(bloom) == 176247271424);
    // 12 l h^2 + 13 l h + V h + P h + 2h for f = 4h without GLU.
    const std::int64_t l = 12, h = 768;
    CHECK(parameter_count(gpt2) == 12 * l * h * h + 13 * l * h + 50257 * h + 1024 * h + 2 * h);
}

TEST_CASE("MFU: model FLOPs over the peak, the forward counted once even with recomputation") {
    ThroughputShape s = bloom_176b();
    // BLOOM-176B at 104.70 s per iteration on 384 A100s: 149.76 hardware TFLOPs (4 passes), so 3/4 of
    // that in model FLOPs, over the A100's 312 dense bf16 TFLOP/s.
    CHECK(model_flops_utilization(s, 104.70, 384, 312.0) == doctest::Approx(149.76295259501458 * 0.75 / 312.0).epsilon(1e-12));
    s.checkpoint_activations = false;
    CHECK(model_flops_utilization(s, 104.70, 384, 312.0) == doctest::Approx(tflops_per_gpu(s, 104.70, 384) / 312.0));
    TrainingLogLine l;
    l.mfu = 0.36;
    CHECK(format_training_log_line(l).find(" MFU: 36.00% |") != std::string::npos);
}

TEST_CASE("GPU peaks by product name") {
    CHECK(gpu_peak_tflops("NVIDIA H100 80GB HBM3", true) == doctest::Approx(989.4));
    CHECK(gpu_peak_tflops("NVIDIA H100 PCIe", true) == doctest::Approx(756.5));
    CHECK(gpu_peak_tflops("NVIDIA H200", true) == doctest::Approx(989.4));
    CHECK(gpu_peak_tflops("NVIDIA A100-SXM4-80GB", true) == doctest::Approx(312.0));
    CHECK(gpu_peak_tflops("NVIDIA A100-SXM4-80GB", false) == doctest::Approx(19.5));
    CHECK(gpu_peak_tflops("NVIDIA A10G", true) == doctest::Approx(70.0));  // not the A10's row
    CHECK(gpu_peak_tflops("NVIDIA L40S", true) == doctest::Approx(362.1));
    CHECK(gpu_peak_tflops("NVIDIA L40", true) == doctest::Approx(181.0));   // not the L4's
    CHECK(gpu_peak_tflops("Tesla V100-SXM2-32GB", true) == doctest::Approx(125.0));
    CHECK(!gpu_peak_tflops("NVIDIA GeForce GTX 1080", true));
    CHECK(!gpu_peak_tflops("", true));
}

TEST_CASE("memory report: Megatron's report_memory line") {
    // Python: "[Rank {}] {}".format(0, '(after 10 iterations)' + ' memory (MB)' + ' | allocated: {}'.format(
    // 3 * 2**20 / 2**20) ...) with max allocated 1.5 MiB + 1 byte and reserved 2 GiB.
    CHECK(format_memory_report(0, "after 10 iterations", 3 << 20, (3 << 19) + 1, std::int64_t{2} << 30, std::int64_t{2} << 30) ==
          "[Rank 0] (after 10 iterations) memory (MB) | allocated: 3.0 | max allocated: 1.5000009536743164 | reserved: 2048.0 | "
          "max reserved: 2048.0");
}
