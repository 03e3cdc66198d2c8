// Stragglers and hangs, seen early (Megatron-LM's --log-straggler): at every log interval
// each rank's own step time and data wait per iteration, gathered over the world, become
//   - a report line the last rank prints, in the words of Megatron-LM's StragglerDetector
//     ("MnRtt/Rnk ... MxRtt/Rnk ... MnDRtt/Rnk ... MxDRtt/Rnk", the rank after the slash), with each
//     rank's host name, and with --straggler-minmax-count N > 1 the N slowest and fastest ranks;
//   - TensorBoard scalars under stragglers/;
//   - a `***ALERT: straggler ...` line (the prefix of the loss alerts and of BigScience's slurm-status
//     alerts) when one rank's own step time stays above `alert_ratio` × the median of the others' for
//     `alert_intervals` log intervals in a row;
//   - a note when an interval took far longer per iteration than the recent ones (on every rank:
//     in synchronous training they all wait for each other), which is how a hang starts.
//
// Why a rank's own step time and not the wall-clock step: in synchronous data-parallel training every
// rank's wall-clock step is the same, since the collectives wait for the slowest; what differs is the
// time a rank spends on its own work, outside the waits for the others: its forward-compute and
// backward-compute timers (reading its data included, as Megatron's forward-compute includes
// batch-generator; a node with a slow disk holds the others back as much as a slow GPU). The
// gathering and the timers live in the trainer (trainer/straggler_log.cpp); this file holds the
// judgement only.
// The flags are rows of mds-train's flag table (flags/flag_rows.cpp) writing into StragglerConfig.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace mds::observe {

struct StragglerConfig {
    // Report every log interval when the world has more than one rank (a world of one has nobody to
    // compare with). Default on; --log-straggler (Megatron-LM, where it is off by default) keeps it
    // on, --no-log-straggler (mds) turns it off.
    bool enabled = true;
    // --disable-straggler-on-startup (Megatron-LM: off until its controller port turns it on; mds
    // has no controller, so off for the run).
    bool disabled_on_startup = false;
    // Ranks listed at each end: the line names the slowest and the fastest one; with N > 1 two more
    // lines list the N slowest and the N fastest. Default 1. --straggler-minmax-count (Megatron-LM).
    std::int64_t minmax_count = 1;
    // A rank is slow in an interval when its own step time per iteration is at least this multiple
    // of the median of the other ranks' (and above the median of all). Default 1.25: same-model GPUs
    // differ by a few percent; a throttled GPU, a bad host or a busy CPU costs tens of percent.
    // --straggler-alert-ratio (mds).
    double alert_ratio = 1.25;
    // Log intervals in a row a rank must be slow before the alert: one slow interval is noise (a
    // page-cache miss, a checkpoint write); a persistent one is a node to exclude. Default 3.
    // --straggler-alert-intervals (mds).
    std::int64_t alert_intervals = 3;
    // An interval whose wall time per iteration is at least this multiple of the median of the last
    // `slow_interval_window` intervals' is noted as slow (judged once 3 of them are known).
    double slow_interval_ratio = 3.0;
    std::int64_t slow_interval_window = 10;
};

// One rank's numbers for a log interval, per iteration.
struct RankTimes {
    double step_ms = 0;       // own step time: forward-compute + backward-compute (data wait included)
    double data_wait_ms = 0;  // batch-generator: building the micro batches
};

// A rank judged a straggler: slow for `intervals` log intervals in a row.
struct StragglerAlert {
    int rank = 0;
    std::string host;
    std::int64_t iteration = 0;
    double step_ms = 0;         // this interval's, per iteration
    double others_median_ms = 0;   // the median of the other ranks' step_ms (of its stage)
    double ratio = 0;              // step_ms / others_median_ms
    double data_wait_ms = 0;
    std::int64_t intervals = 0;    // consecutive slow intervals, the alert_intervals-th when it fires
    // One line, no newline:
    //   ***ALERT: straggler at iteration 300: rank 5 (host jean-zay-iam12) takes 1.63x the median step
    //   time of the other ranks for 3 log intervals in a row: 20.10 ms per iteration vs 12.31 ms
    //   (threshold 1.25x; data wait 0.05 ms)
    std::string message;
};

struct StragglerReport {
    // The report; the lines after the first start with "^^^^ " (Megatron-LM's continuation mark).
    std::vector<std::string> lines;
    // (tag, value) for TensorBoard at the interval's last iteration.
    std::vector<std::pair<std::string, double>> scalars;
    std::vector<StragglerAlert> alerts;
    bool slow_interval = false;  // the "slow interval" note is among the lines
};

// The extremes of a set of per-rank values: the smallest and largest value and the rank holding it
// (the lowest rank among equal values), and the median.
struct RankExtremes {
    double min = 0, max = 0, median = 0;
    int min_rank = 0, max_rank = 0;
};
// `values` must not be empty.
RankExtremes rank_extremes(const std::vector<double>& values);
// The median of the values at the indices where `peers` equals peers[skip], except `skip` itself
// (0 when nothing is left).
double median_of_peers(const std::vector<double>& values, const std::vector<int>& peers, std::size_t skip);

class StragglerDetector {
public:
    // `hosts`: each rank's host name, by rank (their number is the world size). `peers`: each rank's
    // comparison group (its pipeline stage: the first and last stages do more work than the middle
    // ones, so a rank is judged against the others of its stage only); empty: all ranks are peers.
    // Throws mds::UsageError naming the flag for a minmax count below 1, a ratio not above 1 or
    // fewer than 1 intervals.
    StragglerDetector(StragglerConfig config, std::vector<std::string> hosts, std::vector<int> peers = {});

    // The log interval of iterations [first_iteration, last_iteration]: every rank's numbers (one
    // per host, by rank) and its wall time per iteration in milliseconds (the same on every rank).
    // Throws mds::Error when `ranks` does not have one entry per host.
    StragglerReport observe(std::int64_t first_iteration, std::int64_t last_iteration,
                            const std::vector<RankTimes>& ranks, double wall_ms_per_iteration);

    const std::vector<std::string>& hosts() const { return hosts_; }
    // Consecutive slow intervals of each rank, up to the last observe().
    const std::vector<std::int64_t>& slow_streaks() const { return streaks_; }

private:
    std::string rank_label(int rank) const;  // "5@jean-zay-iam12"
    void judge(std::int64_t iteration, const std::vector<RankTimes>& ranks, StragglerReport& report);
    void note_slow_interval(const std::vector<RankTimes>& ranks, double wall_ms, StragglerReport& report);

    StragglerConfig config_;
    std::vector<std::string> hosts_;
    std::vector<int> peers_;             // per rank: its comparison group
    std::vector<std::int64_t> streaks_;  // per rank: consecutive slow intervals
    std::deque<double> recent_wall_ms_;  // the last intervals' wall time per iteration
};

}  // namespace mds::observe
