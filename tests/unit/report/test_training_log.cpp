// main_log.txt parser: mds-train's lines (written by observe::format_training_log_line itself),
// Megatron-DeepSpeed's lines with DeepSpeed's output, timer blocks and warnings between them, the
// older `(ms)` format, validation blocks, ***ALERT and checkpoint-load lines, and a partial last line.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "mds/observe/log_line.h"
#include "mds/report/training_log.h"

using namespace mds::report;

TEST_CASE("mds-train's iteration line reads back field by field") {
    mds::observe::TrainingLogLine l;
    l.iteration = 20;
    l.train_iters = 100;
    l.consumed_samples = 160;
    l.consumed_tokens = 5120;
    l.seconds_per_iteration = 0.25;
    l.learning_rate = 1.5e-4;
    l.global_batch_size = 8;
    l.losses = {{"lm loss", 6.25}};
    l.loss_scale = 4096;
    l.grad_norm = 1.5;
    l.samples_per_second = 32;
    l.tflops = 0.5;
    l.tokens_per_second = 1024;
    l.energy_kwh = 1.25e-3;
    l.co2_kg = 2.5e-4;
    const auto r = parse_iteration_line(mds::observe::format_training_log_line(l));
    REQUIRE(r);
    CHECK(r->iteration == 20);
    CHECK(r->train_iters == 100);
    CHECK(r->consumed_samples == 160);
    CHECK(r->consumed_tokens == 5120);
    CHECK(*r->seconds_per_iteration == doctest::Approx(0.25));
    CHECK(*r->learning_rate == 1.5e-4);
    CHECK(*r->global_batch_size == 8);
    REQUIRE(r->losses.size() == 1);
    CHECK(r->losses[0].first == "lm loss");
    CHECK(r->losses[0].second == 6.25);
    CHECK(*r->loss_scale == 4096);
    CHECK(*r->grad_norm == 1.5);
    CHECK(*r->samples_per_second == 32);
    CHECK(*r->tflops == 0.5);
    CHECK(*r->tokens_per_second == 1024);
    CHECK(*r->energy_kwh == 1.25e-3);
    CHECK(*r->co2_kg == 2.5e-4);
    CHECK_FALSE(r->params_norm);
}

TEST_CASE("a Megatron-DeepSpeed log with other lines between") {
    // Lines as BigScience's main_log.txt has them (training.py's formats; DeepSpeed and timers around).
    const std::string text =
        "using world size: 8, data-parallel-size: 2, tensor-model-parallel size: 2, pipeline-model-parallel size: 2\n"
        "[2022-03-11 10:00:01,123] [INFO] [logging.py:68:log_dist] [Rank 0] step=10, skipped=0, lr=[5.9e-05], mom=[(0.9, 0.95)]\n"
        " iteration       10/  292968 | consumed samples:          160 | consumed tokens:       327680 | elapsed time per "
        "iteration (s): 3.21 | learning rate: 5.859E-05 | global batch size:    16 | lm loss: 1.098765E+01 | loss scale: "
        "4096.0 | grad norm: 12.345 | number of skipped iterations:   0 | number of nan iterations:   0 | samples per second: "
        "4.984 | TFLOPs: 101.23 |\n"
        "time (ms) | forward-compute: 1021.33 | backward-compute: 2011.10 | optimizer: 20.05 | batch-generator: 1.20\n"
        "/usr/lib/python3/warnings.py:12: UserWarning: something\r\n"
        "------------------------------------------------------------------------------------------------\n"
        " validation loss at iteration 10 | lm loss value: 1.050000E+01 | lm loss PPL: 3.631550E+04 | \n"
        "------------------------------------------------------------------------------------------------\n"
        "[default3]: iteration       20/  292968 | consumed samples:          320 | consumed tokens:       655360 | elapsed "
        "time per iteration (s): 3.20 | learning rate: 1.172E-04 | global batch size:    16 | lm loss: 9.500000E+00 | "
        "grad norm: nan | number of skipped iterations:   1 | number of nan iterations:   0 |\n"
        " iteration       30/  292968 | consumed samples:          480 | consumed tok";  // the job is still writing
    const TrainingLog log = parse_training_log(text, "main_log.txt");
    REQUIRE(log.iterations.size() == 2);
    CHECK(log.partial_bytes > 0);
    const auto& a = log.iterations[0];
    CHECK(a.iteration == 10);
    CHECK(a.line == 3);
    CHECK(a.consumed_tokens == 327680);
    CHECK(*a.learning_rate == 5.859e-05);
    CHECK(a.losses[0].second == 1.098765e+01);
    CHECK(*a.loss_scale == 4096.0);
    CHECK(*a.tflops == 101.23);
    CHECK(*a.seconds_per_iteration == 3.21);
    const auto& b = log.iterations[1];
    CHECK(b.iteration == 20);  // behind a launcher's "[default3]:" prefix
    CHECK(std::isnan(*b.grad_norm));
    CHECK_FALSE(b.loss_scale);
    CHECK(*b.skipped_iterations == 1);
    REQUIRE(log.validations.size() == 1);
    CHECK(log.validations[0].set == "validation");
    CHECK(log.validations[0].iteration == 10);
    CHECK(log.validations[0].key == "lm loss");
    CHECK(log.validations[0].value == 10.5);
    CHECK(*log.validations[0].ppl == 3.631550e+04);
    CHECK(log.events.empty());
}

TEST_CASE("the older (ms) format, data-group validation sets, alerts and resumes") {
    const std::string text =
        " iteration      100/    1000 | consumed samples:        51200 | consumed tokens:    104857600 | elapsed time per "
        "iteration (ms): 1520.5 | learning rate: 6.000E-05 | global batch size:   512 | lm loss: 4.000000E+00 | loss scale: "
        "65536.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
        " valid-en loss at iteration 100 | lm loss value: 4.100000E+00 | lm loss PPL: 6.034029E+01 | \n"
        "***ALERT: loss spike at iteration 140: loss 9.0000 is 2.25x the recent trend 4.0000 (median of the last 5 logged losses)\n"
        "mds-train:   successfully loaded checkpoint from /ckpt at iteration 150\n"
        " validation loss at the end of training for val data | lm loss value: 3.900000E+00 | lm loss PPL: 4.939450E+01 | \n";
    const TrainingLog log = parse_training_log(text, "x");
    REQUIRE(log.iterations.size() == 1);
    CHECK(*log.iterations[0].seconds_per_iteration == doctest::Approx(1.5205));
    CHECK_FALSE(log.iterations[0].tflops);
    REQUIRE(log.validations.size() == 2);
    CHECK(log.validations[0].set == "valid-en");
    CHECK(log.validations[0].iteration == 100);
    CHECK(log.validations[1].iteration == 100);  // "at the end of training": the last logged iteration
    CHECK(log.validations[1].value == 3.9);
    REQUIRE(log.events.size() == 2);
    CHECK(log.events[0].kind == LogEventKind::alert);
    CHECK(log.events[0].iteration == 140);
    CHECK(log.events[0].text.starts_with("***ALERT: loss spike"));
    CHECK(log.events[1].kind == LogEventKind::resume);
    CHECK(log.events[1].iteration == 150);
    CHECK(log.partial_bytes == 0);
}

TEST_CASE("lines that only look like log lines are skipped") {
    CHECK_FALSE(parse_iteration_line("an iteration of nothing"));
    CHECK_FALSE(parse_iteration_line(" iteration abc/10 | lm loss: 1 |"));
    CHECK_FALSE(parse_iteration_line(" iteration 5/ | x"));
    CHECK_FALSE(parse_validation_line(" validation loss at iteration x | lm loss value: 1 |"));
    CHECK_FALSE(parse_validation_line("a loss at iteration 5 | nothing here |"));
    const auto r = parse_iteration_line(" iteration 5/10 | lm loss: not-a-number | learning rate: 1E-3 |");
    REQUIRE(r);
    CHECK(r->losses.empty());
    CHECK(*r->learning_rate == 1e-3);
    const TrainingLog empty = parse_training_log("", "e");
    CHECK(empty.lines == 0);
    CHECK(empty.iterations.empty());
}
