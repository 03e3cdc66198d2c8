// When mds-train stops, checked between iterations as Megatron's train() does: a stop signal
// (SIGUSR1 / SIGTERM / SIGINT, Megatron-DeepSpeed's DistributedSignalHandler), the kill switch
// (--kill-switch-path), --exit-duration-in-mins, --exit-interval, and the end of the iterations
// (--train-iters, or --train-samples turned into iterations). With several processes the ranks
// agree first: a signal or the kill switch may reach one rank only, and the exit duration is the
// longest rank's (Megatron all-reduces it with MAX).
#pragma once

#include <cstdint>
#include <string>

#include "mds/flags/train_args.h"

namespace mds::trainer {

class Communicator;

// What one rank sees between two iterations.
struct StopInputs {
    int signal = 0;            // trainer::stop_signal_received(): the signal, or 0
    bool kill_switch = false;  // the --kill-switch-path file exists
    double minutes = 0;        // since the process started
};

// The maxima of every rank's inputs (a collective over the world group: every rank calls it).
StopInputs agree_on_stop(const StopInputs& mine, Communicator& comm);

enum class Stop {
    Continue,      // train the next iteration
    Finished,      // the iterations are done: final validation, save, test
    Signal,        // save, then exit
    KillSwitch,    // exit without saving (Megatron-DeepSpeed's kill switch)
    ExitDuration,  // save, then exit
    ExitInterval,  // save, then exit
};

// The decision after `iteration` iterations of `train_iters`, in Megatron's order: signal, kill
// switch, exit duration, exit interval, then the end of training.
Stop should_stop(const flags::ExitArgs& exit, std::int64_t iteration, std::int64_t train_iters, const StopInputs& agreed);

// RunSummary::exit_reason: "finished", "SIGUSR1" (the signal's name), "kill switch", "exit duration",
// "exit interval"; "" for Continue.
std::string stop_reason(Stop stop, const StopInputs& agreed);

}  // namespace mds::trainer
