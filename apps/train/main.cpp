// mds-train: GPT / BLOOM pre-training with Megatron-DeepSpeed's flags and log lines (on one
// process for now: CPU, or one GPU). docs/mds-train.md has every flag.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "mds/train/train_args.h"
#include "mds/trainer/trainer.h"
#include "mds/util/cli.h"
#include "mds/util/tool.h"

int main(int argc, char** argv) {
    return mds::run_tool("mds-train", [&]() -> int {
        mds::train::TrainArgs args;
        mds::trainer::RunOptions run;
        CLI::App app{"Pre-train a GPT or BLOOM model with Megatron-DeepSpeed's flags, log lines and TensorBoard tags.\n"
                     "A tr1-13B / tr11-176B slurm script ports by replacing `python pretrain_gpt.py` with mds-train.",
                     "mds-train"};
        mds::add_version_flag(app, "mds-train");
        mds::train::add_train_flags(app, args);
        auto* g = "mds (not Megatron flags)";
        app.add_option("--device", run.device, "Where to train: auto (the GPU when LibTorch sees one), cpu or cuda")
            ->default_str("auto")->group(g);
        app.add_option("--threads", run.threads, "CPU threads for LibTorch (default: LibTorch's choice)")->group(g);
        app.add_option("--alert-command", run.alert_command,
                       "Shell command run on a loss spike or NaN loss, with the ***ALERT message in $1")->group(g);
        app.add_option("--country-iso-code", run.country_iso_code,
                       "ISO 3166 alpha-3 country of the data centre, for the carbon intensity of --codecarbon-dir")
            ->default_str("FRA")->group(g);
        app.add_option("--pue", run.pue, "Power usage effectiveness of the data centre (energy multiplier)")
            ->default_str("1.0")->check(CLI::Range(1.0, 10.0))->group(g);
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;

        if (const char* ws = std::getenv("WORLD_SIZE")) args.parallel.world_size = std::stoll(ws);
        for (const auto& w : mds::train::resolve_train_args(args)) mds::print_warning(w);
        const auto summary = mds::trainer::run_training(args, run);
        mds::print_info("stopped (" + summary.exit_reason + ") after " + std::to_string(summary.iterations) +
                        " iterations, " + std::to_string(summary.consumed_samples) + " samples");
        return 0;
    });
}
