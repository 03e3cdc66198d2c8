// mds-energy-sweep's results (docs/mds-energy-sweep.md): one row per setting, the most
// energy-efficient one (the least kWh per million tokens), and the same rows as a text table,
// sweep.csv, sweep.json and an SVG bar chart of the energy per million tokens.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "mds/observe/energy_sweep_measure.h"  // SweepMeasurement, SweepEnergySource, SweepEmissionsTotals
#include "mds/observe/energy_sweep_plan.h"     // SweepSetting

namespace mds::observe {

enum class SweepStatus {
    ok,       // ran and measured
    skipped,  // cannot run (setting.skip_reason)
    failed,   // mds-train failed, or its log could not be measured (note says why)
};
// "ok", "skipped", "failed"
const char* sweep_status_name(SweepStatus status);

struct SweepRow {
    SweepSetting setting;
    SweepStatus status = SweepStatus::skipped;
    std::string note;  // why skipped / failed; empty when ok
    std::optional<SweepMeasurement> measurement;  // when ok
    std::optional<SweepEnergySource> source;      // when ok
    std::optional<SweepEmissionsTotals> run_totals;  // the emissions.csv's last row, when it was readable
    std::string log_path;        // mds-train's output ("" for skipped settings)
    std::string emissions_path;  // its emissions.csv
};

struct SweepResult {
    std::vector<SweepRow> rows;
    std::int64_t train_iters = 0;
    std::int64_t seq_length = 0;
};

// Index of the ok row with the least kWh per million tokens (the first on a tie); nullopt when no
// row is ok.
std::optional<std::size_t> most_energy_efficient(const std::vector<SweepRow>& rows);

// The numbers as the table and sweep.csv print them (the CSV holds exactly the table's cells).
std::string format_ms_per_iteration(double ms);   // "12.34"
std::string format_tokens_per_second(double v);   // "41234"
std::string format_per_million_tokens(double v);  // "1.234e-03"

// The table for stdout: a header, one line per setting (the best marked `*`; skipped and failed
// settings with their reason), then where the energy came from and a final line naming the most
// energy-efficient setting (or saying that none ran).
std::string format_sweep_table(const SweepResult& result);
// The final line alone: "most energy-efficient: mbs 4 gbs 16 (1.234e-03 kWh per million tokens)".
std::string format_sweep_best_line(const SweepResult& result);
// One header line, then one line per row: setting,micro_batch_size,global_batch_size,recompute,status,
// ms_per_iteration,tokens_per_second,kwh_per_million_tokens,kg_co2_per_million_tokens,best,note,log.
std::string sweep_csv(const SweepResult& result);
// Everything, numbers at full precision (JSON object with "settings", "best", "energy_source", ...).
std::string sweep_json(const SweepResult& result);
// A bar chart (one bar per ok setting, the best one highlighted; skipped / failed ones labelled
// without a bar), standalone SVG 1.1.
std::string sweep_svg(const SweepResult& result);

}  // namespace mds::observe
