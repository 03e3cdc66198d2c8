// The node's carbon tracker (mds/observe/carbon_tracker.h): codecarbon 3.3's measurement and
// accounting (emissions_tracker.py `_do_measurements`, `_update_emissions`, `_prepare_emissions_data`)
// over NVML, RAPL and procfs readers, with codecarbon's unit constants and arithmetic order so that
// tests/crosscheck/test_carbon_tracker.py can compare rows with codecarbon's to ~1e-12.
#include "mds/observe/carbon_tracker.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>  // getenv
#include <filesystem>
#include <sstream>

#include "mds/observe/carbon_intensity.h"
#include "mds/observe/power_estimates.h"
#include "mds/util/error.h"
#include "mds/util/text.h"  // to_upper, python_float_repr

namespace mds::observe {

namespace {

// codecarbon core/units.py: Energy.JOULES_TO_KWH is 2.77778e-7, not 1/3.6e6 (0.8 ppm more); kept
// so that our kWh equal codecarbon's.
constexpr double kJoulesToKwh = 2.77778e-7;
constexpr double kSecondsToHours = 1.0 / 3600;
// codecarbon flush(): a measurement younger than this is not repeated.
constexpr double kStaleMeasurementS = 0.05;

double millijoules_to_kwh(std::uint64_t mj) { return static_cast<double>(mj) * 1e-3 * kJoulesToKwh; }
double microjoules_to_kwh(std::uint64_t uj) { return static_cast<double>(uj) * 1e-6 * kJoulesToKwh; }
// Energy.from_power_and_time: kW × hours.
double energy_kwh_from_power(double watts, double seconds) { return watts * 0.001 * (seconds * kSecondsToHours); }
// Power.from_energies_and_delay: kW = kWh / hours (0 for no time), returned in W.
double power_w_from_energy(double kwh, double seconds) {
    const double hours = seconds * kSecondsToHours;
    return hours != 0.0 ? kwh / hours * 1000 : 0.0;
}

class SystemClock final : public CarbonClock {
public:
    double monotonic_seconds() override {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }
    std::chrono::system_clock::time_point wall_time() override { return std::chrono::system_clock::now(); }
};

std::string describe_config_error(const std::string& field, const std::string& what) {
    return "carbon tracker: " + field + " " + what;
}

void require(bool ok, const std::string& field, double value, const std::string& expected) {
    if (ok) return;
    std::ostringstream s;
    s << "is " << value << ", expected " << expected;
    throw Error(describe_config_error(field, s.str()));
}

// "0,1,3" → {0, 1, 3}; nullopt when any entry is not a plain integer (GPU UUIDs, MIG ids).
std::optional<std::vector<unsigned>> parse_index_list(const std::string& s) {
    std::vector<unsigned> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');) {
        item.erase(0, item.find_first_not_of(" \t"));
        item.erase(item.find_last_not_of(" \t") + 1);
        if (item.empty() || item.size() > 9 || item.find_first_not_of("0123456789") != std::string::npos)
            return std::nullopt;
        out.push_back(static_cast<unsigned>(std::stoul(item)));
    }
    if (out.empty()) return std::nullopt;
    return out;
}

std::string join_indices(const std::vector<unsigned>& v) {
    std::string s;
    for (const unsigned i : v) {
        if (!s.empty()) s += ',';
        s += std::to_string(i);
    }
    return s;
}

}  // namespace

std::shared_ptr<CarbonClock> system_carbon_clock() { return std::make_shared<SystemClock>(); }

std::string_view cpu_power_mode_name(CpuPowerMode mode) {
    switch (mode) {
        case CpuPowerMode::automatic: return "automatic";
        case CpuPowerMode::rapl: return "rapl";
        case CpuPowerMode::load: return "cpu_load";
        case CpuPowerMode::constant: return "constant";
    }
    return "?";
}

std::optional<std::string> cuda_visible_devices_from_environment() {
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) return std::string(v);
    return std::nullopt;
}

CarbonTracker::CarbonTracker(CarbonTrackerConfig config, CarbonTrackerSources sources)
    : config_(std::move(config)),
      clock_(sources.clock ? std::move(sources.clock) : system_carbon_clock()),
      procfs_root_(sources.procfs_root),
      os_(sources.os) {
    // Config checks first: nothing is opened for a config that cannot work.
    if (config_.output_dir.empty())
        throw Error(describe_config_error("output_dir", "is empty (expected the --codecarbon-dir directory)"));
    if (config_.output_file.empty() || config_.output_file.find('/') != std::string::npos)
        throw Error(describe_config_error("output_file", "'" + config_.output_file + "' is not a plain file name"));
    require(std::isfinite(config_.pue) && config_.pue >= 1.0, "pue", config_.pue,
            "a number >= 1 (facility energy / IT energy)");
    require(std::isfinite(config_.wue) && config_.wue >= 0.0, "wue", config_.wue, "a number of L/kWh >= 0");
    require(std::isfinite(config_.measure_power_secs) && config_.measure_power_secs > 0, "measure_power_secs",
            config_.measure_power_secs, "a number of seconds > 0");
    if (config_.force_cpu_power_w)
        require(std::isfinite(*config_.force_cpu_power_w) && *config_.force_cpu_power_w >= 0, "force_cpu_power_w",
                *config_.force_cpu_power_w, "watts >= 0");
    if (config_.force_ram_power_w)
        require(std::isfinite(*config_.force_ram_power_w) && *config_.force_ram_power_w >= 0, "force_ram_power_w",
                *config_.force_ram_power_w, "watts >= 0");
    if (config_.ram_total_gb)
        require(std::isfinite(*config_.ram_total_gb) && *config_.ram_total_gb > 0, "ram_total_gb",
                *config_.ram_total_gb, "GB > 0");
    if (config_.force_carbon_intensity_g_per_kwh)
        require(
            std::isfinite(*config_.force_carbon_intensity_g_per_kwh) && *config_.force_carbon_intensity_g_per_kwh >= 0,
            "force_carbon_intensity_g_per_kwh", *config_.force_carbon_intensity_g_per_kwh, "g/kWh >= 0");

    // Country: codecarbon's global_energy_mix.json, or the world average when allowed.
    const std::string iso = to_upper(config_.country_iso_code);
    config_.country_iso_code = iso;
    if (const CountryCarbonIntensity* c = find_country_carbon_intensity(iso)) {
        country_name_ = std::string(c->country_name);
        intensity_g_per_kwh_ = c->g_co2e_per_kwh;
    } else if (config_.allow_unknown_country || config_.force_carbon_intensity_g_per_kwh) {
        intensity_g_per_kwh_ = kWorldAverageCarbonIntensity;
        if (!config_.force_carbon_intensity_g_per_kwh)
            add_note("country '" + iso + "' is not in codecarbon's table: using the world average, " +
                     python_float_repr(kWorldAverageCarbonIntensity) + " g CO2eq/kWh");
    } else {
        throw Error(describe_config_error(
            "country_iso_code", "'" + config_.country_iso_code +
                                    "' is not a country of codecarbon's global_energy_mix.json (expected an ISO 3166-1 "
                                    "alpha-3 code such as FRA, USA or DEU; " +
                                    std::to_string(country_carbon_intensities().size()) +
                                    " are known; allow_unknown_country uses the world average)"));
    }
    if (config_.force_carbon_intensity_g_per_kwh) intensity_g_per_kwh_ = *config_.force_carbon_intensity_g_per_kwh;

    // RAM: the size for the estimate and the ram_total_size column.
    std::optional<MemInfo> meminfo;
    const std::string meminfo_path = procfs_root_ + "/meminfo";
    try {
        meminfo = read_meminfo(meminfo_path);
    } catch (const Error& e) {
        if (!config_.ram_total_gb && !config_.force_ram_power_w)
            throw Error(std::string("carbon tracker: ") + e.what() +
                        " (set ram_total_gb or force_ram_power_w to do without)");
        add_note(std::string("RAM use not sampled: ") + e.what());
    }
    ram_total_gb_ = config_.ram_total_gb ? *config_.ram_total_gb : meminfo ? bytes_to_gb(meminfo->total_bytes) : 0.0;
    ram_power_w_ =
        config_.force_ram_power_w ? *config_.force_ram_power_w : ram_power_estimate_w(ram_total_gb_, sources.arm_cpu);

    const CpuInfo cpuinfo = read_cpuinfo(procfs_root_ + "/cpuinfo");
    cpu_model_ = cpuinfo.model;
    cpu_count_ = cpuinfo.logical_count > 0 ? cpuinfo.logical_count : host_cpu_count();

    resolve_cpu(config_, sources);
    resolve_gpus(config_, sources);

    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(config_.output_dir, ec);
    if (ec || !fs::is_directory(config_.output_dir))
        throw Error("carbon tracker: creating the output directory " + config_.output_dir + ": " +
                    (ec ? ec.message() : "not a directory"));
    output_path_ = (fs::path(config_.output_dir) / config_.output_file).string();
    run_id_ = config_.run_id.empty() ? new_run_id() : config_.run_id;

    // The start: baselines only (see the header on codecarbon's start sample).
    start_s_ = last_measured_s_ = clock_->monotonic_seconds();
    if (rapl_) rapl_->read_energy_delta_uj();
    start_cpu_times_ = last_cpu_times_ = read_proc_stat_cpu_times(procfs_root_ + "/stat");
    for (auto& g : gpus_) g.last_mj = gpu_reader_->total_energy_mj(g.index);
}

CarbonTracker::~CarbonTracker() = default;
CarbonTracker::CarbonTracker(CarbonTracker&&) noexcept = default;
CarbonTracker& CarbonTracker::operator=(CarbonTracker&&) noexcept = default;

void CarbonTracker::resolve_cpu(const CarbonTrackerConfig& config, const CarbonTrackerSources& sources) {
    cpu_tdp_w_ = config.force_cpu_power_w ? *config.force_cpu_power_w : kGenericCpuTdpW;
    const std::string tdp_text = python_float_repr(cpu_tdp_w_) + " W " +
                                 (config.force_cpu_power_w ? "(force_cpu_power_w)" : "(codecarbon's generic TDP)");
    // codecarbon: a forced CPU power means the TDP model, even where RAPL could be read.
    const bool try_rapl = config.cpu_mode == CpuPowerMode::rapl ||
                          (config.cpu_mode == CpuPowerMode::automatic && !config.force_cpu_power_w);
    std::string why_not_rapl;
    if (try_rapl) {
        rapl_.emplace(sources.sysfs_root);
        if (rapl_->available()) {
            cpu_mode_ = CpuPowerMode::rapl;
            add_note("CPU energy: " + rapl_->note());
            return;
        }
        if (config.cpu_mode == CpuPowerMode::rapl)
            throw Error("carbon tracker: cpu_mode rapl, but no RAPL package counter can be read (" + rapl_->note() +
                        ")");
        why_not_rapl = "; " + rapl_->note();
        rapl_.reset();
    }
    const std::string stat_path = sources.procfs_root + "/stat";
    const bool have_stat = read_proc_stat_cpu_times(stat_path).has_value();
    if (config.cpu_mode == CpuPowerMode::load && !have_stat)
        throw Error("carbon tracker: cpu_mode load needs the CPU times of " + stat_path + ", which cannot be read");
    if (config.cpu_mode == CpuPowerMode::constant || !have_stat) {
        cpu_mode_ = CpuPowerMode::constant;
        add_note("CPU power: constant mode, 0.5 x TDP " + tdp_text + why_not_rapl);
        return;
    }
    cpu_mode_ = CpuPowerMode::load;
    add_note("CPU power: cpu_load mode, TDP " + tdp_text + " x (0.1 + 0.9 x load^3)" + why_not_rapl);
}

void CarbonTracker::resolve_gpus(const CarbonTrackerConfig& config, CarbonTrackerSources& sources) {
    gpu_reader_ = std::move(sources.gpu_reader);
    if (!gpu_reader_) {
        GpuEnergyReaderOpened opened = open_nvml_energy_reader(sources.nvml_library);
        gpu_reader_ = std::move(opened.reader);
        add_note(opened.note);
    }
    if (!gpu_reader_) {
        if (config.gpu_indices && !config.gpu_indices->empty())
            add_note("GPUs " + join_indices(*config.gpu_indices) +
                     " requested but no GPU energy can be read: gpu_count 0");
        return;
    }
    const unsigned count = gpu_reader_->device_count();
    std::vector<unsigned> chosen;
    if (config.gpu_indices) {
        for (const unsigned i : *config.gpu_indices) {
            if (i >= count)
                throw Error("carbon tracker: gpu_indices has " + std::to_string(i) + ", but NVML reports " +
                            std::to_string(count) + " GPU(s) (expected NVML indices 0.." +
                            (count ? std::to_string(count - 1) : std::string("-1")) + ")");
            chosen.push_back(i);
        }
    } else if (sources.cuda_visible_devices && !sources.cuda_visible_devices->empty()) {
        // codecarbon's default gpu_ids: CUDA_VISIBLE_DEVICES. Entries out of range are ignored
        // (codecarbon warns); UUIDs / MIG ids would need nvmlDeviceGetUUID, so all GPUs are taken.
        if (const auto listed = parse_index_list(*sources.cuda_visible_devices)) {
            for (const unsigned i : *listed) {
                if (i < count)
                    chosen.push_back(i);
                else
                    add_note("CUDA_VISIBLE_DEVICES lists GPU " + std::to_string(i) +
                             ", which NVML does not have: ignored");
            }
        } else {
            add_note("CUDA_VISIBLE_DEVICES='" + *sources.cuda_visible_devices +
                     "' is not a list of indices: covering all " + std::to_string(count) +
                     " GPU(s) (set gpu_indices to choose)");
            for (unsigned i = 0; i < count; ++i) chosen.push_back(i);
        }
    } else {
        for (unsigned i = 0; i < count; ++i) chosen.push_back(i);
    }
    std::sort(chosen.begin(), chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
    gpu_indices_ = chosen;
    // gpu_model as codecarbon builds it: "<n> x <name>" per distinct name in order of appearance,
    // concatenated without a separator.
    std::vector<std::pair<std::string, int>> by_name;
    for (const unsigned i : chosen) {
        Gpu g;
        g.index = i;
        g.name = gpu_reader_->device_name(i);
        auto it = std::find_if(by_name.begin(), by_name.end(), [&](const auto& p) { return p.first == g.name; });
        if (it == by_name.end())
            by_name.emplace_back(g.name, 1);
        else
            ++it->second;
        gpus_.push_back(std::move(g));
    }
    for (const auto& [name, n] : by_name) gpu_model_ += std::to_string(n) + " x " + name;
    if (chosen.size() < count)
        add_note("covering GPU(s) " + join_indices(chosen) + " of the " + std::to_string(count) + " NVML reports");
}

void CarbonTracker::add_note(std::string note) {
    if (!note.empty()) notes_.push_back(std::move(note));
}

std::vector<std::string> CarbonTracker::take_new_notes() {
    std::vector<std::string> out(notes_.begin() + static_cast<std::ptrdiff_t>(notes_taken_), notes_.end());
    notes_taken_ = notes_.size();
    return out;
}

void CarbonTracker::measure_gpus(double seconds, double& energy_kwh, double& power_w) {
    // Sums as codecarbon's GPU.measure_power_and_energy: energies in kWh, powers in kW.
    double power_kw = 0;
    energy_kwh = 0;
    for (auto& g : gpus_) {
        const std::optional<std::uint64_t> now = gpu_reader_->total_energy_mj(g.index);
        if (!now) {
            // Keep the last good reading: the energy of the outage is counted when the counter
            // returns (codecarbon gpu_device.py delta(); without its power-usage fallback).
            g.seconds_since_last_good += seconds;
            if (!g.failing)
                add_note("GPU " + std::to_string(g.index) + ": energy counter unreadable at t=" +
                         python_float_repr(last_measured_s_ + seconds - start_s_) +
                         " s; counted 0 until it reads again");
            g.failing = true;
            continue;
        }
        if (g.failing) add_note("GPU " + std::to_string(g.index) + ": energy counter readable again");
        g.failing = false;
        if (!g.last_mj || *now < *g.last_mj) {
            // No baseline yet, or the counter went back (driver reload): start again from here.
            if (g.last_mj)
                add_note("GPU " + std::to_string(g.index) + ": energy counter went backwards (driver reloaded?)");
            g.last_mj = now;
            g.seconds_since_last_good = 0;
            continue;
        }
        const double kwh = millijoules_to_kwh(*now - *g.last_mj);
        power_kw += power_w_from_energy(kwh, seconds + g.seconds_since_last_good) / 1000;
        energy_kwh += kwh;
        g.last_mj = now;
        g.seconds_since_last_good = 0;
    }
    power_w = power_kw * 1000;
}

void CarbonTracker::measure_cpu(double seconds, const std::optional<CpuTimes>& cpu_times, double& energy_kwh,
                                double& power_w) {
    switch (cpu_mode_) {
        case CpuPowerMode::rapl:
            energy_kwh = microjoules_to_kwh(rapl_->read_energy_delta_uj());
            power_w = power_w_from_energy(energy_kwh, seconds);
            return;
        case CpuPowerMode::load: {
            if (cpu_times && last_cpu_times_) {
                power_w = cpu_power_from_load_w(cpu_tdp_w_, cpu_load_percent(*last_cpu_times_, *cpu_times));
            } else {
                power_w = cpu_power_constant_w(cpu_tdp_w_);  // one unreadable /proc/stat: the middle ground
            }
            energy_kwh = energy_kwh_from_power(power_w, seconds);
            return;
        }
        case CpuPowerMode::constant:
        case CpuPowerMode::automatic:
            power_w = cpu_power_constant_w(cpu_tdp_w_);
            energy_kwh = energy_kwh_from_power(power_w, seconds);
            return;
    }
}

void CarbonTracker::sample_utilization(const std::optional<CpuTimes>& cpu_times) {
    if (cpu_times) {
        if (start_cpu_times_) cpu_utilization_percent_ = cpu_load_percent(*start_cpu_times_, *cpu_times);
        last_cpu_times_ = cpu_times;
    }
    try {
        const MemInfo m = read_meminfo(procfs_root_ + "/meminfo");
        ram_used_gb_sum_ += meminfo_used_gb(m);
        ram_percent_sum_ += meminfo_used_percent(m);
        ++ram_samples_;
    } catch (const Error&) {
        // Informational columns: a missed sample is not worth stopping a measurement for.
    }
}

void CarbonTracker::measure() {
    if (stopped_) return;
    const double now = clock_->monotonic_seconds();
    const double seconds = std::max(0.0, now - last_measured_s_);
    // codecarbon's hardware order: RAM, CPU, GPU; each energy and power × PUE.
    const double ram_w = ram_power_w_;
    const double ram_kwh = energy_kwh_from_power(ram_w, seconds);
    double cpu_kwh = 0, cpu_w = 0, gpu_kwh = 0, gpu_w = 0;
    const std::optional<CpuTimes> cpu_times = read_proc_stat_cpu_times(procfs_root_ + "/stat");
    measure_cpu(seconds, cpu_times, cpu_kwh, cpu_w);
    measure_gpus(seconds, gpu_kwh, gpu_w);
    sample_utilization(cpu_times);
    const double pue = config_.pue;
    const struct {
        double kwh, w;
        double* total;
        double* power_sum;
        double* last_power;
    } parts[] = {
        {ram_kwh, ram_w, &total_ram_kwh_, &ram_power_sum_w_, &last_ram_power_w_},
        {cpu_kwh, cpu_w, &total_cpu_kwh_, &cpu_power_sum_w_, &last_cpu_power_w_},
        {gpu_kwh, gpu_w, &total_gpu_kwh_, &gpu_power_sum_w_, &last_gpu_power_w_},
    };
    for (const auto& p : parts) {
        const double kwh = p.kwh * pue;
        const double w = p.w * 0.001 * pue * 1000;  // Power(kW) × pue, read back in W
        total_energy_kwh_ += kwh;
        total_water_l_ += config_.wue * kwh;
        *p.total += kwh;
        *p.power_sum += w;
        *p.last_power = w;
    }
    ++measurement_count_;
    // Emissions of the energy not yet covered (codecarbon's _update_emissions).
    const double delta_kwh = total_energy_kwh_ - energy_covered_kwh_;
    if (delta_kwh > 0) {
        total_emissions_kg_ += observe::emissions_kg(delta_kwh, intensity_g_per_kwh_);
        energy_covered_kwh_ = total_energy_kwh_;
    }
    last_measured_s_ = now;
}

bool CarbonTracker::measure_if_due() {
    if (stopped_ || clock_->monotonic_seconds() - last_measured_s_ < config_.measure_power_secs) return false;
    measure();
    return true;
}

double CarbonTracker::duration_s() const { return clock_->monotonic_seconds() - start_s_; }

EmissionsRecord CarbonTracker::current_record() const {
    EmissionsRecord r;
    r.timestamp = emissions_timestamp(clock_->wall_time());
    r.project_name = config_.project_name;
    r.run_id = run_id_;
    r.experiment_id = config_.experiment_id;
    r.duration = duration_s();
    r.emissions = total_emissions_kg_;
    r.emissions_rate = r.duration > 0 ? total_emissions_kg_ / r.duration : 0.0;
    const auto mean = [&](double sum, double last) {
        return measurement_count_ > 0 ? sum / static_cast<double>(measurement_count_) : last;
    };
    r.cpu_power = mean(cpu_power_sum_w_, last_cpu_power_w_);
    r.gpu_power = mean(gpu_power_sum_w_, last_gpu_power_w_);
    r.ram_power = mean(ram_power_sum_w_, last_ram_power_w_);
    r.cpu_energy = total_cpu_kwh_;
    r.gpu_energy = total_gpu_kwh_;
    r.ram_energy = total_ram_kwh_;
    r.energy_consumed = total_energy_kwh_;
    r.water_consumed = total_water_l_;
    r.country_name = country_name_;
    r.country_iso_code = config_.country_iso_code;
    r.os = os_;
    r.codecarbon_version = config_.codecarbon_version;
    r.cpu_count = cpu_count_;
    r.cpu_model = cpu_model_;
    r.gpu_count = static_cast<std::int64_t>(gpus_.size());
    r.gpu_model = gpu_model_;
    r.ram_total_size = ram_total_gb_;
    r.tracking_mode = "machine";
    r.cpu_utilization_percent = cpu_utilization_percent_;
    r.gpu_utilization_percent = 0;  // would need nvmlDeviceGetUtilizationRates sampled every second
    r.ram_utilization_percent = ram_samples_ ? ram_percent_sum_ / static_cast<double>(ram_samples_) : 0.0;
    r.ram_used_gb = ram_samples_ ? ram_used_gb_sum_ / static_cast<double>(ram_samples_) : 0.0;
    r.on_cloud = "N";
    r.pue = config_.pue;
    r.wue = config_.wue;
    return r;
}

EmissionsRecord CarbonTracker::flush() {
    if (stopped_) return last_row_ ? *last_row_ : current_record();
    if (clock_->monotonic_seconds() - last_measured_s_ >= kStaleMeasurementS) measure();
    EmissionsRecord row = current_record();
    EmissionsCsvWriter writer(output_path_);
    writer.append(row);
    if (writer.last_backup())
        add_note(output_path_ + " had another codecarbon version's header: moved to " + *writer.last_backup());
    last_row_ = row;
    return row;
}

EmissionsRecord CarbonTracker::stop() {
    if (stopped_) return last_row_ ? *last_row_ : current_record();
    EmissionsRecord row = flush();
    stopped_ = true;
    return row;
}

}  // namespace mds::observe
