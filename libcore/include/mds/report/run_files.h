// The other outputs of a training mds-report reads: codecarbon's emissions.csv
// (observe/emissions_csv.h; one cumulative row per flush, a new run_id per process) and the run
// ledger runs.jsonl (docs/run-ledger.md; one JSON object per mds-train process). Read here without
// the trainer area, so that mds-report needs no LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mds::report {

// The emissions.csv columns a report shows.
struct EmissionsRow {
    std::string timestamp;
    std::string run_id;
    double duration_s = 0;
    double emissions_kg = 0;
    double energy_kwh = 0;
    std::size_t line = 0;
};

// Parses a whole emissions.csv (header first; quoted fields as pandas writes them). Throws
// mds::Error "<source>:<line>: ..." for a missing column, a row whose field count differs from the
// header's or a number that does not parse (empty fields, pandas' NaN, read as 0). An unterminated
// last row is left out.
std::vector<EmissionsRow> parse_emissions_csv(std::string_view text, const std::string& source);
std::vector<EmissionsRow> read_emissions_csv(const std::string& path);

// The fields of a ledger line a report shows.
struct LedgerJob {
    std::string run_id;
    std::string status;
    std::string start_time;
    std::optional<std::string> end_time;
    std::optional<std::string> job_id;
    std::vector<std::string> hosts;
    std::int64_t resumed_iteration = 0;
    std::int64_t iteration = 0;
    std::optional<std::string> loaded;
    std::optional<std::string> stop;
    std::size_t line = 0;
};

// Every line of a ledger (blank lines skipped). Throws mds::Error "<source>:<line>: ..." for a
// line that is not a JSON object or lacks run_id / resumed_iteration / iteration.
std::vector<LedgerJob> parse_ledger(std::string_view text, const std::string& source);
std::vector<LedgerJob> read_ledger_jobs(const std::string& path);

}  // namespace mds::report
