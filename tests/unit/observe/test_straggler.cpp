// The straggler report (mds/observe/straggler.h) on synthetic per-rank times: the report line's
// slowest / fastest ranks with their hosts, --straggler-minmax-count's lists, ties, the alert's
// threshold and persistence (one alert per episode, re-armed after a normal interval), pipeline
// stages judged apart, a world of one, the slow-interval note and the flags' checks.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "mds/observe/straggler.h"
#include "mds/util/error.h"

using namespace mds::observe;

namespace {

std::vector<std::string> hosts(int n) {
    std::vector<std::string> h;
    for (int i = 0; i < n; ++i) h.push_back("node" + std::to_string(i / 2));  // two ranks per node
    return h;
}

std::vector<RankTimes> times(const std::vector<double>& compute, double data = 0.5) {
    std::vector<RankTimes> t;
    for (double c : compute) t.push_back({c, data});
    return t;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

double scalar(const StragglerReport& r, const std::string& tag) {
    for (const auto& [t, v] : r.scalars)
        if (t == tag) return v;
    FAIL("no scalar " << tag);
    return 0;
}

// Feeds `n` intervals of 10 iterations with `compute` every time; returns every alert.
std::vector<StragglerAlert> feed(StragglerDetector& d, const std::vector<double>& compute, int n, std::int64_t& it) {
    std::vector<StragglerAlert> alerts;
    for (int i = 0; i < n; ++i, it += 10) {
        auto r = d.observe(it + 1, it + 10, times(compute), 50.0);
        alerts.insert(alerts.end(), r.alerts.begin(), r.alerts.end());
    }
    return alerts;
}

}  // namespace

TEST_CASE("straggler report: slowest and fastest ranks with their hosts, data wait, TensorBoard scalars") {
    StragglerDetector d({}, hosts(4));
    std::vector<RankTimes> t = {{10.0, 0.2}, {10.5, 3.0}, {16.0, 0.1}, {9.5, 0.4}};
    const auto r = d.observe(11, 20, t, 40.0);
    REQUIRE(r.lines.size() == 1);  // minmax count 1: one line
    const auto& line = r.lines[0];
    INFO(line);
    CHECK(has(line, "straggler report at iteration 20 (ms per iteration over 11-20"));
    CHECK(has(line, "MnRtt/Rnk: 9.50ms/3@node1"));
    CHECK(has(line, "MxRtt/Rnk: 16.00ms/2@node1"));
    CHECK(has(line, "MdRtt: 10.25ms"));
    CHECK(has(line, "MxRtt/MdRtt: 1.56"));
    CHECK(has(line, "MnDRtt/Rnk: 0.10ms/2@node1"));
    CHECK(has(line, "MxDRtt/Rnk: 3.00ms/1@node0"));
    CHECK(scalar(r, "stragglers/max step ms") == 16.0);
    CHECK(scalar(r, "stragglers/min step ms") == 9.5);
    CHECK(scalar(r, "stragglers/median step ms") == 10.25);
    CHECK(scalar(r, "stragglers/max-to-median step") == doctest::Approx(16.0 / 10.25));
    CHECK(scalar(r, "stragglers/slowest rank") == 2);
    CHECK(scalar(r, "stragglers/fastest rank") == 3);
    CHECK(scalar(r, "stragglers/max data-wait ms") == 3.0);
    CHECK(scalar(r, "stragglers/min data-wait ms") == 0.1);
    CHECK(r.alerts.empty());  // one interval is not persistent
    CHECK(!r.slow_interval);
}

TEST_CASE("straggler report: --straggler-minmax-count lists the N slowest and fastest; ties go to the lower rank") {
    StragglerConfig c;
    c.minmax_count = 2;
    StragglerDetector d(c, hosts(5));
    const auto r = d.observe(1, 10, times({12.0, 12.0, 10.0, 10.0, 11.0}), 20.0);
    REQUIRE(r.lines.size() == 3);
    INFO(r.lines[0] << "\n" << r.lines[1] << "\n" << r.lines[2]);
    CHECK(has(r.lines[0], "MnRtt/Rnk: 10.00ms/2@node1"));  // ranks 2 and 3 tie: the lower
    CHECK(has(r.lines[0], "MxRtt/Rnk: 12.00ms/0@node0"));  // ranks 0 and 1 tie: the lower
    CHECK(r.lines[1] == "^^^^ Slowest 2 ranks (own step ms per iteration/rank): 12.00/0@node0, 12.00/1@node0");
    CHECK(r.lines[2] == "^^^^ Fastest 2 ranks (own step ms per iteration/rank): 10.00/2@node1, 10.00/3@node1");
    // All equal: no straggler, the lowest rank at both ends, ratio 1.
    StragglerDetector e({}, hosts(3));
    const auto q = e.observe(1, 10, times({7.0, 7.0, 7.0}), 20.0);
    CHECK(has(q.lines[0], "MnRtt/Rnk: 7.00ms/0@node0 | MxRtt/Rnk: 7.00ms/0@node0"));
    CHECK(scalar(q, "stragglers/max-to-median step") == 1.0);
    // A count as large as the world lists nothing more (the line already has both ends).
    c.minmax_count = 5;
    StragglerDetector f(c, hosts(5));
    CHECK(f.observe(1, 10, times({1, 2, 3, 4, 5}), 20.0).lines.size() == 1);
}

TEST_CASE("straggler alert: persistent for N intervals, once per episode, re-armed after a normal interval") {
    StragglerConfig c;  // 1.25x for 3 intervals
    StragglerDetector d(c, hosts(4));
    std::int64_t it = 0;
    // Rank 1 is 1.5x the others for 2 intervals: not yet.
    CHECK(feed(d, {10, 15, 10, 10}, 2, it).empty());
    CHECK(d.slow_streaks()[1] == 2);
    // A normal interval breaks the streak.
    CHECK(feed(d, {10, 10, 10, 10}, 1, it).empty());
    CHECK(d.slow_streaks()[1] == 0);
    // 3 in a row: one alert, at the third; not again while it stays slow.
    auto alerts = feed(d, {10, 15, 10.2, 9.8}, 3, it);
    REQUIRE(alerts.size() == 1);
    const auto& a = alerts[0];
    CHECK(a.rank == 1);
    CHECK(a.host == "node0");
    CHECK(a.iteration == 60);
    CHECK(a.ratio == doctest::Approx(1.5));
    CHECK(a.others_median_ms == 10.0);
    CHECK(a.intervals == 3);
    CHECK(a.message ==
          "***ALERT: straggler at iteration 60: rank 1 (host node0) takes 1.50x the median step time of the other "
          "ranks for 3 log intervals in a row: 15.00 ms per iteration vs 10.00 ms (threshold 1.25x; data wait 0.50 ms)");
    CHECK(feed(d, {10, 15, 10, 10}, 5, it).empty());
    // Back to normal once, then slow again for 3: a second alert.
    CHECK(feed(d, {10, 10, 10, 10}, 1, it).empty());
    alerts = feed(d, {10, 20, 10, 10}, 3, it);
    REQUIRE(alerts.size() == 1);
    CHECK(alerts[0].rank == 1);
    CHECK(alerts[0].ratio == doctest::Approx(2.0));
}

TEST_CASE("straggler alert: the threshold, against the median of the others, and only the slow rank") {
    StragglerConfig c;
    c.alert_intervals = 1;
    c.alert_ratio = 1.5;
    StragglerDetector d(c, hosts(2));
    std::int64_t it = 0;
    // Just below 1.5x the other rank: nothing (with the median of all, 2 ranks could never reach 1.5x).
    CHECK(feed(d, {10.0, 14.9}, 1, it).empty());
    auto alerts = feed(d, {10.0, 15.0}, 1, it);  // at the threshold
    REQUIRE(alerts.size() == 1);
    CHECK(alerts[0].rank == 1);
    CHECK(has(alerts[0].message, "for 1 log interval:"));
    // The fast rank is never a straggler, whatever the ratio the other way.
    StragglerDetector e(c, hosts(3));
    alerts = feed(e, {1.0, 10.0, 10.0}, 3, it);
    CHECK(alerts.empty());
    // Two slow ranks out of five are both named.
    StragglerDetector f(c, hosts(5));
    alerts = feed(f, {10, 30, 10, 10, 20}, 1, it);
    REQUIRE(alerts.size() == 2);
    CHECK(alerts[0].rank == 1);
    CHECK(alerts[1].rank == 4);
}

TEST_CASE("straggler alert: pipeline stages are judged apart; a world of one and zero timers judge nothing") {
    StragglerConfig c;
    c.alert_intervals = 1;
    // PP=2 x DP=2: stage 1 (ranks 2, 3) holds the LM head and computes twice as long: no straggler.
    StragglerDetector d(c, hosts(4), {0, 0, 1, 1});
    std::int64_t it = 0;
    CHECK(feed(d, {10, 10, 20, 20}, 2, it).empty());
    // Rank 3 slow within its stage: named, with its stage in the message.
    auto alerts = feed(d, {10, 10, 20, 30}, 1, it);
    REQUIRE(alerts.size() == 1);
    CHECK(alerts[0].rank == 3);
    CHECK(has(alerts[0].message, "the median step time of the other ranks of its pipeline stage"));

    StragglerDetector one(c, {"solo"});
    const auto r = one.observe(1, 10, times({12.0}), 30.0);
    CHECK(has(r.lines[0], "MnRtt/Rnk: 12.00ms/0@solo | MxRtt/Rnk: 12.00ms/0@solo"));
    CHECK(r.alerts.empty());
    // Timers that did not run (all zeros): no alert, no division by zero.
    StragglerDetector z(c, hosts(2));
    const auto q = z.observe(1, 10, times({0.0, 0.0}), 30.0);
    CHECK(q.alerts.empty());
    CHECK(scalar(q, "stragglers/max-to-median step") == 1.0);
}

TEST_CASE("straggler report: an interval far slower per iteration than the recent ones is noted") {
    StragglerDetector d({}, hosts(2));
    for (int i = 0; i < 2; ++i) CHECK(!d.observe(1, 10, times({10, 10}), 40.0).slow_interval);
    // Only 2 intervals known: not judged yet.
    CHECK(!d.observe(1, 10, times({10, 10}), 400.0).slow_interval);
    for (int i = 0; i < 3; ++i) d.observe(1, 10, times({10, 10}), 41.0);
    CHECK(!d.observe(1, 10, times({10, 10}), 100.0).slow_interval);  // 2.4x: below 3x
    const auto r = d.observe(191, 200, times({10, 11}), 205.0);
    REQUIRE(r.slow_interval);
    const auto& note = r.lines.back();
    INFO(note);
    CHECK(note.rfind("^^^^ slow interval: 205.00ms per iteration on every rank, 5.00x the median 41.00ms", 0) == 0);
    CHECK(has(note, "the largest own step time was 11.00ms/1@node0"));
}

TEST_CASE("straggler detector: flag checks and mismatched inputs") {
    StragglerConfig c;
    c.minmax_count = 0;
    CHECK_THROWS_AS(StragglerDetector(c, hosts(2)), mds::UsageError);
    c = {};
    c.alert_ratio = 1.0;
    CHECK_THROWS_WITH_AS(StragglerDetector(c, hosts(2)), doctest::Contains("--straggler-alert-ratio"), mds::UsageError);
    c = {};
    c.alert_intervals = 0;
    CHECK_THROWS_WITH_AS(StragglerDetector(c, hosts(2)), doctest::Contains("--straggler-alert-intervals"), mds::UsageError);
    StragglerDetector d({}, hosts(2));
    CHECK_THROWS_AS(d.observe(1, 10, times({1, 2, 3}), 10.0), mds::Error);
    CHECK_THROWS_AS(StragglerDetector({}, hosts(2), {0}), mds::Error);
    CHECK_THROWS_AS(rank_extremes({}), mds::Error);
    CHECK(median_of_peers({1, 2, 3, 4}, {0, 0, 0, 0}, 3) == 2.0);
    CHECK(median_of_peers({1, 2, 3, 4}, {0, 1, 0, 1}, 1) == 4.0);
    CHECK(median_of_peers({5}, {0}, 0) == 0.0);
}
