#include "mds/trainer/stop_conditions.h"

#include "mds/trainer/stop_signals.h"
#include "mds/trainer/comm.h"

namespace mds::trainer {

StopInputs agree_on_stop(const StopInputs& mine, Communicator& comm) {
    const auto agreed = comm.max({static_cast<double>(mine.signal), mine.kill_switch ? 1.0 : 0.0, mine.minutes}, Group::World);
    StopInputs out;
    out.signal = static_cast<int>(agreed[0]);
    out.kill_switch = agreed[1] > 0;
    out.minutes = agreed[2];
    return out;
}

Stop should_stop(const flags::ExitArgs& exit, std::int64_t iteration, std::int64_t consumed_samples,
                 std::int64_t train_iters, const StopInputs& agreed) {
    if (agreed.signal != 0) return Stop::Signal;
    if (agreed.kill_switch) return Stop::KillSwitch;
    if (exit.exit_duration_in_mins && agreed.minutes > static_cast<double>(*exit.exit_duration_in_mins)) return Stop::ExitDuration;
    if (exit.exit_interval && *exit.exit_interval > 0 && iteration % *exit.exit_interval == 0) return Stop::ExitInterval;
    if (const Stop at = exit_point_reached(exit, iteration, consumed_samples); at != Stop::Continue) return at;
    return iteration < train_iters ? Stop::Continue : Stop::Finished;
}

Stop exit_point_reached(const flags::ExitArgs& exit, std::int64_t iteration, std::int64_t consumed_samples) {
    if (exit.exit_iteration && iteration >= *exit.exit_iteration) return Stop::ExitIteration;
    if (exit.exit_samples && consumed_samples >= *exit.exit_samples) return Stop::ExitSamples;
    return Stop::Continue;
}

std::string stop_reason(Stop stop, const StopInputs& agreed) {
    switch (stop) {
    case Stop::Continue: return "";
    case Stop::Finished: return "finished";
    case Stop::Signal: return signal_name(agreed.signal);
    case Stop::KillSwitch: return "kill switch";
    case Stop::ExitDuration: return "exit duration";
    case Stop::ExitInterval: return "exit interval";
    case Stop::ExitIteration: return "exit iteration";
    case Stop::ExitSamples: return "exit samples";
    }
    return "";
}

}  // namespace mds::trainer
