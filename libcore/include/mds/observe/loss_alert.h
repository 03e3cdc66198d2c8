// Loss-spike and NaN alerts for mds-train: a detector fed the logged loss of each log interval,
// which returns a one-line `***ALERT: ...` message (the prefix of BigScience's slurm-status alerts,
// specs/ops.md) when the loss becomes NaN/Inf or jumps well above its recent trend; and the runner
// of --alert-command, which hands that message to a shell command without stalling training.
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

struct LossAlert {
    LossAlertKind kind = LossAlertKind::spike;
    std::int64_t iteration = 0;
    double loss = 0.0;
    std::optional<double> trend;  // none before the first finite loss
    std::optional<double> ratio;  // loss / trend, for spikes
    // One line, no newline:
    //   ***ALERT: loss spike at iteration 1500: loss 4.6004 is 2.00x the recent trend 2.3002 (median of the last 20 logged losses)
    //   ***ALERT: loss is nan at iteration 1500 (recent trend 2.3002)
    std::string message;
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
// with MDS_ALERT_MESSAGE=MESSAGE in its environment. The message never passes through the shell's
// parser. Started with posix_spawn (vfork-style: no copy of the trainer's page tables, and only
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

    // Starts the command for `message`; its pid, or none when it could not start (warned).
    std::optional<pid_t> run(const std::string& message) noexcept;
    // Reaps finished commands without blocking, warning about the ones that failed.
    void reap() noexcept;
    // Commands started and not yet reaped.
    std::size_t running() const { return children_.size(); }

    const std::string& command() const { return command_; }

private:
    void warn(const std::string& what) noexcept;
    void reap_finished();

    std::string command_;
    WarningSink warn_;
    std::vector<pid_t> children_;
};

}  // namespace mds::observe
