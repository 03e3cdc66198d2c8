// Reading a training's main_log.txt back: the iteration lines and validation blocks that mds-train
// and Megatron-DeepSpeed print (observe/log_line.h writes them; bigscience-workshop/Megatron-DeepSpeed
// megatron/training.py training_log / evaluate_and_print_results), the ***ALERT lines of the loss
// detector (observe/loss_alert.h) and the "successfully loaded checkpoint ... at iteration N" line
// each resumed job prints. Everything else in a log (DeepSpeed's lines, `time (ms)` blocks,
// warnings, tracebacks) is skipped; a last line without its newline (a log still being written) is
// left out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mds::report {

// One `iteration N/M | key: value | ...` line. Fields the line does not carry stay unset.
struct IterationRecord {
    std::int64_t iteration = 0;
    std::int64_t train_iters = 0;
    std::optional<std::int64_t> consumed_samples;
    std::optional<std::int64_t> consumed_tokens;
    std::optional<double> seconds_per_iteration;  // `(s)`, or `(ms)` / 1000 in the older format
    std::optional<double> learning_rate;
    std::optional<double> global_batch_size;
    std::vector<std::pair<std::string, double>> losses;  // keys ending in "loss" ("lm loss"), in line order
    std::optional<double> loss_scale;
    std::optional<double> grad_norm;
    std::optional<double> params_norm;
    std::optional<double> skipped_iterations;
    std::optional<double> nan_iterations;
    std::optional<double> samples_per_second;
    std::optional<double> tflops;
    std::optional<double> tokens_per_second;
    std::optional<double> energy_kwh;
    std::optional<double> co2_kg;
    std::size_t line = 0;  // 1-based line number in its file
};

// One `<set> loss at iteration N | <key> value: V | <key> PPL: P |` line.
struct ValidationRecord {
    std::string set = "validation";      // "validation", or the data group name
    std::optional<std::int64_t> iteration;  // for "at the end of training ..." lines: the last logged iteration
    bool end_of_training = false;        // the prefix was not "iteration N" (Megatron's final evaluation)
    std::string key;                     // "lm loss"
    double value = 0;
    std::optional<double> ppl;
    std::size_t line = 0;
};

enum class LogEventKind { alert, resume };

// An ***ALERT line (iteration: the one it names) or a job that loaded a checkpoint (iteration: the
// checkpoint's, where the new job's training starts).
struct LogEvent {
    LogEventKind kind = LogEventKind::alert;
    std::int64_t iteration = 0;
    std::string text;  // the line, without what precedes "***ALERT" / the tool prefix
    std::size_t line = 0;
};

struct TrainingLog {
    std::string source;  // file name, for messages
    std::vector<IterationRecord> iterations;  // file order
    std::vector<ValidationRecord> validations;
    std::vector<LogEvent> events;
    std::size_t lines = 0;          // complete lines read
    std::size_t partial_bytes = 0;  // bytes of an unterminated last line, left out
};

// Parses one iteration line; nullopt when `line` is not one (no `iteration N/M` head). Fields
// whose value does not parse as a number are left unset.
std::optional<IterationRecord> parse_iteration_line(std::string_view line);
// Parses one validation line; nullopt when `line` is not one.
std::optional<std::vector<ValidationRecord>> parse_validation_line(std::string_view line);

// The whole text of a log. Never throws on content: what is not understood is skipped.
TrainingLog parse_training_log(std::string_view text, std::string source);
// Reads and parses a log file; throws mds::Error naming the path when it cannot be read.
TrainingLog read_training_log(const std::string& path);

}  // namespace mds::report
