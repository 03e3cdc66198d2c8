// Megatron's named timers for mds-train (megatron/global_vars.py _Timer/Timers in BigScience's
// Megatron-DeepSpeed; megatron/core/timers.py in Megatron-LM for the levels and the cross-rank
// reduction): each name accumulates wall-clock seconds between start() and stop() until reset();
// at a log interval the trainer prints them as BMD's line after the iteration line,
//   time (ms) | forward-compute: 12.34 | backward-compute: 23.45 | ...
// (each value: the accumulated milliseconds divided by the iterations of the interval), writes them
// to TensorBoard as `time/<name>-time`, and resets them.
//
// Levels (--timing-log-level, Megatron-LM's meaning): every name has a level 0, 1 or 2; a timer whose
// level is above the one in force never runs (start/stop do nothing, seconds() stays 0), so it costs
// nothing.
//
// On a GPU (the trainer supplies both as plain functions and objects, which keeps this class free of
// LibTorch): a level-0 timer (once per interval or per save) waits for the device at start and stop, as
// BMD's _Timer does, and reads the host's clock. The per-step timers (levels 1 and 2) read the device's
// own clock instead: start and stop record marks in the device's work queue (CUDA events) and the host
// never waits for them; the time between two marks is read once the device has passed them — at the
// latest when the value is asked for (the log line). Each then counts the time the device's timeline
// spent between start and stop, which for compute phases is the time BMD's synchronising timer shows,
// without its 32 device waits per iteration (3.5 of 136 ms on an H200 at GPT-2 124M).
//
// The cross-rank reduction (--timing-log-option) is a collective: every rank calls reduce() at the
// same point. It needs only an element-wise maximum over the world (Communicator::max), given as a
// function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mds::observe {

// --timing-log-option: how each timer's value is reduced over the ranks for the log line.
enum class TimingLogOption {
    Max,     // the largest value of any rank (one number per timer, as BMD's line)
    MinMax,  // the smallest and the largest, "(min, max)"
    All,     // every rank's own value: one line per rank
};
// "max", "minmax", "all"; throws mds::UsageError for anything else.
TimingLogOption parse_timing_log_option(std::string_view text);
const char* timing_log_option_name(TimingLogOption option);

// The level of a timer name (Megatron-LM's): 0 interval-time, the checkpoint's save and load and the
// start-up's model-and-optimizer-setup and train/valid/test-data-iterators-setup, 1 the coarse step
// phases (forward-backward, optimizer, the gradient all-reduces), 2 the fine ones (forward-compute,
// backward-compute, batch-generator, the pipeline send/recv). Names not in Megatron's list: 2.
int timer_level(std::string_view name);

// The names the iteration's line lists, in BMD's training_log order (timers_to_log), then the ones
// only Megatron-LM has. A name appears in a line only when some rank ran it in the interval.
const std::vector<std::string>& timer_log_order();

// The device's clock (CUDA events on a GPU): marks recorded in the device's work queue, read once the device
// has passed them. Handles are small integers the clock may hand out again after release().
class DeviceClock {
public:
    virtual ~DeviceClock() = default;
    // Records a mark at this point of the device's work queue; does not wait.
    virtual std::size_t mark() = 0;
    // Whether the device has passed mark `m`; does not wait.
    virtual bool passed(std::size_t m) = 0;
    // Milliseconds of the device's timeline from mark `from` to mark `to`; waits until it has passed `to`.
    virtual double elapsed_ms(std::size_t from, std::size_t to) = 0;
    // `m` is no longer needed.
    virtual void release(std::size_t m) = 0;
};

class Timers {
public:
    // `log_level`: --timing-log-level (0, 1 or 2). `device_sync`: called at each start() and stop() of a
    // running host-clock timer (torch.cuda.synchronize on CUDA, as BMD's _Timer does); may be empty.
    // `clock`: where given, the levels 1 and 2 run on it instead (no device wait); may be null.
    explicit Timers(int log_level = 2, std::function<void()> device_sync = {}, std::shared_ptr<DeviceClock> clock = {});

    int log_level() const { return log_level_; }
    // Whether `name` runs at the level in force.
    bool enabled(std::string_view name) const;

    // Start / stop one name. A timer started twice, or stopped when not running, is a bug of the
    // caller's: throws mds::Error naming the timer (BMD asserts the same).
    void start(std::string_view name);
    void stop(std::string_view name);
    // Seconds accumulated since the last reset (a running timer counts up to now); 0 when never run.
    double seconds(std::string_view name) const;
    // Whether `name` was ever started (reset() does not forget it): BMD lists a timer in its line once
    // it exists, 0.00 in an interval where it did not run.
    bool ran(std::string_view name) const;
    // Clears every timer's accumulated time. A running timer keeps running from now.
    void reset();
    void reset(std::string_view name);

private:
    struct Timer {
        std::string name;
        bool on_clock = false;   // runs on clock_ (else the host's clock)
        double elapsed = 0;      // seconds, stopped intervals since the last reset (those read so far, on a clock)
        double started_at = -1;  // host clock: monotonic seconds when running, else < 0
        bool running = false;
        std::size_t start_mark = 0;                             // device clock: the running interval's start
        std::vector<std::pair<std::size_t, std::size_t>> unread;  // device clock: stopped, not yet read
        bool ran = false;
    };
    Timer* find(std::string_view name) const;
    // Adds to `t.elapsed` the unread intervals the device has passed (all of them, waiting, when `wait`).
    void read_marks(Timer& t, bool wait) const;
    void drop_marks(Timer& t) const;

    int log_level_;
    std::function<void()> device_sync_;
    std::shared_ptr<DeviceClock> clock_;
    mutable std::vector<Timer> timers_;  // few names: a linear search beats a map here. Mutable: reading a
                                         // device clock's marks settles them.
};

// Times a scope on `timers` (nothing when null): start now, stop when the scope ends. The name must
// outlive the scope (a literal).
class ScopedTimer {
public:
    ScopedTimer(Timers* timers, std::string_view name) : timers_(timers), name_(name) {
        if (timers_) timers_->start(name_);
    }
    // A failing device sync here would end the process (a destructor, maybe while unwinding): it is
    // dropped, and the device's error surfaces at its next use.
    ~ScopedTimer() {
        if (!timers_) return;
        try {
            timers_->stop(name_);
        } catch (...) {
        }
    }
    ScopedTimer(const ScopedTimer&) = delete;
    ScopedTimer& operator=(const ScopedTimer&) = delete;

private:
    Timers* timers_;
    std::string_view name_;
};

// One timer's value in a log line, in milliseconds per iteration. For MinMax, `min_ms` too; for All,
// `per_rank_ms` (negative where that rank did not run it).
struct TimerValue {
    std::string name;
    double max_ms = 0;
    double min_ms = 0;
    std::vector<double> per_rank_ms;
};

// The reduction over the ranks of the timers in `names` that run at the level in force, normalized
// by `normalizer` iterations (the log interval's). A collective: every rank calls it with the same
// `names`; `max_over_ranks` is an element-wise maximum over the world (identity for one process).
// The result lists the names some rank ever ran (Timers::ran), in the order of `names`; a rank that
// never ran a name does not count in its minimum.
using MaxOverRanks = std::function<std::vector<double>(std::vector<double>)>;
std::vector<TimerValue> reduce_timers(const Timers& timers, const std::vector<std::string>& names,
                                      double normalizer, TimingLogOption option, int rank, int world,
                                      const MaxOverRanks& max_over_ranks);

// BMD's line: "time (ms) | forward-compute: 12.34 | backward-compute: 23.45"; with MinMax a value
// reads "(10.12, 12.34)"; with All one line per rank, "time (ms) rank 3 | ...", a rank listing only
// the names it ran. Empty (no line) when `values` is empty. Lines are joined with '\n', no trailing one.
std::string format_timers_line(const std::vector<TimerValue>& values, TimingLogOption option, int world);

}  // namespace mds::observe
