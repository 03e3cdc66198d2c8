// Megatron's timers (mds/observe/timers.h): accumulation and reset, levels, BMD's line format and
// its normalizer, and the three cross-rank reductions with a simulated world of ranks.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mds/observe/timers.h"
#include "mds/util/error.h"

using namespace mds::observe;

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// The element-wise maximum over `ranks`' contributions, as Communicator::max computes it: each
// rank's reduce_timers call is run with the others' vectors already known.
std::vector<TimerValue> reduce_on(int rank, const std::vector<Timers>& ranks, const std::vector<std::string>& names,
                                  double normalizer, TimingLogOption option) {
    const int world = static_cast<int>(ranks.size());
    std::vector<std::vector<double>> sent(ranks.size());
    for (int r = 0; r < world; ++r)
        reduce_timers(ranks[static_cast<std::size_t>(r)], names, normalizer, option, r, world, [&](std::vector<double> v) {
            sent[static_cast<std::size_t>(r)] = v;
            return v;
        });
    std::vector<double> max = sent[0];
    for (const auto& v : sent)
        for (std::size_t i = 0; i < v.size(); ++i) max[i] = std::max(max[i], v[i]);
    return reduce_timers(ranks[static_cast<std::size_t>(rank)], names, normalizer, option, rank, world,
                         [&](std::vector<double>) { return max; });
}

TimerValue tv(const char* name, double max_ms, double min_ms = 0, std::vector<double> per_rank_ms = {}) {
    TimerValue v;
    v.name = name;
    v.max_ms = max_ms;
    v.min_ms = min_ms;
    v.per_rank_ms = std::move(per_rank_ms);
    return v;
}

// A Timers whose `name` holds about `ms` milliseconds.
void run_for(Timers& t, const std::string& name, int ms) {
    t.start(name);
    sleep_ms(ms);
    t.stop(name);
}

}  // namespace

TEST_CASE("a timer accumulates between start and stop until reset") {
    Timers t;
    CHECK(t.seconds("forward-compute") == 0);
    CHECK_FALSE(t.ran("forward-compute"));
    run_for(t, "forward-compute", 20);
    run_for(t, "forward-compute", 20);
    const double s = t.seconds("forward-compute");
    CHECK(s >= 0.040);
    CHECK(s < 0.5);
    CHECK(t.ran("forward-compute"));
    // A running timer counts up to now.
    t.start("optimizer");
    sleep_ms(10);
    CHECK(t.seconds("optimizer") >= 0.010);
    t.reset();
    CHECK(t.seconds("forward-compute") == 0);
    CHECK(t.ran("forward-compute"));  // BMD lists a timer once it exists
    CHECK(t.seconds("optimizer") < 0.010);
    t.stop("optimizer");  // still running after the reset
    t.reset("optimizer");
    CHECK(t.seconds("optimizer") == 0);
}

TEST_CASE("starting a running timer or stopping a stopped one is an error naming it") {
    Timers t;
    t.start("optimizer");
    CHECK_THROWS_WITH_AS(t.start("optimizer"), doctest::Contains("'optimizer'"), mds::Error);
    t.stop("optimizer");
    CHECK_THROWS_WITH_AS(t.stop("optimizer"), doctest::Contains("not running"), mds::Error);
    CHECK_THROWS_AS(t.stop("never-started"), mds::Error);
}

TEST_CASE("levels: Megatron-LM's, a timer above the level in force never runs nor syncs") {
    CHECK(timer_level("save-checkpoint") == 0);
    CHECK(timer_level("interval-time") == 0);
    // The start-up's (BMD's pretrain() prints them whatever the level).
    CHECK(timer_level("load-checkpoint") == 0);
    CHECK(timer_level("model-and-optimizer-setup") == 0);
    CHECK(timer_level("train/valid/test-data-iterators-setup") == 0);
    CHECK(timer_level("optimizer") == 1);
    CHECK(timer_level("forward-backward") == 1);
    CHECK(timer_level("backward-params-all-reduce") == 1);
    CHECK(timer_level("backward-embedding-all-reduce") == 1);
    CHECK(timer_level("forward-compute") == 2);
    CHECK(timer_level("batch-generator") == 2);
    CHECK(timer_level("forward-send-backward-recv") == 2);
    int syncs = 0;
    Timers t(1, [&] { ++syncs; });
    run_for(t, "forward-compute", 5);
    CHECK(syncs == 0);
    CHECK_FALSE(t.ran("forward-compute"));
    CHECK(t.seconds("forward-compute") == 0);
    run_for(t, "optimizer", 5);
    CHECK(syncs == 2);  // at start and at stop
    CHECK(t.ran("optimizer"));
    Timers zero(0);
    CHECK_FALSE(zero.enabled("optimizer"));
    CHECK(zero.enabled("save-checkpoint"));
    CHECK_THROWS_AS(Timers(3), mds::UsageError);
    CHECK_THROWS_AS(Timers(-1), mds::UsageError);
}

namespace {

// A device whose work queue the test drives: mark() records a mark at the current queue time; the device has
// passed the marks recorded before `done` (a count of marks); reading a mark it has not passed "waits" (counted) and
// completes the queue. Released handles are handed out again.
class QueueClock final : public DeviceClock {
public:
    double queue_ms = 0;     // the device time of the next mark
    std::size_t marks = 0;   // marks recorded so far
    std::size_t done = 0;    // marks the device has passed
    int waits = 0;
    std::vector<double> at;          // each handle's time
    std::vector<std::size_t> order;  // each handle's place in the queue
    std::vector<bool> in_use;
    void catch_up() { done = marks; }
    std::size_t mark() override {
        std::size_t m = 0;
        while (m < in_use.size() && in_use[m]) ++m;
        if (m == in_use.size()) {
            at.push_back(0);
            order.push_back(0);
            in_use.push_back(false);
        }
        at[m] = queue_ms;
        order[m] = marks++;
        in_use[m] = true;
        return m;
    }
    bool passed(std::size_t m) override { return order[m] < done; }
    double elapsed_ms(std::size_t from, std::size_t to) override {
        if (!passed(to)) {
            ++waits;
            catch_up();
        }
        return at[to] - at[from];
    }
    void release(std::size_t m) override { in_use[m] = false; }
    std::size_t held() const { return static_cast<std::size_t>(std::count(in_use.begin(), in_use.end(), true)); }
};

}  // namespace

TEST_CASE("on a device clock the per-step timers never wait; level 0 still syncs and reads the host") {
    auto clock = std::make_shared<QueueClock>();
    int syncs = 0;
    Timers t(2, [&] { ++syncs; }, clock);
    // Two forward-compute intervals of 3 and 4 ms of device time, queued ahead of the device.
    t.start("forward-compute");
    clock->queue_ms += 3;
    t.stop("forward-compute");
    clock->queue_ms += 10;  // other work, not timed
    t.start("forward-compute");
    clock->queue_ms += 4;
    t.stop("forward-compute");
    CHECK(syncs == 0);
    CHECK(clock->waits == 0);
    CHECK(clock->held() == 4);  // the device has passed none of them yet
    // Reading waits for the device (once) and gives the device's time, not the host's.
    CHECK(t.seconds("forward-compute") == doctest::Approx(0.007));
    CHECK(clock->waits == 1);
    CHECK(clock->held() == 0);  // read marks go back to the clock
    // Marks the device has passed are read at the next stop, without waiting: few are ever held.
    for (int i = 0; i < 100; ++i) {
        t.start("backward-compute");
        clock->queue_ms += 1;
        t.stop("backward-compute");
        clock->catch_up();  // the device keeps up
    }
    CHECK(clock->held() <= 2);
    CHECK(clock->at.size() <= 4);
    CHECK(t.seconds("backward-compute") == doctest::Approx(0.100));
    CHECK(clock->waits == 1);
    // A running timer counts up to the device's now; reset drops what was not read and restarts it.
    t.start("optimizer");
    clock->queue_ms += 2;
    CHECK(t.seconds("optimizer") == doctest::Approx(0.002));
    t.reset();
    CHECK(t.seconds("forward-compute") == 0);
    clock->queue_ms += 5;
    t.stop("optimizer");
    CHECK(t.seconds("optimizer") == doctest::Approx(0.005));
    t.start("forward-compute");
    clock->queue_ms += 1;
    t.stop("forward-compute");
    t.reset("forward-compute");
    CHECK(t.seconds("forward-compute") == 0);
    CHECK(clock->held() == 0);
    // Level 0 (once per interval or save): the host's clock after waiting for the device, as BMD's.
    run_for(t, "interval-time", 5);
    CHECK(syncs == 2);
    CHECK(t.seconds("interval-time") >= 0.005);
    CHECK_THROWS_WITH_AS(t.stop("optimizer"), doctest::Contains("not running"), mds::Error);
}

TEST_CASE("ScopedTimer times a scope and does nothing without timers") {
    Timers t;
    {
        ScopedTimer s(&t, "backward-compute");
        sleep_ms(5);
    }
    CHECK(t.seconds("backward-compute") >= 0.005);
    { ScopedTimer none(nullptr, "backward-compute"); }
}

TEST_CASE("BMD's line: names in BMD's order, milliseconds per iteration, two decimals") {
    Timers t;
    run_for(t, "optimizer", 30);
    run_for(t, "forward-compute", 60);
    const auto values = reduce_timers(t, timer_log_order(), 3.0, TimingLogOption::Max, 0, 1, {});
    REQUIRE(values.size() == 2);
    CHECK(values[0].name == "forward-compute");  // BMD's order, not the order they ran in
    CHECK(values[1].name == "optimizer");
    CHECK(values[0].max_ms == doctest::Approx(t.seconds("forward-compute") * 1000 / 3));
    CHECK(values[0].max_ms >= 20.0);
    const std::string line = format_timers_line(values, TimingLogOption::Max, 1);
    CHECK(line.rfind("time (ms) | forward-compute: ", 0) == 0);
    CHECK(line.find(" | optimizer: ") != std::string::npos);
    // Exact format with fixed values.
    std::vector<TimerValue> fixed = {tv("forward-compute", 12.345), tv("optimizer", 3.0)};
    CHECK(format_timers_line(fixed, TimingLogOption::Max, 1) == "time (ms) | forward-compute: 12.35 | optimizer: 3.00");
    // One process: BMD's line whatever the option.
    CHECK(format_timers_line(fixed, TimingLogOption::MinMax, 1) == "time (ms) | forward-compute: 12.35 | optimizer: 3.00");
    CHECK(format_timers_line({}, TimingLogOption::Max, 1).empty());
    CHECK_THROWS_AS(reduce_timers(t, timer_log_order(), 0.0, TimingLogOption::Max, 0, 1, {}), mds::Error);
}

TEST_CASE("a timer that exists but did not run in the interval shows 0.00, as BMD's") {
    Timers t;
    run_for(t, "optimizer", 1);
    t.reset();
    const auto values = reduce_timers(t, timer_log_order(), 1.0, TimingLogOption::Max, 0, 1, {});
    REQUIRE(values.size() == 1);
    CHECK(format_timers_line(values, TimingLogOption::Max, 1) == "time (ms) | optimizer: 0.00");
}

TEST_CASE("the level filters the names of the line") {
    Timers t(1);
    run_for(t, "forward-compute", 1);
    run_for(t, "optimizer", 1);
    const auto values = reduce_timers(t, timer_log_order(), 1.0, TimingLogOption::Max, 0, 1, {});
    REQUIRE(values.size() == 1);
    CHECK(values[0].name == "optimizer");
}

TEST_CASE("--timing-log-option over ranks: max, minmax, all") {
    CHECK(parse_timing_log_option("max") == TimingLogOption::Max);
    CHECK(parse_timing_log_option("minmax") == TimingLogOption::MinMax);
    CHECK(parse_timing_log_option("all") == TimingLogOption::All);
    CHECK_THROWS_AS(parse_timing_log_option("mean"), mds::UsageError);
    CHECK(std::string(timing_log_option_name(TimingLogOption::MinMax)) == "minmax");

    // Three ranks: forward-compute on all (10, 30, 20 ms); forward-recv only on ranks 1 and 2 (a
    // first pipeline stage receives nothing); optimizer only on rank 0.
    std::vector<Timers> ranks(3);
    run_for(ranks[0], "forward-compute", 10);
    run_for(ranks[1], "forward-compute", 40);
    run_for(ranks[2], "forward-compute", 20);
    run_for(ranks[1], "forward-recv", 5);
    run_for(ranks[2], "forward-recv", 15);
    run_for(ranks[0], "optimizer", 5);
    auto ms = [&](int r, const char* n) { return ranks[static_cast<std::size_t>(r)].seconds(n) * 1000.0; };
    const auto& names = timer_log_order();

    SUBCASE("max: the largest of any rank, the same on every rank") {
        for (int r = 0; r < 3; ++r) {
            const auto v = reduce_on(r, ranks, names, 1.0, TimingLogOption::Max);
            REQUIRE(v.size() == 3);
            CHECK(v[0].name == "forward-compute");
            CHECK(v[0].max_ms == doctest::Approx(ms(1, "forward-compute")));
            CHECK(v[1].name == "forward-recv");
            CHECK(v[1].max_ms == doctest::Approx(ms(2, "forward-recv")));
            CHECK(v[2].name == "optimizer");
        }
    }
    SUBCASE("minmax: the minimum leaves out ranks that never ran the timer") {
        const auto v = reduce_on(2, ranks, names, 2.0, TimingLogOption::MinMax);
        REQUIRE(v.size() == 3);
        CHECK(v[0].min_ms == doctest::Approx(ms(0, "forward-compute") / 2));
        CHECK(v[0].max_ms == doctest::Approx(ms(1, "forward-compute") / 2));
        CHECK(v[1].min_ms == doctest::Approx(ms(1, "forward-recv") / 2));  // not rank 0's absent one
        CHECK(v[2].min_ms == doctest::Approx(v[2].max_ms));
        const std::string line = format_timers_line(v, TimingLogOption::MinMax, 3);
        CHECK(line.rfind("time (ms) | forward-compute: (", 0) == 0);
        std::vector<TimerValue> fixed = {tv("optimizer", 2.5, 1.25)};
        CHECK(format_timers_line(fixed, TimingLogOption::MinMax, 3) == "time (ms) | optimizer: (1.25, 2.50)");
    }
    SUBCASE("all: every rank's own values, one line per rank") {
        const auto v = reduce_on(2, ranks, names, 1.0, TimingLogOption::All);
        REQUIRE(v.size() == 3);
        REQUIRE(v[1].per_rank_ms.size() == 3);
        CHECK(v[1].per_rank_ms[0] < 0);  // rank 0 never received
        CHECK(v[1].per_rank_ms[1] == doctest::Approx(ms(1, "forward-recv")));
        CHECK(v[1].per_rank_ms[2] == doctest::Approx(ms(2, "forward-recv")));
        std::vector<TimerValue> fixed = {tv("forward-compute", 3, 1, {1, 2, 3}),
                                         tv("forward-recv", 5, 4, {-1, 4, 5})};
        CHECK(format_timers_line(fixed, TimingLogOption::All, 3) ==
              "time (ms) rank 0 | forward-compute: 1.00\n"
              "time (ms) rank 1 | forward-compute: 2.00 | forward-recv: 4.00\n"
              "time (ms) rank 2 | forward-compute: 3.00 | forward-recv: 5.00");
    }
}
