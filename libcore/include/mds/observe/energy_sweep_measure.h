// What one mds-energy-sweep setting measured, read back from its mds-train log and emissions.csv
// (docs/mds-energy-sweep.md "What is measured"). The steady part of the run is the iterations after
// the first logged one: the first log line's cumulative energy, CO2 and consumed tokens are
// subtracted from the last line's, so start-up (LibTorch, data index, model build) and the first,
// warm-up iteration do not count. Time is summed over the log lines after the first, each line's
// interval being its consumed tokens over its `tokens per second`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mds::observe {

// The fields of one mds-train `iteration N/M | ...` line that the sweep uses.
struct SweepLogPoint {
    std::int64_t iteration = 0;
    std::int64_t consumed_tokens = 0;  // cumulative
    double tokens_per_second = 0;      // over the line's interval (mds's field)
    std::optional<double> energy_kwh;  // cumulative, present with --codecarbon-dir
    std::optional<double> co2_kg;      // cumulative
};

// The line's fields, or nullopt when it is not an iteration line. An iteration line without
// `consumed tokens` or `tokens per second` throws mds::Error (not a log of this mds-train).
std::optional<SweepLogPoint> parse_sweep_log_line(std::string_view line);
// Every iteration line of a log, in order.
std::vector<SweepLogPoint> parse_sweep_log(std::string_view log_text);

// The steady part of one run.
struct SweepMeasurement {
    std::int64_t first_iteration = 0;  // the subtracted line's
    std::int64_t last_iteration = 0;
    std::int64_t iterations = 0;       // last - first
    std::int64_t tokens = 0;           // consumed tokens, last - first
    double seconds = 0;                // sum of the intervals after the first line
    double energy_kwh = 0;             // last - first
    double co2_kg = 0;                 // last - first

    double ms_per_iteration() const;
    double tokens_per_second() const;
    double kwh_per_million_tokens() const;
    double kg_co2_per_million_tokens() const;
};

// Measures from the log lines. Throws mds::Error (with `what_log`, e.g. the log's path, in the
// message) when there are fewer than two lines, the lines carry no energy (no --codecarbon-dir), the
// iterations or tokens do not increase, or a `tokens per second` is not positive.
SweepMeasurement measure_steady_window(const std::vector<SweepLogPoint>& points, const std::string& what_log);

// Where a run's energy came from: the carbon tracker's notes in the log ("codecarbon: CPU energy:
// ..." for RAPL, "codecarbon: CPU power: cpu_load mode ..." / "constant mode ..." for codecarbon's
// power model) and the GPU count of its emissions.csv (NVML's energy counters).
struct SweepEnergySource {
    std::string cpu;  // "RAPL", "power model (cpu_load)", "power model (constant)" or "unknown"
    std::int64_t gpu_count = 0;  // GPUs measured by NVML
    // The CPU was not measured and no GPU was: every energy is a power model's, proportional to
    // time (and, for cpu_load, the machine's CPU load), so the least energy is the least time.
    bool follows_time_only() const { return cpu != "RAPL" && gpu_count == 0; }
    // "CPU from RAPL counters, 8 GPU(s) from NVML, RAM from codecarbon's power model"
    std::string describe() const;
};
SweepEnergySource parse_energy_source(std::string_view log_text, std::int64_t gpu_count);

// The last (cumulative) row of an emissions.csv: the whole run, start-up included.
struct SweepEmissionsTotals {
    double duration_s = 0;
    double energy_kwh = 0;
    double emissions_kg = 0;
    std::int64_t gpu_count = 0;
};
// Reads the columns it needs by their header names. Throws mds::Error naming the file when it has
// no data row or lacks a column.
SweepEmissionsTotals read_emissions_totals(const std::string& csv_text, const std::string& what_file);

}  // namespace mds::observe
