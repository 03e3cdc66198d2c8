// mds-energy-sweep (docs/mds-energy-sweep.md): the same short training at several micro / global
// batch sizes (and activation recomputation off / on), each a child mds-train process with its own
// carbon tracker, measured from its log (energy_sweep_measure.h) and compared (energy_sweep_report.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mds/observe/energy_sweep_report.h"  // SweepResult

namespace mds::observe {

struct EnergySweepOptions {
    std::vector<std::int64_t> micro_batch_sizes;   // --micro-batch-sizes
    std::vector<std::int64_t> global_batch_sizes;  // --global-batch-sizes
    std::vector<bool> recompute;                   // --recompute; empty: not swept
    std::int64_t train_iters = 20;                 // --train-iters of every setting (at least 2)
    std::string output_dir = "energy-sweep";       // --output-dir
    std::string mds_train;                         // --mds-train; empty: beside this program
    std::vector<std::string> train_flags;          // the mds-train flags after `--`
    double timeout_s = 0;                          // --timeout per setting; 0: none
    // Progress lines ("setting 2/6: mbs 2 gbs 8: running, log ..."); null: silent.
    std::function<void(const std::string&)> progress;
};

// `name` in the folder of the running program (/proc/self/exe), for finding mds-train beside
// mds-energy-sweep.
std::string sibling_executable(const std::string& name);

// Checks the options (mds::UsageError: no runnable setting, a swept flag among train_flags,
// train_iters below 2; mds::Error: mds-train not found or not executable), creates output_dir, then
// runs the runnable settings one after another. A setting whose mds-train fails, times out or
// leaves a log that cannot be measured becomes a failed row; the sweep goes on. Writes nothing but
// the settings' folders: write_sweep_outputs writes the summary files.
SweepResult run_energy_sweep(const EnergySweepOptions& options);

// sweep.csv, sweep.json and sweep.svg in `output_dir`, each written atomically. Returns their paths.
std::vector<std::string> write_sweep_outputs(const SweepResult& result, const std::string& output_dir);

}  // namespace mds::observe
