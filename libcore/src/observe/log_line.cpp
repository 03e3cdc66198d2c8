// Megatron-DeepSpeed log lines (bigscience-workshop/Megatron-DeepSpeed megatron/training.py).
#include "mds/observe/log_line.h"

#include <cmath>
#include <cstdio>

#include "mds/util/text.h"  // python_float_repr

namespace mds::observe {

namespace {

std::string py_format_int(std::int64_t v, int width) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%*lld", width, static_cast<long long>(v));
    return buf;
}

}  // namespace

std::string py_format_float(double value, int precision, char type) {
    // glibc prints "-nan" for a NaN with the sign bit set; Python never signs NaN.
    if (std::isnan(value)) value = std::fabs(value);
    char buf[512];
    if (type == 'E')
        std::snprintf(buf, sizeof buf, "%.*E", precision, value);
    else
        std::snprintf(buf, sizeof buf, "%.*f", precision, value);
    return buf;
}

std::string format_training_log_line(const TrainingLogLine& l) {
    std::string s;
    s += " iteration " + py_format_int(l.iteration, 8) + "/" + py_format_int(l.train_iters, 8) + " |";
    s += " consumed samples: " + py_format_int(l.consumed_samples, 12) + " |";
    s += " consumed tokens: " + py_format_int(l.consumed_tokens, 12) + " |";
    if (l.legacy_ms_format)
        s += " elapsed time per iteration (ms): " + py_format_float(l.seconds_per_iteration * 1000.0, 1, 'f') + " |";
    else
        s += " elapsed time per iteration (s): " + py_format_float(l.seconds_per_iteration, 2, 'f') + " |";
    s += " learning rate: " + py_format_float(l.learning_rate, 3, 'E') + " |";
    s += " global batch size: " + py_format_int(l.global_batch_size, 5) + " |";
    for (const auto& [key, avg] : l.losses)
        if (avg > 0.0) s += " " + key + ": " + py_format_float(avg, 6, 'E') + " |";
    if (l.loss_scale) s += " loss scale: " + py_format_float(*l.loss_scale, 1, 'f') + " |";
    if (l.grad_norm) s += " grad norm: " + py_format_float(*l.grad_norm, 3, 'f') + " |";
    if (l.num_zeros) s += " num zeros: " + py_format_float(*l.num_zeros, 1, 'f') + " |";
    if (l.params_norm) s += " params norm: " + py_format_float(*l.params_norm, 3, 'f') + " |";
    if (l.curriculum_seqlen) s += " curriculum seqlen: " + py_format_int(*l.curriculum_seqlen, 5) + " |";
    s += " number of skipped iterations: " + py_format_int(l.skipped_iterations, 3) + " |";
    s += " number of nan iterations: " + py_format_int(l.nan_iterations, 3) + " |";
    if (!l.legacy_ms_format) {
        s += " samples per second: " + py_format_float(l.samples_per_second, 3, 'f') + " |";
        s += " TFLOPs: " + py_format_float(l.tflops, 2, 'f') + " |";
    }
    if (l.tokens_per_second) s += " tokens per second: " + py_format_float(*l.tokens_per_second, 1, 'f') + " |";
    if (l.mfu) s += " MFU: " + py_format_float(*l.mfu * 100.0, 2, 'f') + "% |";
    if (l.energy_kwh) s += " energy (kWh): " + py_format_float(*l.energy_kwh, 3, 'E') + " |";
    if (l.co2_kg) s += " CO2 (kg): " + py_format_float(*l.co2_kg, 3, 'E') + " |";
    return s;
}

std::string format_memory_report(int rank, std::string_view when, std::int64_t allocated, std::int64_t max_allocated,
                                 std::int64_t reserved, std::int64_t max_reserved) {
    const auto mb = [](std::int64_t bytes) { return python_float_repr(static_cast<double>(bytes) / (1024.0 * 1024.0)); };
    return "[Rank " + std::to_string(rank) + "] (" + std::string(when) + ") memory (MB) | allocated: " + mb(allocated) +
           " | max allocated: " + mb(max_allocated) + " | reserved: " + mb(reserved) + " | max reserved: " + mb(max_reserved);
}

std::string format_validation_block(std::string_view prefix,
                                    const std::vector<std::pair<std::string, double>>& losses,
                                    std::optional<std::string_view> data_group_name) {
    std::string s = data_group_name ? std::string(*data_group_name) + " loss at " : std::string("validation loss at ");
    s += prefix;
    s += " | ";
    for (const auto& [key, loss] : losses) {
        s += key + " value: " + py_format_float(loss, 6, 'E') + " | ";
        // Python's min(20, loss) keeps 20 when the comparison is false, so a NaN loss gives exp(20).
        const double capped = loss < 20.0 ? loss : 20.0;
        s += key + " PPL: " + py_format_float(std::exp(capped), 6, 'E') + " | ";
    }
    const std::string dashes(s.size() + 1, '-');
    return dashes + "\n" + s + "\n" + dashes + "\n";
}

}  // namespace mds::observe
