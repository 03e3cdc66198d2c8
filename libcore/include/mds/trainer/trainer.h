// The training loop of mds-train on one process (CPU, or one GPU): Megatron-DeepSpeed's
// pretrain() for GPT — data from the GPT sample index, batch-size ramp-up, LR schedule, fp16 loss
// scaling or bf16/fp32, gradient clipping, periodic evaluation, Megatron's log lines on stdout,
// TensorBoard events, carbon accounting, loss alerts, and clean exits on --exit-interval,
// --exit-duration-in-mins, --kill-switch-path, SIGUSR1, SIGTERM and SIGINT.
#pragma once

#include <cstdint>
#include <string>

#include "mds/observe/loss_alert.h"
#include "mds/train/train_args.h"

namespace mds::trainer {

// mds-train options that are not Megatron flags.
struct RunOptions {
    std::string device = "auto";     // --device auto|cpu|cuda
    std::string alert_command;       // --alert-command: run on a loss spike / NaN (message in $1)
    observe::LossAlertConfig alert;  // --alert-loss-window, --alert-loss-spike-ratio
    std::string country_iso_code = "FRA";  // --country-iso-code: carbon intensity (ISO 3166 alpha-3)
    double pue = 1.0;                // --pue: power usage effectiveness of the data centre
    std::int64_t threads = 0;        // --threads: CPU threads for LibTorch (0: its default)
};

struct RunSummary {
    std::int64_t iterations = 0;
    std::int64_t consumed_samples = 0;
    std::string exit_reason;   // "finished", "exit interval", "SIGUSR1", ...
    double last_loss = 0;      // lm loss of the last iteration
};

// Trains as `args` (resolved by train::resolve_train_args) say. Throws mds::Error / UsageError.
RunSummary run_training(const train::TrainArgs& args, const RunOptions& options);

}  // namespace mds::trainer
