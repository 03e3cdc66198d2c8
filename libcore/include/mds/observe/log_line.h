// Megatron-DeepSpeed's training and validation log lines, field for field as
// bigscience-workshop/Megatron-DeepSpeed (HEAD 8387ae17) megatron/training.py prints them in
// training_log and evaluate_and_print_results, so that the scripts BigScience used on main_log.txt
// keep working. Numbers are formatted as Python's str.format does (`{:8d}`, `{:.3E}`, `{:.6E}`,
// nan without a sign); mds's own fields go after Megatron's, at the end of the line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mds::observe {

// One `iteration N/M | ...` line. Optional fields are printed only when set, as Megatron prints
// them only under the matching condition.
struct TrainingLogLine {
    std::int64_t iteration = 0;
    std::int64_t train_iters = 0;        // --train-iters
    std::int64_t consumed_samples = 0;   // args.consumed_train_samples
    std::int64_t consumed_tokens = 0;    // args.consumed_train_tokens
    double seconds_per_iteration = 0;    // interval time / iterations in the interval
    double learning_rate = 0;
    std::int64_t global_batch_size = 0;
    // (key, average over the advanced iterations of the interval), in insertion order; Megatron
    // prints a key only when its average is > 0 (so a NaN loss is not printed).
    std::vector<std::pair<std::string, double>> losses;
    std::optional<double> loss_scale;             // BS HEAD prints it only with --fp16
    std::optional<double> grad_norm;
    std::optional<double> num_zeros;              // --log-num-zeros-in-grad
    std::optional<double> params_norm;            // --log-params-norm
    std::optional<std::int64_t> curriculum_seqlen;  // --curriculum-learning
    std::int64_t skipped_iterations = 0;
    std::int64_t nan_iterations = 0;
    double samples_per_second = 0;
    double tflops = 0;                            // tflops_per_gpu() (flops.h)

    // Megatron-LM v2 / early BS (tr1-13B era): `elapsed time per iteration (ms): {:.1f}` and no
    // `samples per second` / `TFLOPs` fields. Off: the BS HEAD format (`(s): {:.2f}`) of BLOOM's logs.
    bool legacy_ms_format = false;

    // mds extras, appended after Megatron's fields when set.
    std::optional<double> tokens_per_second;
    std::optional<double> mfu;          // model_flops_utilization (a fraction), when the device's peak is known
    std::optional<double> energy_kwh;   // cumulative energy of the run, as emissions.csv's energy_consumed
    std::optional<double> co2_kg;       // cumulative emissions, as emissions.csv's emissions
};

// The line without a trailing newline, starting with a space as Megatron's does.
std::string format_training_log_line(const TrainingLogLine& line);

// Megatron's GPU memory report (megatron/utils.py report_memory), which BMD prints once, after the
// first logged iteration, on every rank of data-parallel rank 0: "[Rank R] (after N iterations) memory
// (MB) | allocated: A | max allocated: M | reserved: X | max reserved: Y", bytes / 2^20 printed as
// Python prints floats. `when` is the part in parentheses.
std::string format_memory_report(int rank, std::string_view when, std::int64_t allocated, std::int64_t max_allocated,
                                 std::int64_t reserved, std::int64_t max_reserved);

// The validation block: a line of dashes, ` validation loss at <prefix> | <key> value: {:.6E} |
// <key> PPL: {:.6E} | ` (PPL = exp(min(20, loss))), and the dashes again; the dash lines are one
// longer than the middle line. `prefix` is what Megatron passes, e.g. "iteration 490". With a
// `data_group_name` (several validation sets) the line starts `<name> loss at` instead.
// Returns the three lines, each ending in '\n'.
std::string format_validation_block(std::string_view prefix,
                                    const std::vector<std::pair<std::string, double>>& losses,
                                    std::optional<std::string_view> data_group_name = std::nullopt);

// Python's format(value, spec) for the float presentation types Megatron uses: `precision` digits
// after the point, 'f' or 'E' (anything else is 'f'); NaN is printed without a sign ("nan" / "NAN"), as Python does.
std::string py_format_float(double value, int precision, char type);

}  // namespace mds::observe
