// Loss-spike / NaN detector and the --alert-command runner (loss_alert.h).
#include "mds/observe/loss_alert.h"

#include <fcntl.h>      // O_RDONLY
#include <signal.h>     // sigemptyset, sigaddset
#include <spawn.h>      // posix_spawn and its attributes / file actions
#include <sys/wait.h>   // waitpid, WNOHANG, WIFEXITED, ...

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "mds/util/error.h"
#include "mds/util/shell_quote.h"
#include "mds/util/tool.h"  // print_warning
#include "mds/util/median.h"
#include "mds/util/text.h"  // format_fixed

extern char** environ;  // the trainer's environment, passed on to the command

namespace mds::observe {
namespace {

std::string loss_text(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return format_fixed(v, 4);
}

}  // namespace

void add_loss_alert_flags(CLI::App& app, LossAlertConfig& config, std::string& alert_command) {
    app.add_option("--alert-command", alert_command,
                   "Shell command run (without waiting for it) on each ***ALERT line: the message is $1 and "
                   "$MDS_ALERT_MESSAGE; $MDS_ALERT_ITERATIONS, $MDS_ALERT_CONSUMED_SAMPLES and "
                   "$MDS_ALERT_SAMPLE_TEXT_COMMAND name its data (docs/incidents.md)")
        ->group("Alerts");
    app.add_option("--alert-loss-window", config.window,
                   "Logged losses whose median is the trend a loss spike is measured against")
        ->capture_default_str()
        ->group("Alerts");
    app.add_option("--alert-loss-spike-ratio", config.spike_ratio,
                   "Alert when the logged loss reaches this multiple of its trend (NaN/Inf always alert)")
        ->capture_default_str()
        ->group("Alerts");
}

// --- where the data is -------------------------------------------------------------------------

namespace {

std::string range_text(std::int64_t a, std::int64_t b) { return std::to_string(a) + "-" + std::to_string(b); }

std::string half_open(std::int64_t a, std::int64_t b) {
    return "[" + std::to_string(a) + ", " + std::to_string(b) + ")";
}

}  // namespace

std::string ledger_sample_text_command(const std::string& ledger_path, std::int64_t first_iteration,
                                       std::int64_t last_iteration) {
    return shell_join({"mds-sample-text", "--ledger", ledger_path, "--iterations",
                       range_text(first_iteration, last_iteration)});
}

std::string run_sample_text_command(std::int64_t data_parallel_size, std::int64_t resumed_iteration,
                                    std::int64_t first_iteration, std::int64_t last_iteration,
                                    const std::vector<std::string>& command_line) {
    std::vector<std::string> words = {"mds-sample-text", "--data-parallel-size", std::to_string(data_parallel_size),
                                      "--resume-iteration", std::to_string(resumed_iteration), "--iterations",
                                      range_text(first_iteration, last_iteration), "--"};
    words.insert(words.end(), command_line.begin(), command_line.end());
    return shell_join(words);
}

std::string describe_alert_data(const AlertData& d) {
    std::string s = "data: iterations " + range_text(d.first_iteration, d.last_iteration) + ", consumed samples " +
                    half_open(d.consumed_begin, d.consumed_end);
    if (d.skipped_before != 0 || d.skipped_after != 0)
        s += " (training-order samples " + half_open(d.consumed_begin + d.skipped_before, d.consumed_end + d.skipped_after) +
             " after --skip-train-iteration-range)";
    if (!d.sample_text_command.empty()) s += ": " + d.sample_text_command;
    return s;
}

void LossAlert::attach_data(AlertData d) {
    message += "; " + describe_alert_data(d);
    data = std::move(d);
}

std::vector<std::pair<std::string, std::string>> LossAlert::environment() const {
    std::vector<std::pair<std::string, std::string>> env = {{"MDS_ALERT_MESSAGE", message}};
    if (data) {
        env.emplace_back("MDS_ALERT_ITERATIONS", range_text(data->first_iteration, data->last_iteration));
        env.emplace_back("MDS_ALERT_CONSUMED_SAMPLES", range_text(data->consumed_begin, data->consumed_end));
        env.emplace_back("MDS_ALERT_SAMPLE_TEXT_COMMAND", data->sample_text_command);
    }
    return env;
}

// --- the detector ------------------------------------------------------------------------------

LossAlertDetector::LossAlertDetector(LossAlertConfig config) : config_(config) {
    if (config_.window < 1)
        throw UsageError("--alert-loss-window must be at least 1, got " + std::to_string(config_.window));
    if (!(config_.spike_ratio > 1.0) || !std::isfinite(config_.spike_ratio))
        throw UsageError("--alert-loss-spike-ratio must be a number above 1, got " + loss_text(config_.spike_ratio));
    if (config_.min_history < 1 || config_.min_history > config_.window)
        throw UsageError("loss alert min_history must be between 1 and --alert-loss-window " +
                         std::to_string(config_.window) + ", got " + std::to_string(config_.min_history));
    if (!(config_.rearm_ratio >= 1.0 && config_.rearm_ratio <= config_.spike_ratio))
        throw UsageError("loss alert rearm ratio must be between 1 and --alert-loss-spike-ratio " +
                         loss_text(config_.spike_ratio) + ", got " + loss_text(config_.rearm_ratio));
}

std::optional<double> LossAlertDetector::trend() const {
    if (recent_.empty()) return std::nullopt;
    return median(std::vector<double>(recent_.begin(), recent_.end()));
}

std::optional<LossAlert> LossAlertDetector::observe(std::int64_t iteration, double loss) {
    const std::optional<double> trend_now = trend();
    std::optional<LossAlert> alert;
    if (!std::isfinite(loss)) {
        LossAlert a;
        a.kind = LossAlertKind::not_finite;
        a.iteration = iteration;
        a.loss = loss;
        a.trend = trend_now;
        a.message = "***ALERT: loss is " + loss_text(loss) + " at iteration " + std::to_string(iteration) +
                    (trend_now ? " (recent trend " + loss_text(*trend_now) + ")" : " (no trend yet)");
        return a;  // kept out of the trend
    }
    // Ratios are meaningful for positive losses (cross entropy); a trend at or below 0 judges nothing.
    const bool judged = trend_now && *trend_now > 0.0 && static_cast<std::int64_t>(recent_.size()) >= config_.min_history;
    if (judged) {
        const double ratio = loss / *trend_now;
        if (spike_open_ && ratio < config_.rearm_ratio) spike_open_ = false;
        if (!spike_open_ && ratio >= config_.spike_ratio) {
            spike_open_ = true;
            LossAlert a;
            a.kind = LossAlertKind::spike;
            a.iteration = iteration;
            a.loss = loss;
            a.trend = trend_now;
            a.ratio = ratio;
            a.message = "***ALERT: loss spike at iteration " + std::to_string(iteration) + ": loss " + loss_text(loss) +
                        " is " + format_fixed(ratio, 2) + "x the recent trend " + loss_text(*trend_now) + " (median of the last " +
                        std::to_string(recent_.size()) + " logged losses)";
            alert = std::move(a);
        }
    }
    recent_.push_back(loss);
    while (static_cast<std::int64_t>(recent_.size()) > config_.window) recent_.pop_front();
    return alert;
}

LossAlertState LossAlertDetector::state() const {
    return {std::vector<double>(recent_.begin(), recent_.end()), spike_open_};
}

void LossAlertDetector::load_state(const LossAlertState& state) {
    recent_.assign(state.recent_losses.begin(), state.recent_losses.end());
    while (static_cast<std::int64_t>(recent_.size()) > config_.window) recent_.pop_front();
    spike_open_ = state.spike_open;
}

// --- --alert-command --------------------------------------------------------------------------

AlertCommandRunner::AlertCommandRunner(std::string command, WarningSink warn)
    : command_(std::move(command)), warn_(std::move(warn)) {}

AlertCommandRunner::~AlertCommandRunner() { reap(); }

void AlertCommandRunner::warn(const std::string& what) noexcept {
    try {
        if (warn_)
            warn_(what);
        else
            print_warning(what);
    } catch (...) {
        // A warning that cannot be delivered must still not reach the training loop.
    }
}

std::optional<pid_t> AlertCommandRunner::run(const LossAlert& alert) noexcept {
    try {
        return spawn(alert.message, alert.environment());
    } catch (...) {
        warn("--alert-command could not be started");
    }
    return std::nullopt;
}

std::optional<pid_t> AlertCommandRunner::run(const std::string& message) noexcept {
    try {
        return spawn(message, {{"MDS_ALERT_MESSAGE", message}});
    } catch (...) {
        warn("--alert-command could not be started");
    }
    return std::nullopt;
}

std::optional<pid_t> AlertCommandRunner::spawn(const std::string& message,
                                               const std::vector<std::pair<std::string, std::string>>& env) noexcept {
    reap();
    try {
        // Everything the child needs is built here, before the spawn: after a fork-like start in a
        // multi-threaded process only exec-safe calls may run, so no setenv in the child.
        // An inherited value of one of ours (a training started from an alert command) would
        // mislead the command: they are all dropped, then this alert's set.
        static const char* const kOurs[] = {"MDS_ALERT_MESSAGE=", "MDS_ALERT_ITERATIONS=", "MDS_ALERT_CONSUMED_SAMPLES=",
                                            "MDS_ALERT_SAMPLE_TEXT_COMMAND="};
        std::vector<std::string> env_strings;
        for (char** e = environ; e && *e; ++e) {
            bool ours = false;
            for (const char* v : kOurs) ours = ours || std::strncmp(*e, v, std::strlen(v)) == 0;
            if (!ours) env_strings.emplace_back(*e);
        }
        for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
        std::vector<char*> envp;
        for (auto& s : env_strings) envp.push_back(s.data());
        envp.push_back(nullptr);

        std::string sh = "/bin/sh", dash_c = "-c", command = command_, name = "sh", arg = message;
        char* argv[] = {sh.data(), dash_c.data(), command.data(), name.data(), arg.data(), nullptr};

        posix_spawn_file_actions_t actions;
        posix_spawnattr_t attr;
        posix_spawn_file_actions_init(&actions);
        posix_spawnattr_init(&attr);
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
        // The trainer's sockets and files (NCCL, checkpoints, logs) stay out of the command.
        posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
        sigset_t none, defaults;
        sigemptyset(&none);
        sigemptyset(&defaults);
        sigaddset(&defaults, SIGPIPE);  // commonly ignored by servers; a shell pipeline needs it
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setsigdefault(&attr, &defaults);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

        pid_t pid = 0;
        const int rc = posix_spawn(&pid, sh.c_str(), &actions, &attr, argv, envp.data());
        posix_spawn_file_actions_destroy(&actions);
        posix_spawnattr_destroy(&attr);
        if (rc != 0) {
            warn(errno_message("--alert-command could not be started", rc));
            return std::nullopt;
        }
        children_.push_back(pid);
        return pid;
    } catch (const std::exception& e) {
        warn(std::string("--alert-command could not be started: ") + e.what());
    } catch (...) {
        warn("--alert-command could not be started");
    }
    return std::nullopt;
}

void AlertCommandRunner::reap() noexcept {
    try {
        reap_finished();
    } catch (...) {
        // Only the message strings can throw (out of memory); the reaping itself is done.
    }
}

void AlertCommandRunner::reap_finished() {
    for (auto it = children_.begin(); it != children_.end();) {
        int status = 0;
        const pid_t r = ::waitpid(*it, &status, WNOHANG);
        if (r == 0) {  // still running
            ++it;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            // ECHILD: someone else (a SIGCHLD handler set to SIG_IGN, a waitpid(-1)) took it.
            it = children_.erase(it);
            continue;
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
            warn("--alert-command exited with status " + std::to_string(WEXITSTATUS(status)) + ": " + command_);
        else if (WIFSIGNALED(status))
            warn("--alert-command was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
                 strsignal(WTERMSIG(status)) + "): " + command_);
        it = children_.erase(it);
    }
}

}  // namespace mds::observe
