// Megatron's named timers, their levels, the cross-rank reduction and BMD's log line (timers.h).
#include "mds/observe/timers.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <utility>

#include "mds/util/error.h"

namespace mds::observe {
namespace {

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string fixed2(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f", v);
    return buf;
}

// " | name: value", appended piecewise (GCC 12 warns falsely of -Wrestrict on "literal" + std::string at -O3).
void append_value(std::string& line, const std::string& name, const std::string& value) {
    line += " | ";
    line += name;
    line += ": ";
    line += value;
}

// Below any time a rank reports: "this rank has no value here" in the maximum over the ranks.
constexpr double kAbsent = -std::numeric_limits<double>::max();

}  // namespace

TimingLogOption parse_timing_log_option(std::string_view text) {
    if (text == "max") return TimingLogOption::Max;
    if (text == "minmax") return TimingLogOption::MinMax;
    if (text == "all") return TimingLogOption::All;
    throw UsageError("--timing-log-option: expected max, minmax or all, found '" + std::string(text) + "'");
}

const char* timing_log_option_name(TimingLogOption option) {
    switch (option) {
        case TimingLogOption::Max: return "max";
        case TimingLogOption::MinMax: return "minmax";
        case TimingLogOption::All: return "all";
    }
    return "?";
}

int timer_level(std::string_view name) {
    // Megatron-LM's levels (megatron/training/training.py, megatron/core/timers.py callers); BMD's
    // names of the same things take the level of Megatron-LM's (backward-params-all-reduce is its
    // all-grads-sync, backward-embedding-all-reduce its embedding-grads-all-reduce).
    static constexpr std::string_view level0[] = {"interval-time", "save-checkpoint", "load-checkpoint",
                                                  "model-and-optimizer-setup", "train/valid/test-data-iterators-setup"};
    static constexpr std::string_view level1[] = {
        "forward-backward", "backward-params-all-reduce", "backward-embedding-all-reduce", "all-grads-sync",
        "embedding-grads-all-reduce", "layernorm-grads-all-reduce", "params-all-gather", "optimizer",
        "optimizer-copy-to-main-grad", "optimizer-unscale-and-check-inf", "optimizer-clip-main-grad",
        "optimizer-count-zeros", "optimizer-inner-step", "optimizer-copy-main-to-model-params"};
    if (std::find(std::begin(level0), std::end(level0), name) != std::end(level0)) return 0;
    if (std::find(std::begin(level1), std::end(level1), name) != std::end(level1)) return 1;
    return 2;
}

const std::vector<std::string>& timer_log_order() {
    // BMD's training_log add_to_logging order first (what users' logs show), then the names only
    // Megatron-LM logs (the combined exchanges BMD times but leaves out, and forward-backward).
    static const std::vector<std::string> order = {
        "forward-compute", "forward-recv", "forward-send", "forward-backward-send-forward-backward-recv",
        "backward-compute", "backward-recv", "backward-send", "backward-send-forward-recv",
        "backward-send-backward-recv", "backward-params-all-reduce", "backward-embedding-all-reduce",
        "optimizer-copy-to-main-grad", "optimizer-unscale-and-check-inf", "optimizer-clip-main-grad",
        "optimizer-copy-main-to-model-params", "optimizer", "batch-generator",
        "forward-send-forward-recv", "forward-send-backward-recv", "forward-backward"};
    return order;
}

Timers::Timers(int log_level, std::function<void()> device_sync, std::shared_ptr<DeviceClock> clock)
    : log_level_(log_level), device_sync_(std::move(device_sync)), clock_(std::move(clock)) {
    if (log_level < 0 || log_level > 2)
        throw UsageError("--timing-log-level: expected 0, 1 or 2, found " + std::to_string(log_level));
}

bool Timers::enabled(std::string_view name) const { return timer_level(name) <= log_level_; }

Timers::Timer* Timers::find(std::string_view name) const {
    for (auto& t : timers_)
        if (t.name == name) return &t;
    return nullptr;
}

void Timers::read_marks(Timer& t, bool wait) const {
    std::size_t done = 0;
    for (const auto& [from, to] : t.unread) {
        if (!wait && !clock_->passed(to)) break;  // the marks are in queue order: the later ones neither
        t.elapsed += clock_->elapsed_ms(from, to) / 1000.0;
        clock_->release(from);
        clock_->release(to);
        ++done;
    }
    t.unread.erase(t.unread.begin(), t.unread.begin() + static_cast<std::ptrdiff_t>(done));
}

void Timers::drop_marks(Timer& t) const {
    for (const auto& [from, to] : t.unread) {
        clock_->release(from);
        clock_->release(to);
    }
    t.unread.clear();
}

void Timers::start(std::string_view name) {
    if (!enabled(name)) return;
    Timer* t = find(name);
    if (!t) {
        t = &timers_.emplace_back();
        t->name = std::string(name);
        t->on_clock = clock_ && timer_level(name) > 0;
    }
    if (t->running) throw Error("timer '" + t->name + "' started while already running");
    if (t->on_clock) {
        t->start_mark = clock_->mark();
    } else {
        // The device's queued work belongs to what ran before: wait for it, as BMD's _Timer.start does.
        if (device_sync_) device_sync_();
        t->started_at = now_seconds();
    }
    t->running = true;
    t->ran = true;
}

void Timers::stop(std::string_view name) {
    if (!enabled(name)) return;
    Timer* t = find(name);
    if (!t || !t->running) throw Error("timer '" + std::string(name) + "' stopped while not running");
    if (t->on_clock) {
        t->unread.emplace_back(t->start_mark, clock_->mark());
        read_marks(*t, /*wait=*/false);  // what the device has done already: the marks stay few
    } else {
        if (device_sync_) device_sync_();
        t->elapsed += now_seconds() - t->started_at;
        t->started_at = -1;
    }
    t->running = false;
}

double Timers::seconds(std::string_view name) const {
    Timer* found = find(name);  // timers_ is mutable: reading settles the device's marks
    if (!found) return 0;
    Timer& t = *found;
    if (!t.on_clock) return t.elapsed + (t.running ? now_seconds() - t.started_at : 0);
    read_marks(t, /*wait=*/true);
    if (!t.running) return t.elapsed;
    const std::size_t now = clock_->mark();
    const double running = clock_->elapsed_ms(t.start_mark, now) / 1000.0;
    clock_->release(now);
    return t.elapsed + running;
}

bool Timers::ran(std::string_view name) const {
    const Timer* t = find(name);
    return t && t->ran;
}

void Timers::reset() {
    for (auto& t : timers_) reset(t.name);
}

void Timers::reset(std::string_view name) {
    Timer* t = find(name);
    if (!t) return;
    t->elapsed = 0;
    if (!t->on_clock) {
        if (t->running) t->started_at = now_seconds();
        return;
    }
    drop_marks(*t);
    if (t->running) {
        clock_->release(t->start_mark);
        t->start_mark = clock_->mark();
    }
}

std::vector<TimerValue> reduce_timers(const Timers& timers, const std::vector<std::string>& names,
                                      double normalizer, TimingLogOption option, int rank, int world,
                                      const MaxOverRanks& max_over_ranks) {
    if (!(normalizer > 0)) throw Error("timers: the normalizer must be positive, found " + std::to_string(normalizer));
    std::vector<std::string> active;
    for (const auto& n : names)
        if (timers.enabled(n)) active.push_back(n);
    const std::size_t n = active.size();
    if (n == 0) return {};
    // This rank's value of each name, or kAbsent where it never ran that timer.
    std::vector<double> own(n);
    for (std::size_t i = 0; i < n; ++i)
        own[i] = timers.ran(active[i]) ? timers.seconds(active[i]) * 1000.0 / normalizer : kAbsent;

    // One element-wise maximum serves every option: the minimum is the negated maximum of the
    // negated values, and "all" gives each rank its own slots (the others' absent).
    std::vector<double> send;
    if (option == TimingLogOption::All) {
        send.assign(n * static_cast<std::size_t>(world), kAbsent);
        std::copy(own.begin(), own.end(), send.begin() + static_cast<std::ptrdiff_t>(n * static_cast<std::size_t>(rank)));
    } else {
        send = own;
        if (option == TimingLogOption::MinMax)
            for (double v : own) send.push_back(v == kAbsent ? kAbsent : -v);
    }
    const std::size_t expected = send.size();
    const std::vector<double> got = max_over_ranks ? max_over_ranks(std::move(send)) : send;
    if (got.size() != expected)
        throw Error("timers: the reduction over the ranks returned " + std::to_string(got.size()) + " values, expected " +
                    std::to_string(expected));

    std::vector<TimerValue> out;
    for (std::size_t i = 0; i < n; ++i) {
        TimerValue v;
        v.name = active[i];
        bool any = false;
        if (option == TimingLogOption::All) {
            for (int r = 0; r < world; ++r) {
                const double x = got[static_cast<std::size_t>(r) * n + i];
                v.per_rank_ms.push_back(x == kAbsent ? -1.0 : x);
                if (x != kAbsent) {
                    any = true;
                    v.max_ms = std::max(v.max_ms, x);
                }
            }
            v.min_ms = v.max_ms;
            for (double x : v.per_rank_ms)
                if (x >= 0) v.min_ms = std::min(v.min_ms, x);
        } else {
            any = got[i] != kAbsent;
            v.max_ms = got[i];
            v.min_ms = option == TimingLogOption::MinMax ? -got[n + i] : got[i];
        }
        if (any) out.push_back(std::move(v));
    }
    return out;
}

std::string format_timers_line(const std::vector<TimerValue>& values, TimingLogOption option, int world) {
    if (values.empty()) return {};
    if (option == TimingLogOption::All && world > 1) {
        std::string lines;
        for (int r = 0; r < world; ++r) {
            std::string line;
            for (const auto& v : values) {
                const double x = static_cast<std::size_t>(r) < v.per_rank_ms.size() ? v.per_rank_ms[static_cast<std::size_t>(r)] : -1;
                if (x >= 0) append_value(line, v.name, fixed2(x));
            }
            if (line.empty()) continue;
            if (!lines.empty()) lines += '\n';
            lines += "time (ms) rank ";
            lines += std::to_string(r);
            lines += line;
        }
        return lines;
    }
    // One process has one value per timer whatever the option: BMD's line exactly.
    const bool minmax = option == TimingLogOption::MinMax && world > 1;
    std::string line = "time (ms)";
    for (const auto& v : values) {
        std::string value;
        if (minmax) {
            value += '(';
            value += fixed2(v.min_ms);
            value += ", ";
            value += fixed2(v.max_ms);
            value += ')';
        } else {
            value = fixed2(v.max_ms);
        }
        append_value(line, v.name, value);
    }
    return line;
}

}  // namespace mds::observe
