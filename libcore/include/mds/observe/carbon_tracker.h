// Carbon accounting for `mds-train --codecarbon-dir` (specs/ops.md §1): what codecarbon 3.3's
// OfflineEmissionsTracker measures, for one node. GPU energy from NVML's energy counters
// (gpu_energy.h), CPU energy from the RAPL package counters (rapl_reader.h) or codecarbon's TDP model,
// RAM power from codecarbon's DIMM estimate (power_estimates.h); energies × PUE, emissions = kWh × the
// country's g/kWh (carbon_intensity.h); rows appended to codecarbon's emissions.csv (emissions_csv.h).
//
// One tracker per node, created by one process (local rank 0), covering all the node's GPUs: a
// tracker per rank would count the node's CPU and RAM once per rank, as BigScience's per-rank
// codecarbon files did (§1.5). There is no background thread: the training loop calls
// measure_if_due() every iteration (one clock read unless a measurement is due), flush() at each
// checkpoint and stop() at exit. Not thread-safe: use it from one thread.
//
// Where we differ from codecarbon, and why:
// * the measurement at start only takes the baseline readings; codecarbon also counts its
//   near-zero-length interval as a power sample, which pulls the mean powers toward 0 or a spike;
// * CPU load (cpu_load mode and cpu_utilization_percent) is measured between measurements from
//   /proc/stat, not from 1 s samples; RAM use is sampled at each measurement;
// * gpu_count / gpu_model describe the GPUs the tracker covers (codecarbon: every GPU it sees);
// * an unknown country code is an error unless allow_unknown_country is set; codecarbon logs an
//   error and uses the world average;
// * under SLURM codecarbon sizes RAM from the job's mem=; here it is MemTotal unless ram_total_gb
//   says otherwise. No regional (US state, Nordic zone) intensities, no cloud regions.
// Like codecarbon 3.3.2 (emissions_tracker.py `_do_measurements`), the power columns are multiplied
// by the PUE as the energies are (codecarbon 3.3.0 and specs/ops.md §1.1 scaled energies only).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mds/observe/emissions_csv.h"  // EmissionsRecord, EmissionsCsvWriter
#include "mds/observe/gpu_energy.h"     // GpuEnergyReader
#include "mds/observe/host_info.h"      // CpuTimes, host_platform_string, host_is_arm
#include "mds/observe/rapl_reader.h"    // RaplReader

namespace mds::observe {

// Time as the tracker sees it; tests substitute a fake.
class CarbonClock {
public:
    virtual ~CarbonClock() = default;
    // Seconds on a monotonic clock, for durations (codecarbon: time.perf_counter()).
    virtual double monotonic_seconds() = 0;
    // Wall-clock time, for the timestamp column.
    virtual std::chrono::system_clock::time_point wall_time() = 0;
};
// steady_clock and system_clock.
std::shared_ptr<CarbonClock> system_carbon_clock();

// How CPU energy is obtained.
enum class CpuPowerMode {
    automatic,  // rapl when a package counter is readable and no force_cpu_power is set, else load,
                // else constant (codecarbon's order; force_cpu_power skips RAPL as in codecarbon)
    rapl,       // RAPL package counters; construction fails when none can be read
    load,       // codecarbon's cpu_load mode: TDP × (0.1 + 0.9 × load³), load from /proc/stat
    constant,   // codecarbon's constant mode: TDP × 0.5
};
// "rapl", "cpu_load", "constant" ("automatic" before resolution).
std::string_view cpu_power_mode_name(CpuPowerMode mode);

struct CarbonTrackerConfig {
    // --- Output ---
    // Directory of the CSV (--codecarbon-dir); created with its parents when missing.
    std::string output_dir;
    // File name inside output_dir. With several nodes writing to one directory give each its own
    // name (e.g. "emissions-<hostname>.csv"); rows of one run share run_id, each a running total.
    std::string output_file = "emissions.csv";
    std::string project_name = "codecarbon";                             // codecarbon's default
    std::string experiment_id = "5b0fa12a-3dd7-45bb-9766-cc326314d9f1";  // codecarbon's default
    std::string run_id;                                                  // empty: a new UUID v4
    std::string codecarbon_version = "mds";  // the codecarbon_version column; mds-train puts "mds-<version>"

    // --- Carbon intensity ---
    // ISO 3166-1 alpha-3 code of the grid (case-insensitive); FRA as BigScience on Jean Zay.
    std::string country_iso_code = "FRA";
    // An unknown code is an error at construction unless this is set (or the intensity is forced);
    // then codecarbon's world average (475 g/kWh) is used and country_name is left empty, as
    // codecarbon does.
    bool allow_unknown_country = false;
    // Overrides the country's intensity (codecarbon's force_carbon_intensity_g_co2e_kwh), g/kWh.
    std::optional<double> force_carbon_intensity_g_per_kwh;
    // Power usage effectiveness of the data centre (≥ 1): multiplies every energy and power.
    double pue = 1.0;
    // Water usage effectiveness, L/kWh: water_consumed = wue × energy_consumed.
    double wue = 0.0;

    // --- Hardware ---
    // NVML indices of the GPUs this tracker covers: the node's local GPUs. nullopt: the GPUs listed
    // by CUDA_VISIBLE_DEVICES when it holds integer indices (codecarbon's default), else every GPU
    // NVML reports. An index NVML does not have is an error; without NVML the list is ignored (noted).
    std::optional<std::vector<unsigned>> gpu_indices;
    CpuPowerMode cpu_mode = CpuPowerMode::automatic;
    // TDP (W) for the load / constant modes; codecarbon's force_cpu_power. Default: 85 W, codecarbon's
    // generic value (mds carries no CPU-model → TDP table).
    std::optional<double> force_cpu_power_w;
    // RAM power (W) instead of the DIMM estimate; codecarbon's force_ram_power.
    std::optional<double> force_ram_power_w;
    // RAM size (GB = GiB, as psutil counts) for the estimate instead of /proc/meminfo's MemTotal,
    // e.g. the memory of a SLURM allocation.
    std::optional<double> ram_total_gb;

    // --- Cadence ---
    // measure_if_due() measures when this many seconds have passed; codecarbon's default is 15,
    // BigScience used 60.
    double measure_power_secs = 15.0;
};

// CUDA_VISIBLE_DEVICES from the environment, nullopt when unset.
std::optional<std::string> cuda_visible_devices_from_environment();

// Where the tracker reads the machine; defaults read the real one. Tests point the roots at fake
// trees, give a fake clock and a fake GPU reader (or a fake NVML library).
struct CarbonTrackerSources {
    std::shared_ptr<CarbonClock> clock = system_carbon_clock();
    std::unique_ptr<GpuEnergyReader> gpu_reader;  // nullptr: open_nvml_energy_reader(nvml_library)
    std::string nvml_library = "libnvidia-ml.so.1";
    std::string sysfs_root = "/sys";    // RAPL under <sysfs_root>/class/powercap
    std::string procfs_root = "/proc";  // meminfo, stat, cpuinfo
    std::optional<std::string> cuda_visible_devices = cuda_visible_devices_from_environment();
    std::string os = host_platform_string();  // the os column
    bool arm_cpu = host_is_arm();             // ARM DIMM power in the RAM estimate
};

class CarbonTracker {
public:
    // Resolves the country, the GPUs and the CPU mode, reads the RAM size, creates output_dir and
    // takes the baseline readings (the start of the run). Throws mds::Error for a bad config (the
    // field, the value and what was expected), an unknown country, a GPU index NVML lacks, an
    // explicit rapl mode without readable counters, an unreadable /proc/meminfo when the RAM power
    // is not forced, or an output_dir that cannot be created. A missing NVML or unreadable RAPL is
    // not an error: see notes().
    explicit CarbonTracker(CarbonTrackerConfig config, CarbonTrackerSources sources = {});
    ~CarbonTracker();
    CarbonTracker(const CarbonTracker&) = delete;
    CarbonTracker& operator=(const CarbonTracker&) = delete;
    CarbonTracker(CarbonTracker&&) noexcept;
    CarbonTracker& operator=(CarbonTracker&&) noexcept;

    // Energy and mean power of every component since the previous measurement, added to the
    // totals (× PUE), and the emissions of the new energy. Never throws for a counter that cannot be
    // read: it counts 0 for the interval (a GPU counter's energy is recovered when it reads again).
    void measure();
    // measure() when measure_power_secs have passed since the last measurement; true if it did.
    bool measure_if_due();
    // Measures (unless the last measurement is under 50 ms old, as codecarbon) and appends one
    // cumulative row to the CSV; returns the row. After stop(), writes nothing and returns the last row.
    // Throws mds::Error when the file cannot be written.
    EmissionsRecord flush();
    // The final flush; the tracker measures and writes nothing afterwards. Idempotent.
    EmissionsRecord stop();

    // The row a flush would write now, without measuring.
    EmissionsRecord current_record() const;
    // Totals so far (PUE included): for the iteration log line.
    double energy_kwh() const { return total_energy_kwh_; }
    double emissions_kg() const { return total_emissions_kg_; }
    double duration_s() const;

    const std::string& output_path() const { return output_path_; }
    const std::string& run_id() const { return run_id_; }
    const std::string& country_name() const { return country_name_; }
    double carbon_intensity_g_per_kwh() const { return intensity_g_per_kwh_; }
    CpuPowerMode cpu_mode() const { return cpu_mode_; }  // resolved: never automatic
    double cpu_tdp_w() const { return cpu_tdp_w_; }      // the TDP of the load / constant modes
    double ram_power_w() const { return ram_power_w_; }  // before PUE
    double ram_total_gb() const { return ram_total_gb_; }
    const std::vector<unsigned>& gpu_indices() const { return gpu_indices_; }
    bool stopped() const { return stopped_; }

    // What was found and chosen (NVML, RAPL, GPU selection) and anything that went wrong while
    // measuring, one line each; for the caller to log. take_new_notes() returns the lines added since
    // its previous call.
    const std::vector<std::string>& notes() const { return notes_; }
    std::vector<std::string> take_new_notes();

private:
    struct Gpu {
        unsigned index = 0;
        std::string name;
        std::optional<std::uint64_t> last_mj;  // last good counter reading
        double seconds_since_last_good = 0;    // intervals the counter could not be read
        bool failing = false;                  // noted once per outage
    };
    void resolve_gpus(const CarbonTrackerConfig& config, CarbonTrackerSources& sources);
    void resolve_cpu(const CarbonTrackerConfig& config, const CarbonTrackerSources& sources);
    void add_note(std::string note);
    // Energy (kWh) and mean power (W) over the `seconds` since the previous measurement, before PUE.
    void measure_gpus(double seconds, double& energy_kwh, double& power_w);
    // cpu_times: /proc/stat now, for the load mode and cpu_utilization_percent (nullopt: unreadable).
    void measure_cpu(double seconds, const std::optional<CpuTimes>& cpu_times, double& energy_kwh, double& power_w);
    void sample_utilization(const std::optional<CpuTimes>& cpu_times);

    CarbonTrackerConfig config_;
    std::shared_ptr<CarbonClock> clock_;
    std::unique_ptr<GpuEnergyReader> gpu_reader_;
    std::optional<RaplReader> rapl_;
    std::string procfs_root_;
    std::string os_;
    std::string output_path_;
    std::string run_id_;
    std::string country_name_;
    double intensity_g_per_kwh_ = 0;

    std::vector<Gpu> gpus_;
    std::vector<unsigned> gpu_indices_;
    std::string gpu_model_;
    CpuPowerMode cpu_mode_ = CpuPowerMode::automatic;
    double cpu_tdp_w_ = 0;
    std::string cpu_model_;
    std::int64_t cpu_count_ = 0;
    double ram_power_w_ = 0;
    double ram_total_gb_ = 0;

    // Running state.
    double start_s_ = 0;
    double last_measured_s_ = 0;
    std::optional<CpuTimes> start_cpu_times_, last_cpu_times_;
    double total_cpu_kwh_ = 0, total_gpu_kwh_ = 0, total_ram_kwh_ = 0, total_energy_kwh_ = 0;
    double total_water_l_ = 0;
    double energy_covered_kwh_ = 0;  // energy whose emissions are in total_emissions_kg_
    double total_emissions_kg_ = 0;
    double cpu_power_sum_w_ = 0, gpu_power_sum_w_ = 0, ram_power_sum_w_ = 0;
    double last_cpu_power_w_ = 0, last_gpu_power_w_ = 0, last_ram_power_w_ = 0;
    std::int64_t measurement_count_ = 0;
    double cpu_utilization_percent_ = 0;
    double ram_used_gb_sum_ = 0, ram_percent_sum_ = 0;
    std::int64_t ram_samples_ = 0;
    bool stopped_ = false;
    std::optional<EmissionsRecord> last_row_;
    std::vector<std::string> notes_;
    std::size_t notes_taken_ = 0;
};

}  // namespace mds::observe
