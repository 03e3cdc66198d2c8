// The training loop of mds-train: Megatron-DeepSpeed's
// pretrain() for GPT — data from the GPT sample index, batch-size ramp-up, LR schedule, fp16 loss
// scaling or bf16/fp32, gradient clipping, periodic evaluation, Megatron's log lines on stdout,
// TensorBoard events, carbon accounting, loss alerts, and clean exits on --exit-interval,
// --exit-duration-in-mins, --kill-switch-path, SIGUSR1, SIGTERM and SIGINT.
// Several processes (started by srun, torchrun or mpirun: dist/launch.h) train tensor-, pipeline-
// and data-parallel: each data-parallel rank takes its slice of every global batch as Megatron's
// pretraining sampler gives it, the tensor-parallel ranks of a replica hold shards of the model
// (model/gpt_model.h), the pipeline stages run the micro batches with the 1F1B schedule
// (trainer/pipeline.h), the gradients are averaged over the data-parallel group before clipping,
// and losses are averaged for the log line, which the last rank prints (Megatron's
// print_rank_last); rank 0 prints the rest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mds/dist/launch.h"
#include "mds/observe/loss_alert.h"
#include "mds/flags/train_args.h"

namespace mds::trainer {

// mds-train options that are not Megatron flags.
struct RunOptions {
    std::string device = "auto";     // --device auto|cpu|cuda
    std::string alert_command;       // --alert-command: run on a loss spike / NaN (message in $1)
    observe::LossAlertConfig alert;  // --alert-loss-window, --alert-loss-spike-ratio
    std::string country_iso_code = "FRA";  // --country-iso-code: carbon intensity (ISO 3166 alpha-3)
    double pue = 1.0;                // --pue: power usage effectiveness of the data centre
    std::int64_t threads = 0;        // --threads: CPU threads for LibTorch (0: its default)
    double peak_tflops = 0;          // --peak-tflops: the device's dense peak for MFU (0: from the GPU's name)
    dist::LaunchInfo launch;         // this process's rank, from the launcher's environment
    std::vector<std::string> command_line;  // mds-train's arguments (argv[1..]), for the run ledger and alerts
    std::string run_ledger;          // --run-ledger PATH|none ("": {--save}/runs.jsonl; run_ledger.h)
};

struct RunSummary {
    std::int64_t iterations = 0;
    std::int64_t consumed_samples = 0;
    std::string exit_reason;   // "finished", "exit interval", "SIGUSR1", ...
    double last_loss = 0;      // lm loss of the last iteration
};

// Trains as `args` (resolved by flags::resolve_train_args) say. Throws mds::Error / UsageError.
RunSummary run_training(const flags::TrainArgs& args, const RunOptions& options);

}  // namespace mds::trainer
