// When mds-train stops, checked between iterations as Megatron's train() does: a stop signal
// (SIGUSR1 / SIGTERM / SIGINT, Megatron-DeepSpeed's DistributedSignalHandler), the kill switch
// (--kill-switch-path), --exit-duration-in-mins, --exit-interval, mds's absolute --exit-iteration and
// --exit-samples, and the end of the iterations (--train-iters, or --train-samples turned into
// iterations). With several processes the ranks
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
    ExitIteration, // --exit-iteration reached: save, then exit
    ExitSamples,   // --exit-samples reached: save, then exit
};

// The decision after `iteration` iterations of `train_iters`, which consumed `consumed_samples`
// samples, in Megatron's order: signal, kill switch, exit duration, exit interval, then mds's exit
// iteration and exit samples, then the end of training (so an exit on the last iteration skips the
// end-of-training validation, as --exit-interval does in Megatron).
Stop should_stop(const flags::ExitArgs& exit, std::int64_t iteration, std::int64_t consumed_samples,
                 std::int64_t train_iters, const StopInputs& agreed);

// Before the first step: ExitIteration or ExitSamples when a run resumed at `iteration` with
// `consumed_samples` is already at or past --exit-iteration / --exit-samples (nothing to train),
// else Continue.
Stop exit_point_reached(const flags::ExitArgs& exit, std::int64_t iteration, std::int64_t consumed_samples);

// RunSummary::exit_reason: "finished", "SIGUSR1" (the signal's name), "kill switch", "exit duration",
// "exit interval", "exit iteration", "exit samples"; "" for Continue.
std::string stop_reason(Stop stop, const StopInputs& agreed);

}  // namespace mds::trainer
