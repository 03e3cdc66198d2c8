// codecarbon's emissions.csv (specs/ops.md §1.1): the 38 columns of codecarbon v3.2 / 3.3 in
// their order, one record per flush, each row the cumulative total of the run so far. Values are
// written as pandas' to_csv writes them (Python float repr, NaN as an empty field, minimal
// quoting, '\n' line ends). No measurement here: NVML / RAPL readers fill the record.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mds::observe {

// One row. Units as codecarbon's: seconds, kg CO2eq, kWh (cumulative since the start, PUE
// included), W (mean of the measurements, without PUE), litres, GB.
struct EmissionsRecord {
    std::string timestamp;       // local time, "%Y-%m-%dT%H:%M:%S" (emissions_timestamp())
    std::string project_name = "codecarbon";
    std::string run_id;          // UUID v4 (new_run_id()), the same on every row of one run
    std::string experiment_id = "5b0fa12a-3dd7-45bb-9766-cc326314d9f1";  // codecarbon's default
    double duration = 0;         // s since start
    double emissions = 0;        // kg CO2eq
    double emissions_rate = 0;   // kg/s = emissions / duration
    double cpu_power = 0;        // W
    double gpu_power = 0;        // W
    double ram_power = 0;        // W
    double cpu_energy = 0;       // kWh
    double gpu_energy = 0;       // kWh
    double ram_energy = 0;       // kWh
    double energy_consumed = 0;  // kWh = cpu + gpu + ram energy
    double water_consumed = 0;   // L = wue × energy_consumed
    std::string country_name;
    std::string country_iso_code;  // ISO 3166 alpha-3, e.g. "FRA"
    std::string region;
    std::string cloud_provider;    // empty on private infrastructure
    std::string cloud_region;
    std::string os;                // e.g. platform.platform()'s "Linux-6.1.0-...-x86_64-with-glibc2.36"
    std::string python_version;    // empty: no Python in mds
    std::string codecarbon_version;  // the writer's version; mds puts "mds-<version>"
    std::int64_t cpu_count = 0;
    std::string cpu_model;
    std::int64_t gpu_count = 0;
    std::string gpu_model;         // e.g. "8 x NVIDIA A100-SXM4-80GB"
    std::optional<double> longitude;  // empty in offline mode
    std::optional<double> latitude;
    double ram_total_size = 0;     // GB
    std::string tracking_mode = "machine";  // "machine" or "process"
    double cpu_utilization_percent = 0;
    double gpu_utilization_percent = 0;
    double ram_utilization_percent = 0;
    double ram_used_gb = 0;
    std::string on_cloud = "N";    // "Y" / "N"
    double pue = 1.0;
    double wue = 0.0;              // L/kWh
};

inline constexpr std::size_t kEmissionsCsvColumnCount = 38;
// One record of an emissions.csv as pandas writes them (minimal quoting; "a ""b"", c" is one field).
// Fields never span lines in codecarbon's files.
std::vector<std::string> split_csv_record(std::string_view line);

// The header, in codecarbon's order (the field order of its EmissionsData dataclass).
const std::array<std::string_view, kEmissionsCsvColumnCount>& emissions_csv_columns();
// "timestamp,project_name,...,wue\n"
std::string emissions_csv_header_line();
// The record's value for one column as pandas writes it; throws mds::Error for an unknown column.
std::string emissions_csv_value(const EmissionsRecord& record, std::string_view column);
// One row in the standard column order, ending in '\n'.
std::string emissions_csv_row(const EmissionsRecord& record);


// A random UUID version 4 in its 36-character lower-case form.
std::string new_run_id();
// Local time as codecarbon stamps rows: "%Y-%m-%dT%H:%M:%S", no time zone.
std::string emissions_timestamp(std::chrono::system_clock::time_point t = std::chrono::system_clock::now());

// Appends records to an emissions.csv as codecarbon's FileOutput (on_csv_write="append") does:
// a missing or empty file gets the header first; an existing file whose header has the same set of
// columns gets the row in the file's column order; a file with another header (an older codecarbon
// version) is renamed to `<name>.bak` (or `<name>_0.bak`, `<name>_1.bak`, ... when taken) and a new
// file is started. Each row goes out in one write() on an O_APPEND descriptor, so a crash never
// leaves half a row and concurrent appenders do not interleave within a row.
class EmissionsCsvWriter {
public:
    explicit EmissionsCsvWriter(std::string path) : path_(std::move(path)) {}

    void append(const EmissionsRecord& record);

    const std::string& path() const { return path_; }
    // Where the last append moved an incompatible old file, if it did.
    const std::optional<std::string>& last_backup() const { return last_backup_; }

private:
    std::string path_;
    std::optional<std::string> last_backup_;
};

}  // namespace mds::observe
