// mds-energy-sweep: the same short mds-train run at several micro / global batch sizes (and
// activation recomputation off / on), compared by time, energy and CO2 per million tokens, naming
// the most energy-efficient setting. docs/mds-energy-sweep.md has every flag and the measurement.
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "mds/observe/energy_sweep.h"  // EnergySweepOptions, run_energy_sweep, write_sweep_outputs
#include "mds/util/cli.h"
#include "mds/util/error.h"
#include "mds/util/tool.h"

int main(int argc, char** argv) {
    return mds::run_tool("mds-energy-sweep", [&]() -> int {
        mds::observe::EnergySweepOptions opt;
        std::string micro, global, recompute;
        bool quiet = false, json = false;
        CLI::App app{"Run the same short training with mds-train at every combination of micro and global batch size\n"
                     "(and activation recomputation off / on), each with its own carbon tracker, and compare the steady\n"
                     "part of the runs: ms per iteration, tokens/s, kWh and kg CO2 per million tokens. Prints the table,\n"
                     "names the most energy-efficient setting and writes sweep.csv, sweep.json and sweep.svg.\n"
                     "Example: mds-energy-sweep --micro-batch-sizes 1,2,4 --global-batch-sizes 8,16 -- <mds-train flags>",
                     "mds-energy-sweep"};
        mds::add_version_flag(app, "mds-energy-sweep");
        app.add_option("--micro-batch-sizes", micro, "Micro batch sizes to sweep, comma-separated (e.g. 1,2,4)")
            ->required()->type_name("LIST");
        app.add_option("--global-batch-sizes", global, "Global batch sizes to sweep, comma-separated (e.g. 8,16); a "
                                                       "size that is not a multiple of a micro batch size is reported "
                                                       "as skipped")
            ->required()->type_name("LIST");
        app.add_option("--recompute", recompute, "Also sweep activation recomputation (--checkpoint-activations): "
                                                 "off, on or off,on (default: not swept)")
            ->type_name("LIST");
        app.add_option("--train-iters", opt.train_iters, "Iterations of every run; the first logged one is "
                                                         "subtracted as warm-up (default 20, at least 2)")
            ->check(mds::number_in(2, std::numeric_limits<double>::infinity()));
        app.add_option("--output-dir", opt.output_dir, "Folder of the per-setting logs and emissions.csv files and "
                                                       "of sweep.csv / sweep.json / sweep.svg (default energy-sweep)");
        app.add_option("--mds-train", opt.mds_train, "The mds-train to run (default: the one beside this program)")
            ->type_name("PATH");
        app.add_option("--timeout", opt.timeout_s, "Seconds one setting may run before it is stopped and reported "
                                                   "as failed (default: no limit)")
            ->check(mds::positive_number());
        app.add_option("MDS_TRAIN_FLAGS", opt.train_flags, "mds-train flags of the model and data, after --")
            ->type_name("");
        mds::add_json_flag(app, json);
        app.get_option("--json")->description("Print sweep.json on stdout instead of the table");
        mds::add_quiet_flag(app, quiet);
        app.get_option("--quiet")->description("No progress lines on stderr");
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;

        opt.micro_batch_sizes = mds::observe::parse_batch_size_list("--micro-batch-sizes", micro);
        opt.global_batch_sizes = mds::observe::parse_batch_size_list("--global-batch-sizes", global);
        if (!recompute.empty()) opt.recompute = mds::observe::parse_recompute_list("--recompute", recompute);
        if (opt.train_flags.empty())
            throw mds::UsageError("no mds-train flags: give the model and data flags after --");
        if (!quiet) opt.progress = [](const std::string& m) { mds::print_info(m); };

        const auto result = mds::observe::run_energy_sweep(opt);
        const auto written = mds::observe::write_sweep_outputs(result, opt.output_dir);
        if (!quiet)
            for (const auto& path : written) mds::print_info("wrote " + path);
        if (json)
            std::fputs(mds::observe::sweep_json(result).c_str(), stdout);
        else
            std::fputs(mds::observe::format_sweep_table(result).c_str(), stdout);
        // Exit 1 when no setting could be measured: there is no answer to give.
        return mds::observe::most_energy_efficient(result.rows) ? mds::kExitOk : mds::kExitError;
    });
}
