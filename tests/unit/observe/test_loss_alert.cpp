// Loss-spike / NaN alerts (mds/observe/loss_alert.h) on synthetic loss curves, and the
// --alert-command runner with real shell commands; the data an alert names (iterations, consumed
// samples, the mds-sample-text command) and the environment the command gets.
#include <doctest/doctest.h>

#include <signal.h>    // kill
#include <sys/wait.h>  // waitpid

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>  // setenv, unsetenv
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mds/observe/loss_alert.h"
#include "mds/util/error.h"
#include "test_support.h"

using namespace mds::observe;

namespace {

// A pre-training curve: from ~11 (ln 50257) down to ~2, with a deterministic ±3 % wobble on
// top of the decay, as a logged loss averaged over a log interval shows.
double smooth_loss(int i) { return (2.0 + 9.0 * std::exp(-i / 300.0)) * (1.0 + 0.03 * std::sin(i * 1.7)); }

// Feeds `losses` at iterations 100, 200, ...; returns the alerts.
std::vector<LossAlert> feed(LossAlertDetector& d, const std::vector<double>& losses) {
    std::vector<LossAlert> alerts;
    for (std::size_t i = 0; i < losses.size(); ++i)
        if (auto a = d.observe(static_cast<std::int64_t>(i + 1) * 100, losses[i])) alerts.push_back(*a);
    return alerts;
}

std::vector<double> smooth_curve(int n) {
    std::vector<double> v;
    for (int i = 0; i < n; ++i) v.push_back(smooth_loss(i));
    return v;
}

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// Polls until `done` or 10 s; true when done.
template <class F>
bool wait_for(F done) {
    for (int i = 0; i < 1000; ++i) {
        if (done()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done();
}

}  // namespace

TEST_CASE("loss alert: a smooth falling curve never alerts, nor does a noisy plateau") {
    LossAlertDetector d;
    CHECK(feed(d, smooth_curve(3000)).empty());

    // ±10 % uniform noise around 2.5 (a deterministic LCG).
    LossAlertDetector p;
    std::uint32_t x = 12345;
    std::vector<double> plateau;
    for (int i = 0; i < 5000; ++i) {
        x = x * 1664525u + 1013904223u;
        plateau.push_back(2.5 * (0.9 + 0.2 * (x >> 8) / 16777216.0));
    }
    CHECK(feed(p, plateau).empty());
}

TEST_CASE("loss alert: a ×2 spike alerts once; the next spike after recovery alerts again") {
    auto losses = smooth_curve(3000);
    losses[1500] *= 2.0;           // one interval
    for (int i = 2500; i < 2503; ++i) losses[i] *= 2.0;  // three intervals in a row: still one alert
    LossAlertDetector d;
    auto alerts = feed(d, losses);
    REQUIRE(alerts.size() == 2);
    CHECK(alerts[0].kind == LossAlertKind::spike);
    CHECK(alerts[0].iteration == 150100);
    CHECK(alerts[0].loss == losses[1500]);
    REQUIRE(alerts[0].ratio);
    CHECK(*alerts[0].ratio == doctest::Approx(2.0).epsilon(0.06));
    CHECK(alerts[0].message.rfind("***ALERT: loss spike at iteration 150100: loss ", 0) == 0);
    CHECK(alerts[0].message.find("x the recent trend ") != std::string::npos);
    CHECK(alerts[0].message.find("(median of the last 20 logged losses)") != std::string::npos);
    CHECK(alerts[1].iteration == 250100);
}

TEST_CASE("loss alert: a loss that stays high becomes the trend and is alerted on once") {
    std::vector<double> losses(100, 2.0);
    for (int i = 40; i < 100; ++i) losses[i] = 5.0;
    LossAlertDetector d;
    auto alerts = feed(d, losses);
    REQUIRE(alerts.size() == 1);
    CHECK(alerts[0].iteration == 4100);
    CHECK(d.trend() == 5.0);
}

TEST_CASE("loss alert: NaN and Inf always alert and stay out of the trend") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    LossAlertDetector d;
    auto first = d.observe(1, nan);
    REQUIRE(first);
    CHECK(first->kind == LossAlertKind::not_finite);
    CHECK(first->message == "***ALERT: loss is nan at iteration 1 (no trend yet)");
    CHECK_FALSE(d.trend());

    std::vector<double> losses = smooth_curve(100);
    losses[50] = nan;
    losses[51] = inf;
    losses[52] = -inf;
    losses[53] = nan;
    auto alerts = feed(d, losses);
    REQUIRE(alerts.size() == 4);
    CHECK(alerts[0].message.rfind("***ALERT: loss is nan at iteration 5100 (recent trend ", 0) == 0);
    CHECK(alerts[1].message.rfind("***ALERT: loss is inf at iteration 5200", 0) == 0);
    CHECK(alerts[2].message.rfind("***ALERT: loss is -inf at iteration 5300", 0) == 0);
    CHECK(alerts[3].iteration == 5400);
    REQUIRE(d.trend());
    CHECK(std::isfinite(*d.trend()));
}

TEST_CASE("loss alert: thresholds, history and the exact message") {
    LossAlertDetector d;
    for (int i = 1; i <= 4; ++i) CHECK_FALSE(d.observe(i, 2.0));
    CHECK_FALSE(d.observe(5, 10.0));  // four values of history: not judged yet
    for (int i = 6; i <= 10; ++i) d.observe(i, 2.0);
    CHECK_FALSE(d.observe(11, 2.9));  // 1.45x: below the default 1.5
    auto a = d.observe(12, 3.0);
    REQUIRE(a);
    CHECK(a->message ==
          "***ALERT: loss spike at iteration 12: loss 3.0000 is 1.50x the recent trend 2.0000 (median of the last 11 "
          "logged losses)");

    LossAlertConfig sensitive;
    sensitive.spike_ratio = 1.2;
    LossAlertDetector s(sensitive);
    for (int i = 1; i <= 10; ++i) s.observe(i, 2.0);
    CHECK(s.observe(11, 2.6));

    LossAlertConfig bad;
    bad.window = 0;
    CHECK_THROWS_WITH_AS(LossAlertDetector{bad}, "--alert-loss-window must be at least 1, got 0", mds::UsageError);
    bad = {};
    bad.spike_ratio = 1.0;
    CHECK_THROWS_WITH_AS(LossAlertDetector{bad}, doctest::Contains("--alert-loss-spike-ratio must be a number above 1"),
                         mds::UsageError);
}

TEST_CASE("loss alert: the state round trip keeps trend and open spike") {
    LossAlertDetector a;
    std::vector<double> losses(30, 2.0);
    losses[29] = 4.0;
    CHECK(feed(a, losses).size() == 1);
    LossAlertDetector b;
    b.load_state(a.state());
    CHECK(b.trend() == a.trend());
    CHECK_FALSE(b.observe(3100, 4.0));  // the spike is still open: no second alert
    CHECK(b.state().recent_losses.size() == 20);
}

TEST_CASE("alert command: gets the message as $1 and MDS_ALERT_MESSAGE, without the shell parsing it") {
    const auto dir = mds::test::scratch_dir("loss-alert");
    const std::string d = dir.string();
    std::vector<std::string> warnings;
    AlertCommandRunner runner("printf '%s' \"$1\" > '" + d + "/arg.tmp' && mv '" + d + "/arg.tmp' '" + d +
                                  "/arg' && printf '%s' \"$MDS_ALERT_MESSAGE\" > '" + d + "/env.tmp' && mv '" + d +
                                  "/env.tmp' '" + d + "/env'",
                              [&](const std::string& w) { warnings.push_back(w); });
    const std::string message = "***ALERT: it's $HOME `id` \"quoted\" ; exit 7";
    auto pid = runner.run(message);
    REQUIRE(pid);
    CHECK(wait_for([&] { return std::filesystem::exists(dir / "env"); }));
    CHECK(read_file(dir / "arg") == message);
    CHECK(read_file(dir / "env") == message);
    CHECK(wait_for([&] {
        runner.reap();
        return runner.running() == 0;
    }));
    CHECK(warnings.empty());
    // Reaped: no zombie left behind.
    errno = 0;
    CHECK(::waitpid(*pid, nullptr, WNOHANG) == -1);
    CHECK(errno == ECHILD);
    std::filesystem::remove_all(dir);
}

TEST_CASE("alert command: never waits, and failures become warnings") {
    std::vector<std::string> warnings;
    auto sink = [&](const std::string& w) { warnings.push_back(w); };

    AlertCommandRunner slow("sleep 30", sink);
    const auto start = std::chrono::steady_clock::now();
    auto pid = slow.run("m");
    REQUIRE(pid);
    slow.reap();
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
    CHECK(slow.running() == 1);
    ::kill(*pid, SIGKILL);
    CHECK(wait_for([&] {
        slow.reap();
        return slow.running() == 0;
    }));
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0] == "--alert-command was killed by signal 9 (Killed): sleep 30");

    warnings.clear();
    AlertCommandRunner failing("exit 3", sink);
    CHECK(failing.run("m"));
    CHECK(wait_for([&] {
        failing.reap();
        return failing.running() == 0;
    }));
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0] == "--alert-command exited with status 3: exit 3");

    // A throwing sink does not escape either.
    AlertCommandRunner throwing("exit 1", [](const std::string&) { throw std::runtime_error("sink"); });
    CHECK(throwing.run("m"));
    CHECK(wait_for([&] {
        throwing.reap();
        return throwing.running() == 0;
    }));
}

TEST_CASE("alert data: the message names the iterations, the consumed samples and the command") {
    LossAlertDetector d;
    std::optional<LossAlert> a;
    for (int i = 1; i <= 57 && !a; ++i) a = d.observe(i, i == 57 ? 9.0 : 3.0);
    REQUIRE(a);
    const std::string first_part = a->message;
    AlertData data;
    data.first_iteration = 57;
    data.last_iteration = 57;
    data.consumed_begin = 896;
    data.consumed_end = 912;
    data.sample_text_command = ledger_sample_text_command("/s/runs.jsonl", 57, 57);
    a->attach_data(data);
    CHECK(a->message == first_part +
                            "; data: iterations 57-57, consumed samples [896, 912): mds-sample-text --ledger /s/runs.jsonl "
                            "--iterations 57-57");
    CHECK(a->message.rfind("***ALERT: loss spike at iteration 57: loss 9.0000 is 3.00x", 0) == 0);
    REQUIRE(a->data);
    CHECK(a->data->consumed_end == 912);
    using Env = std::vector<std::pair<std::string, std::string>>;
    CHECK(a->environment() == Env{{"MDS_ALERT_MESSAGE", a->message},
                                  {"MDS_ALERT_ITERATIONS", "57-57"},
                                  {"MDS_ALERT_CONSUMED_SAMPLES", "896-912"},
                                  {"MDS_ALERT_SAMPLE_TEXT_COMMAND", "mds-sample-text --ledger /s/runs.jsonl --iterations 57-57"}});

    // Without data only the message goes into the environment.
    LossAlert bare;
    bare.message = "***ALERT: loss is nan at iteration 3 (no trend yet)";
    CHECK(bare.environment() == Env{{"MDS_ALERT_MESSAGE", bare.message}});
}

TEST_CASE("alert data: samples skipped by --skip-train-iteration-range, a log interval of several iterations") {
    AlertData d;
    d.first_iteration = 11;
    d.last_iteration = 20;
    d.consumed_begin = 80;
    d.consumed_end = 160;
    d.skipped_before = 16;
    d.skipped_after = 16;
    CHECK(describe_alert_data(d) ==
          "data: iterations 11-20, consumed samples [80, 160) (training-order samples [96, 176) after "
          "--skip-train-iteration-range)");
}

TEST_CASE("alert data: without a ledger the command carries the training's command line, quoted") {
    const std::vector<std::string> cmdline = {"--data-path", "my data/x_text_document", "--alert-command",
                                              "echo \"$1\" >> it's.log", "--seed", "42"};
    const std::string cmd = run_sample_text_command(2, 100, 121, 125, cmdline);
    CHECK(cmd ==
          "mds-sample-text --data-parallel-size 2 --resume-iteration 100 --iterations 121-125 -- --data-path "
          "'my data/x_text_document' --alert-command 'echo \"$1\" >> it'\\''s.log' --seed 42");
    CHECK(ledger_sample_text_command("/runs dir/runs.jsonl", 5, 5) ==
          "mds-sample-text --ledger '/runs dir/runs.jsonl' --iterations 5-5");
}

TEST_CASE("alert command: gets the alert's data in its environment; inherited MDS_ALERT_ values are dropped") {
    const auto dir = mds::test::scratch_dir("loss-alert-env");
    const std::string d = dir.string();
    ::setenv("MDS_ALERT_ITERATIONS", "stale", 1);
    ::setenv("MDS_ALERT_SAMPLE_TEXT_COMMAND", "stale", 1);
    AlertCommandRunner runner("{ printf '%s|%s|%s|%s' \"$MDS_ALERT_ITERATIONS\" \"$MDS_ALERT_CONSUMED_SAMPLES\" "
                              "\"$MDS_ALERT_SAMPLE_TEXT_COMMAND\" \"$1\"; } > '" + d + "/env.tmp' && mv '" + d +
                              "/env.tmp' '" + d + "/env'; printf '%s' \"${MDS_ALERT_ITERATIONS-unset}\" > '" + d +
                              "/bare.tmp' && mv '" + d + "/bare.tmp' '" + d + "/bare'",
                              [](const std::string&) {});
    LossAlert a;
    a.message = "***ALERT: loss spike at iteration 9";
    AlertData data;
    data.first_iteration = 8;
    data.last_iteration = 9;
    data.consumed_begin = 56;
    data.consumed_end = 72;
    data.sample_text_command = ledger_sample_text_command("/s/runs.jsonl", 8, 9);
    a.attach_data(data);
    REQUIRE(runner.run(a));
    // The command writes env, then bare: both before anything is removed, or its late bare would pass for the
    // next run's.
    CHECK(wait_for([&] { return std::filesystem::exists(dir / "env") && std::filesystem::exists(dir / "bare"); }));
    CHECK(read_file(dir / "env") == "8-9|56-72|mds-sample-text --ledger /s/runs.jsonl --iterations 8-9|" + a.message);
    CHECK(read_file(dir / "bare") == "8-9");
    std::filesystem::remove(dir / "bare");
    std::filesystem::remove(dir / "env");
    REQUIRE(runner.run(std::string("m")));  // a bare message: no stale value either
    CHECK(wait_for([&] { return std::filesystem::exists(dir / "bare"); }));
    CHECK(read_file(dir / "bare") == "unset");
    ::unsetenv("MDS_ALERT_ITERATIONS");
    ::unsetenv("MDS_ALERT_SAMPLE_TEXT_COMMAND");
    CHECK(wait_for([&] {
        runner.reap();
        return runner.running() == 0;
    }));
    std::filesystem::remove_all(dir);
}
