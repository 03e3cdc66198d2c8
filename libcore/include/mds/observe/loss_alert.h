// Loss-spike and NaN alerts for mds-train: a detector fed the logged loss of each log interval,
// which returns a one-line `***ALERT: ...` message (the prefix of BigScience's slurm-status alerts,
// specs/ops.md) when the loss becomes NaN/Inf or jumps well above its recent trend; and the runner
// of --alert-command, which hands that message to a shell command without stalling training.
//
// The message also names the data of the log interval behind it (AlertData: iterations, consumed
// samples, the mds-sample-text command that prints them; docs/incidents.md).
//
// Trend: the median of the last `window` finite logged losses. A median rather than an EMA because
// a spike must not drag the trend up with it (a spike shorter than half the window leaves the
// median where it was, so the interval after a spike is judged against the same trend), and
// because on a falling curve the median lags above the current loss, which makes false alerts
// during the fast initial drop impossible. Spike: loss >= spike_ratio × trend, judged once at least
// min_history losses were seen. One alert per spike: after one, the next needs the loss to have
// come back below rearm_ratio × trend first. A loss that stays high becomes the new trend after
// window/2 intervals and is not alerted on again; a slow drift upwards is not a spike either.
// NaN and ±Inf alert every time they are logged and never enter the trend.
#pragma once

#include <sys/types.h>  // pid_t

#include <CLI/CLI.hpp>  // CLI::App

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mds::observe {

struct LossAlertConfig {
    // Logged losses the trend is the median of. Default 20. --alert-loss-window.
    std::int64_t window = 20;
    // A loss at least this many times the trend alerts. Default 1.5 (BigScience's tr8-104B spikes
    // went from ~3 to 6-7; the interval-to-interval noise of a logged loss is a few percent).
    // --alert-loss-spike-ratio.
    double spike_ratio = 1.5;
    // Logged losses needed before a spike is judged (NaN/Inf alert from the first). Default 5.
    std::int64_t min_history = 5;
    // After an alert, the loss must come back below this × trend before the next spike alerts.
    // Default 1.2; between 1 and spike_ratio.
    double rearm_ratio = 1.2;
};

// --alert-command, --alert-loss-window and --alert-loss-spike-ratio, in an "Alerts" help group.
void add_loss_alert_flags(CLI::App& app, LossAlertConfig& config, std::string& alert_command);

enum class LossAlertKind { spike, not_finite };

// The data behind an alert: the iterations of the log interval whose loss alerted, the samples
// they consumed and the command that prints those samples (mds-sample-text, docs/incidents.md).
struct AlertData {
    std::int64_t first_iteration = 0, last_iteration = 0;  // the log interval, first-last
    // Consumed samples (the log line's count) before the first iteration and after the last: the
    // interval trained samples [consumed_begin, consumed_end).
    std::int64_t consumed_begin = 0, consumed_end = 0;
    // Samples of the training order that --skip-train-iteration-range skipped before the first and
    // the last iteration of the interval (BMD's data iterator runs ahead of the consumed count by
    // them): the interval read samples [consumed_begin + skipped_before, consumed_end + skipped_after).
    std::int64_t skipped_before = 0, skipped_after = 0;
    std::string sample_text_command;  // one shell command line
};

// `mds-sample-text --ledger PATH --iterations A-B`, shell-quoted.
std::string ledger_sample_text_command(const std::string& ledger_path, std::int64_t first_iteration,
                                       std::int64_t last_iteration);
// Without a run ledger: `mds-sample-text --data-parallel-size D --resume-iteration R --iterations
// A-B -- ARGS...`, where ARGS is mds-train's command line (argv[1..]) and R the iteration this
// process resumed from (0: none); shell-quoted. Relative paths in ARGS are relative to the
// training's working directory, where --alert-command runs.
std::string run_sample_text_command(std::int64_t data_parallel_size, std::int64_t resumed_iteration,
                                    std::int64_t first_iteration, std::int64_t last_iteration,
                                    const std::vector<std::string>& command_line);
// "data: iterations 57-57, consumed samples [912, 928): mds-sample-text ...", with
// " (training-order samples [944, 960) after --skip-train-iteration-range)" before the colon when
// samples were skipped.
std::string describe_alert_data(const AlertData& data);

struct LossAlert {
    LossAlertKind kind = LossAlertKind::spike;
    std::int64_t iteration = 0;
    double loss = 0.0;
    std::optional<double> trend;  // none before the first finite loss
    std::optional<double> ratio;  // loss / trend, for spikes
    // One line, no newline:
    //   ***ALERT: loss spike at iteration 1500: loss 4.6004 is 2.00x the recent trend 2.3002 (median of the last 20 logged losses)
    //   ***ALERT: loss is nan at iteration 1500 (recent trend 2.3002)
    // and, once attach_data() ran, "; " + describe_alert_data(data) after it.
    std::string message;
    std::optional<AlertData> data;

    // Records `d` and appends it to the message.
    void attach_data(AlertData d);
    // What --alert-command gets in its environment: MDS_ALERT_MESSAGE, and with data
    // MDS_ALERT_ITERATIONS ("A-B"), MDS_ALERT_CONSUMED_SAMPLES ("X-Y", half-open: samples X to Y-1)
    // and MDS_ALERT_SAMPLE_TEXT_COMMAND.
    std::vector<std::pair<std::string, std::string>> environment() const;
};

// The detector's saved state, so that a resumed run keeps its trend.
struct LossAlertState {
    std::vector<double> recent_losses;  // oldest first, at most `window`
    bool spike_open = false;            // alerted, not yet back below rearm_ratio × trend
};

class LossAlertDetector {
public:
    // Throws mds::UsageError naming the flag for a window below 1 or a spike ratio not above 1.
    explicit LossAlertDetector(LossAlertConfig config = {});

    // Feeds the loss logged at `iteration`; returns the alert it raises, if any.
    std::optional<LossAlert> observe(std::int64_t iteration, double loss);

    // Median of the recent finite losses; none before the first.
    std::optional<double> trend() const;

    LossAlertState state() const;
    void load_state(const LossAlertState& state);

private:
    LossAlertConfig config_;
    std::deque<double> recent_;
    bool spike_open_ = false;
};

// Runs --alert-command for each alert: `/bin/sh -c COMMAND sh MESSAGE`, so the message is $1, and
// with MDS_ALERT_MESSAGE=MESSAGE (and the rest of LossAlert::environment()) in its environment,
// where values of those four variables inherited by the trainer are dropped. The message never
// passes through the shell's parser. Started with posix_spawn (vfork-style: no copy of the trainer's page tables, and only
// exec-safe steps in the child of a multi-threaded process), stdin from /dev/null, stdout/stderr
// shared with the trainer, no other inherited descriptors (glibc >= 2.34), SIGPIPE at its default
// and no blocked signals. Nothing here waits for a command: finished ones are reaped with WNOHANG
// at each run() and reap(), so at most the commands still running (and those that finished since
// the last call) exist as processes. A command that cannot start, exits non-zero or is killed
// produces a warning through `warn`; nothing throws.
class AlertCommandRunner {
public:
    using WarningSink = std::function<void(const std::string&)>;

    // `warn` defaults to mds::print_warning ("mds-<tool>: warning: ...").
    explicit AlertCommandRunner(std::string command, WarningSink warn = {});
    ~AlertCommandRunner();  // reaps what has finished; running commands are left to finish
    AlertCommandRunner(const AlertCommandRunner&) = delete;
    AlertCommandRunner& operator=(const AlertCommandRunner&) = delete;

    // Starts the command for `alert`; its pid, or none when it could not start (warned).
    std::optional<pid_t> run(const LossAlert& alert) noexcept;
    // Starts the command for a bare message (MDS_ALERT_MESSAGE only).
    std::optional<pid_t> run(const std::string& message) noexcept;
    // Reaps finished commands without blocking, warning about the ones that failed.
    void reap() noexcept;
    // Commands started and not yet reaped.
    std::size_t running() const { return children_.size(); }

    const std::string& command() const { return command_; }

private:
    void warn(const std::string& what) noexcept;
    std::optional<pid_t> spawn(const std::string& message,
                               const std::vector<std::pair<std::string, std::string>>& env) noexcept;
    void reap_finished();

    std::string command_;
    WarningSink warn_;
    std::vector<pid_t> children_;
};

}  // namespace mds::observe
