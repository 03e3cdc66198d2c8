// mds-train: GPT / BLOOM pre-training with Megatron-DeepSpeed's flags and log lines, on one process
// or data-parallel over several started by srun, torchrun or mpirun. docs/mds-train.md has every
// flag, docs/parallelism.md the launches.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "mds/data/gpt_dataset_index.h"  // parse_split
#include "mds/dist/launch.h"
#include "mds/observe/loss_alert.h"
#include "mds/flags/dry_run.h"
#include "mds/flags/flag_table.h"  // flags_markdown
#include "mds/flags/output_checks.h"
#include "mds/flags/train_args.h"
#include "mds/flags/train_tokenizer.h"
#include "mds/trainer/run_ledger.h"  // check_ledger_path
#include "mds/trainer/trainer.h"
#include "mds/util/cli.h"
#include "mds/util/error.h"  // UsageError
#include "mds/util/tool.h"

int main(int argc, char** argv) {
    return mds::run_tool("mds-train", [&]() -> int {
        mds::flags::TrainArgs args;
        mds::trainer::RunOptions run;
        CLI::App app{"Pre-train a GPT or BLOOM model with Megatron-DeepSpeed's flags, log lines and TensorBoard tags.\n"
                     "A tr1-13B / tr11-176B slurm script ports by replacing `python pretrain_gpt.py` with mds-train.",
                     "mds-train"};
        mds::add_version_flag(app, "mds-train");
        mds::flags::add_train_flags(app, args);
        auto* g = "mds (not Megatron flags)";
        app.add_option("--device", run.device, "Where to train: auto (the GPU when LibTorch sees one), cpu or cuda")
            ->default_str("auto")->group(g);
        app.add_option("--threads", run.threads, "CPU threads for LibTorch (default: LibTorch's choice)")->group(g);
        app.add_option("--country-iso-code", run.country_iso_code,
                       "ISO 3166 alpha-3 country of the data centre, for the carbon intensity of --codecarbon-dir")
            ->default_str("FRA")->group(g);
        app.add_option("--pue", run.pue, "Power usage effectiveness of the data centre (energy multiplier)")
            ->default_str("1.0")->check(mds::number_in(1.0, 10.0))->group(g);
        app.add_option("--peak-tflops", run.peak_tflops,
                       "Peak TFLOP/s of one device in the training's precision, for the MFU field of the log line "
                       "(default: from the GPU's name for known NVIDIA data-centre GPUs; none on CPUs)")
            ->check(mds::number_in(0.001, 1e6))->group(g);
        mds::observe::add_loss_alert_flags(app, run.alert, run.alert_command);
        app.add_option("--run-ledger", run.run_ledger,
                       "Run ledger file: one JSON line per run (hosts, seed, layout, iterations, checkpoints, stop "
                       "reason; docs/run-ledger.md); none: no ledger")
            ->type_name("PATH|none")->default_str("{--save}/runs.jsonl")->group(g);
        mds::flags::DryRunOptions dry;
        bool json = false;
        mds::flags::add_dry_run_flags(app, dry);
        mds::add_json_flag(app, json);
        // Hidden: prints docs/mds-train.md's flag tables (tests/integration/test_train_flags_doc.sh).
        bool print_flags_markdown = false;
        app.add_flag("--print-flags-markdown", print_flags_markdown)->group("");
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;
        if (print_flags_markdown) {
            const auto markdown =
                mds::flags::flags_markdown(app, {{"--pue", "(1 to 10)"}, {"--json", "(with --dry-run: the report)"}});
            std::fputs(markdown.c_str(), stdout);
            return 0;
        }

        run.command_line.assign(argv + 1, argv + argc);
        run.launch = mds::dist::detect_launch();
        if (run.launch.launcher != "none") args.parallel.world_size = run.launch.world_size;
        // --local_rank (torch.distributed.launch): BMD asserts it is rank % GPUs; mds picks the device from
        // the launcher's local rank, so the two must agree.
        if (args.parallel.local_rank && *args.parallel.local_rank != run.launch.local_rank)
            throw mds::UsageError("--local_rank " + std::to_string(*args.parallel.local_rank) +
                                  ": expected this process's local rank, " + std::to_string(run.launch.local_rank) +
                                  (run.launch.launcher == "none" ? " (no launcher in the environment)"
                                                                 : " (" + run.launch.source + ")"));
        // BMD's initialize sets args.local_rank to this process's device (rank % GPUs on a node): the checkpoint's
        // args then hold the saving process's local rank.
        if (run.launch.launcher != "none") args.parallel.local_rank = run.launch.local_rank;
        for (const auto& w : mds::flags::resolve_train_args(args)) mds::print_warning(w);
        if (args.data.split) (void)mds::data::parse_split(*args.data.split);  // "100,-50,50": usage error now
        if (dry.enabled) {
            if (!dry.vocab_size) dry.vocab_size = static_cast<std::int64_t>(mds::flags::load_tokenizer(args.data).vocab_size());
            const auto report = mds::flags::plan_dry_run(args, dry);
            std::fputs(json ? (mds::flags::dry_run_json(report).dump() + "\n").c_str() : mds::flags::format_dry_run(report).c_str(),
                       stdout);
            return 0;
        }
        // Every folder this rank will write, before the rendezvous and hours of training.
        mds::flags::check_output_folders(args, run.launch.rank, run.launch.world_size, run.launch.local_rank);
        if (run.launch.rank == 0)
            mds::trainer::check_ledger_path(mds::trainer::resolve_ledger_path(run.run_ledger, args.checkpoint.save));
        const auto summary = mds::trainer::run_training(args, run);
        mds::print_info("stopped (" + summary.exit_reason + ") after " + std::to_string(summary.iterations) +
                        " iterations, " + std::to_string(summary.consumed_samples) + " samples");
        return 0;
    });
}
