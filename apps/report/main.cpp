// mds-report: a training's main_log.txt, TensorBoard events, emissions.csv and run ledger turned
// into one self-contained HTML page of charts (and .svg files for a README). docs/mds-report.md
// has every flag and the exit statuses.
#include <cstdio>
#include <string>
#include <vector>

#include "mds/report/report.h"
#include "mds/util/cli.h"
#include "mds/util/tool.h"

int main(int argc, char** argv) {
    return mds::run_tool("mds-report", [&]() -> int {
        mds::report::ReportOptions opt;
        bool quiet = false;
        CLI::App app{"Turn a training's outputs into one self-contained HTML page: loss and validation curves against\n"
                     "consumed tokens, learning rate, batch size, grad norm, loss scale, throughput, TFLOPs, energy and\n"
                     "CO2, with job boundaries and alerts marked, and the values of every chart in a table. Reads\n"
                     "main_log.txt (mds-train's or Megatron-DeepSpeed's lines), events.out.tfevents.*, emissions.csv and\n"
                     "runs.jsonl, named one by one or found under a run folder. The page needs no network and no script.",
                     "mds-report"};
        mds::add_version_flag(app, "mds-report");
        app.add_option("inputs", opt.inputs, "Run folders (searched recursively) or files: a log, an event file, "
                                             "emissions.csv (*.csv), a run ledger (*.jsonl)")
            ->required()->type_name("PATH...");
        app.add_option("-o,--output", opt.output, "The HTML page to write (through a temporary, renamed when complete)")
            ->capture_default_str();
        app.add_option("--svg-dir", opt.svg_dir, "Also write each chart as DIR/<chart>.svg (loss.svg, learning-rate.svg, ...)");
        app.add_option("--title", opt.title, "The page's title (default: \"Training report\")");
        app.add_option("--max-table-rows", opt.max_table_rows, "Rows per series in the value tables under the charts: a longer "
                                                               "series lists evenly spaced values, its last included (0: all)")
            ->capture_default_str();
        mds::add_quiet_flag(app, quiet);
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;

        const auto r = mds::report::write_report(opt);
        if (!quiet)
            mds::print_info(opt.output + ": " + std::to_string(r.charts) + " charts from " + std::to_string(r.files.logs.size()) +
                            " logs (" + std::to_string(r.iterations) + " iteration lines), " +
                            std::to_string(r.files.events.size()) + " event files, " +
                            std::to_string(r.files.emissions.size()) + " emissions.csv, " +
                            std::to_string(r.files.ledgers.size()) + " ledgers" +
                            (r.svg_files ? "; " + std::to_string(r.svg_files) + " .svg files in " + opt.svg_dir : ""));
        return mds::kExitOk;
    });
}
