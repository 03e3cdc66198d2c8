// The straggler report, alert and slow-interval note of one log interval (straggler.h).
#include "mds/observe/straggler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <utility>

#include "mds/util/error.h"
#include "mds/util/median.h"
#include "mds/util/text.h"  // format_fixed

namespace mds::observe {
namespace {

std::string ms(double v) { return format_fixed(v, 2) + "ms"; }

// Ranks ordered by `values`, largest first when `descending`; equal values keep the lower rank
// first, so that the report does not flip between equal ranks from one interval to the next.
std::vector<int> ranks_by(const std::vector<double>& values, bool descending) {
    std::vector<int> order(values.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return descending ? values[static_cast<std::size_t>(a)] > values[static_cast<std::size_t>(b)]
                          : values[static_cast<std::size_t>(a)] < values[static_cast<std::size_t>(b)];
    });
    return order;
}

}  // namespace

RankExtremes rank_extremes(const std::vector<double>& values) {
    if (values.empty()) throw Error("straggler report: no rank's numbers");
    RankExtremes e;
    e.min = e.max = values[0];
    for (std::size_t r = 1; r < values.size(); ++r) {
        if (values[r] < e.min) e.min = values[r], e.min_rank = static_cast<int>(r);
        if (values[r] > e.max) e.max = values[r], e.max_rank = static_cast<int>(r);
    }
    e.median = median(values);
    return e;
}

double median_of_peers(const std::vector<double>& values, const std::vector<int>& peers, std::size_t skip) {
    std::vector<double> others;
    for (std::size_t r = 0; r < values.size(); ++r)
        if (r != skip && peers.at(r) == peers.at(skip)) others.push_back(values[r]);
    return median(std::move(others));
}

StragglerDetector::StragglerDetector(StragglerConfig config, std::vector<std::string> hosts, std::vector<int> peers)
    : config_(config), hosts_(std::move(hosts)), peers_(std::move(peers)), streaks_(hosts_.size(), 0) {
    if (peers_.empty()) peers_.assign(hosts_.size(), 0);
    if (peers_.size() != hosts_.size())
        throw Error("straggler detector: " + std::to_string(peers_.size()) + " peer groups for " +
                    std::to_string(hosts_.size()) + " ranks");
    if (config_.minmax_count < 1)
        throw UsageError("--straggler-minmax-count must be at least 1, got " + std::to_string(config_.minmax_count));
    if (!(config_.alert_ratio > 1.0) || !std::isfinite(config_.alert_ratio))
        throw UsageError("--straggler-alert-ratio must be a number above 1, got " + format_fixed(config_.alert_ratio, 3));
    if (config_.alert_intervals < 1)
        throw UsageError("--straggler-alert-intervals must be at least 1, got " + std::to_string(config_.alert_intervals));
    if (hosts_.empty()) throw Error("straggler detector: no ranks");
}

std::string StragglerDetector::rank_label(int rank) const {
    return std::to_string(rank) + "@" + hosts_[static_cast<std::size_t>(rank)];
}

StragglerReport StragglerDetector::observe(std::int64_t first_iteration, std::int64_t last_iteration,
                                           const std::vector<RankTimes>& ranks, double wall_ms_per_iteration) {
    if (ranks.size() != hosts_.size())
        throw Error("straggler report: " + std::to_string(ranks.size()) + " ranks' numbers for a world of " +
                    std::to_string(hosts_.size()));
    std::vector<double> own, data;
    for (const auto& r : ranks) {
        own.push_back(r.step_ms);
        data.push_back(r.data_wait_ms);
    }
    const RankExtremes c = rank_extremes(own), d = rank_extremes(data);
    // max / median: how far the slowest rank is from the typical one (1 when all agree).
    const double ratio = c.median > 0 ? c.max / c.median : 1.0;

    StragglerReport report;
    // Megatron-LM's StragglerDetector words (Rtt: a rank's traced time per iteration, here its own
    // step time; DRtt: its get_batch time, here batch-generator), with the host after the rank: the
    // host is what a SLURM script excludes.
    const auto at = [&](double v, int rank) { return ms(v) + "/" + rank_label(rank); };
    report.lines.push_back("straggler report at iteration " + std::to_string(last_iteration) + " (ms per iteration over " +
                           std::to_string(first_iteration) + "-" + std::to_string(last_iteration) +
                           "; Rtt: own step time, DRtt: data wait) | MnRtt/Rnk: " + at(c.min, c.min_rank) +
                           " | MxRtt/Rnk: " + at(c.max, c.max_rank) + " | MdRtt: " + ms(c.median) +
                           " | MxRtt/MdRtt: " + format_fixed(ratio, 2) + " | MnDRtt/Rnk: " + at(d.min, d.min_rank) +
                           " | MxDRtt/Rnk: " + at(d.max, d.max_rank));
    const auto world = static_cast<std::int64_t>(ranks.size());
    if (config_.minmax_count > 1 && config_.minmax_count < world) {
        for (const bool slowest : {true, false}) {
            const auto order = ranks_by(own, slowest);
            std::string line = std::string("^^^^ ") + (slowest ? "Slowest " : "Fastest ") +
                               std::to_string(config_.minmax_count) + " ranks (own step ms per iteration/rank):";
            for (std::int64_t i = 0; i < config_.minmax_count; ++i) {
                const int r = order[static_cast<std::size_t>(i)];
                line += std::string(i ? ", " : " ") + format_fixed(own[static_cast<std::size_t>(r)], 2) + "/" + rank_label(r);
            }
            report.lines.push_back(line);
        }
    }
    report.scalars = {{"stragglers/max step ms", c.max},       {"stragglers/min step ms", c.min},
                      {"stragglers/median step ms", c.median}, {"stragglers/max-to-median step", ratio},
                      {"stragglers/slowest rank", c.max_rank}, {"stragglers/fastest rank", c.min_rank},
                      {"stragglers/max data-wait ms", d.max},  {"stragglers/min data-wait ms", d.min}};
    judge(last_iteration, ranks, report);
    note_slow_interval(ranks, wall_ms_per_iteration, report);
    return report;
}

// Each rank against the median of the others of its stage (not of all: with 2 ranks, the median of
// all would sit halfway to the straggler and halve its excess). A streak counts the intervals in a
// row a rank was slow; the alert fires once, when the streak reaches alert_intervals, and again
// only after the rank was not slow for an interval.
void StragglerDetector::judge(std::int64_t iteration, const std::vector<RankTimes>& ranks, StragglerReport& report) {
    std::vector<double> own;
    for (const auto& r : ranks) own.push_back(r.step_ms);
    const bool staged = std::any_of(peers_.begin(), peers_.end(), [&](int p) { return p != peers_[0]; });
    auto stage_median = [&](std::size_t r) {
        std::vector<double> stage;
        for (std::size_t q = 0; q < own.size(); ++q)
            if (peers_[q] == peers_[r]) stage.push_back(own[q]);
        return median(std::move(stage));
    };
    for (std::size_t r = 0; r < ranks.size(); ++r) {
        const double others = median_of_peers(own, peers_, r);
        // Nothing to judge against (a rank alone in its stage, timers that did not run): 0. Above the
        // median of its whole stage too: one fast rank among three must not make the other two look slow.
        const bool slow = others > 0 && own[r] >= config_.alert_ratio * others && own[r] > stage_median(r);
        streaks_[r] = slow ? streaks_[r] + 1 : 0;
        if (streaks_[r] != config_.alert_intervals) continue;
        StragglerAlert a;
        a.rank = static_cast<int>(r);
        a.host = hosts_[r];
        a.iteration = iteration;
        a.step_ms = own[r];
        a.others_median_ms = others;
        a.ratio = own[r] / others;
        a.data_wait_ms = ranks[r].data_wait_ms;
        a.intervals = streaks_[r];
        a.message = "***ALERT: straggler at iteration " + std::to_string(iteration) + ": rank " + std::to_string(r) +
                    " (host " + a.host + ") takes " + format_fixed(a.ratio, 2) + "x the median step time of the other ranks" +
                    (staged ? " of its pipeline stage" : "") + " for " + std::to_string(a.intervals) +
                    (a.intervals == 1 ? " log interval" : " log intervals in a row") + ": " + format_fixed(a.step_ms, 2) +
                    " ms per iteration vs " + format_fixed(others, 2) + " ms (threshold " + format_fixed(config_.alert_ratio, 2) +
                    "x; data wait " + format_fixed(a.data_wait_ms, 2) + " ms)";
        report.alerts.push_back(std::move(a));
    }
}

// A hang begins as an interval far slower than the ones before it on every rank (they wait for each
// other). Whether the time went to computing (every rank's own time grew: a slower clock, a thermal
// limit) or to waiting (a stalled rank, the network, a checkpoint write) the numbers beside it say.
void StragglerDetector::note_slow_interval(const std::vector<RankTimes>& ranks, double wall_ms, StragglerReport& report) {
    if (!(wall_ms > 0) || !std::isfinite(wall_ms)) return;
    if (recent_wall_ms_.size() >= 3) {
        const double typical = median({recent_wall_ms_.begin(), recent_wall_ms_.end()});
        if (typical > 0 && wall_ms >= config_.slow_interval_ratio * typical) {
            double own_max = 0;
            int own_rank = 0;
            for (std::size_t r = 0; r < ranks.size(); ++r)
                if (ranks[r].step_ms > own_max) own_max = ranks[r].step_ms, own_rank = static_cast<int>(r);
            report.lines.push_back("^^^^ slow interval: " + ms(wall_ms) + " per iteration on every rank, " +
                                   format_fixed(wall_ms / typical, 2) + "x the median " + ms(typical) + " of the last " +
                                   std::to_string(recent_wall_ms_.size()) +
                                   " intervals; of it the largest own step time was " + ms(own_max) + "/" +
                                   rank_label(own_rank) +
                                   ", the rest was waiting (collectives, I/O, evaluation, a stopped rank)");
            report.slow_interval = true;
        }
    }
    recent_wall_ms_.push_back(wall_ms);
    while (static_cast<std::int64_t>(recent_wall_ms_.size()) > config_.slow_interval_window) recent_wall_ms_.pop_front();
}

}  // namespace mds::observe
