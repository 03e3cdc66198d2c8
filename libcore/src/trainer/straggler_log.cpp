// The straggler report of each log interval (observe/straggler.h): every rank's own step time (its
// forward-compute and backward-compute timers: the time it does not spend waiting for the others in
// collectives) and data wait (batch-generator), gathered over the world; the last rank prints the
// report and writes it to TensorBoard, and alerts on a rank that stays slow.
#include <ATen/ATen.h>
#include <unistd.h>  // gethostname

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "trainer_loop.h"

namespace mds::trainer {
namespace {

// The timers it reads (Megatron's names, level 2: they run with --timing-log-level 2, the default).
constexpr const char* kOwnTimers[] = {"forward-compute", "backward-compute"};
constexpr const char* kDataTimer = "batch-generator";

std::string host_name() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
    return buf;
}

}  // namespace

// Every rank's host name, by rank: a collective over the world (each rank sends its name in a
// fixed-size byte tensor). Done once at set-up: host names do not change during a run.
std::vector<std::string> Trainer::rank_hosts() {
    constexpr std::int64_t kLen = 256;
    const std::string mine = host_name().substr(0, kLen - 1);
    at::Tensor t = at::zeros({kLen}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(t.data_ptr<std::uint8_t>(), mine.data(), mine.size());
    std::vector<std::string> hosts;
    for (const auto& g : comm_->all_gather(t, Group::World)) {
        const at::Tensor c = g.to(at::kCPU).contiguous();
        const auto* p = reinterpret_cast<const char*>(c.data_ptr<std::uint8_t>());
        hosts.emplace_back(p, ::strnlen(p, kLen));
    }
    return hosts;
}

void Trainer::setup_stragglers() {
    const auto& config = args_.logging.straggler;
    // The flags are checked on every run, also where no report is made.
    (void)observe::StragglerDetector(config, {"-"});
    if (!config.enabled || config.disabled_on_startup || world_ < 2) return;
    bool timed = true;
    for (const char* name : kOwnTimers) timed = timed && timers_.enabled(name);
    if (!timed) {
        info("straggler report off: --timing-log-level " + std::to_string(timers_.log_level()) +
             " does not run the forward-compute and backward-compute timers it compares (2 does)");
        return;
    }
    std::vector<int> stages;
    for (int r = 0; r < world_; ++r) stages.push_back(comm_->layout().coordinates(r).pp);
    stragglers_.emplace(config, rank_hosts(), std::move(stages));
}

void Trainer::log_stragglers(std::int64_t total_iters) {
    if (!stragglers_ || total_iters <= 0) return;
    const double to_ms_per_iter = 1000.0 / static_cast<double>(total_iters);
    double own_s = 0;
    for (const char* name : kOwnTimers) own_s += timers_.seconds(name);
    // An all-gather of two numbers per rank as one element-wise maximum: each rank fills its own slots
    // and leaves the others at 0, below any time.
    const auto me = static_cast<std::size_t>(comm_->rank());
    std::vector<double> mine(2 * static_cast<std::size_t>(world_), 0.0);
    mine[2 * me] = own_s * to_ms_per_iter;
    mine[2 * me + 1] = timers_.seconds(kDataTimer) * to_ms_per_iter;
    const std::vector<double> all = comm_->max(std::move(mine), Group::World);
    if (!log_rank_) return;

    std::vector<observe::RankTimes> ranks(static_cast<std::size_t>(world_));
    for (std::size_t r = 0; r < ranks.size(); ++r) ranks[r] = {all[2 * r], all[2 * r + 1]};
    const double wall_ms = seconds_since(interval_.start) * to_ms_per_iter;
    const auto report = stragglers_->observe(interval_.first_iteration, iteration_, ranks, wall_ms);
    for (const auto& line : report.lines) print_line(line);
    if (tb_)
        for (const auto& [tag, value] : report.scalars) tb_->add_scalar(tag, value, iteration_);
    for (const auto& alert : report.alerts) {
        print_line(alert.message);
        if (alert_command_) alert_command_->run(alert.message);
    }
}

}  // namespace mds::trainer
