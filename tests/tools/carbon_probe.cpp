// carbon_probe SCRIPT: drives mds::observe's carbon accounting for
// tests/crosscheck/test_carbon_tracker.py. One command per line, fields separated by tabs; floats are
// printed as Python's repr() so that they round-trip exactly.
//   intensity ISO            → intensity ISO FOUND(0/1) NAME G_PER_KWH (the world average when not found)
//   ram GB ARM(0/1)          → ram DIMMS WATTS
//   cpuload TDP PERCENT      → cpuload WATTS             cpuconst TDP → cpuconst WATTS
//   meminfo PATH             → meminfo TOTAL_GB USED_GB USED_PERCENT
//   load STAT1 STAT2         → load PERCENT (codecarbon's SystemCPULoadMeter between two /proc/stat)
//   platform                 → platform OS_STRING
//   config KEY VALUE         tracker settings: output_dir output_file country pue wue run_id
//                            project_name sysfs_root procfs_root nvml_library gpu_indices (a,b,..)
//                            cuda_visible_devices cpu_mode (rapl|load|constant) force_cpu_power_w
//                            force_ram_power_w ram_total_gb allow_unknown_country (0/1) arm (0/1)
//   start T                  create the tracker with the fake clock at T s → note TEXT lines, then
//                            started CPU_MODE GPU_COUNT RAM_POWER_W
//   write PATH TEXT          write TEXT (with \n, \t, \\ escapes) to PATH (fake sysfs, procfs, NVML state)
//   measure T | flush T | stop T   set the clock to T, then measure / flush / stop (flush and stop
//                            print: row ENERGY_KWH EMISSIONS_KG)
//   totals                   → totals ENERGY_KWH EMISSIONS_KG
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "mds/observe/carbon_intensity.h"
#include "mds/observe/carbon_tracker.h"
#include "mds/observe/host_info.h"
#include "mds/observe/power_estimates.h"
#include "mds/util/text.h"  // python_float_repr

using namespace mds::observe;

namespace {

class ScriptClock final : public CarbonClock {
public:
    double t = 0;
    double monotonic_seconds() override { return t; }
    std::chrono::system_clock::time_point wall_time() override { return std::chrono::system_clock::now(); }
};

std::string repr(double v) { return mds::python_float_repr(v); }

// "\n", "\t" and "\\" back to a newline, a tab and a backslash.
std::string unescape(const std::string& s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\' || i + 1 == s.size()) {
            out += s[i];
            continue;
        }
        const char c = s[++i];
        out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    }
    return out;
}

std::vector<unsigned> parse_indices(const std::string& s) {
    std::vector<unsigned> v;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');)
        if (!item.empty()) v.push_back(static_cast<unsigned>(std::stoul(item)));
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: carbon_probe SCRIPT\n");
        return 2;
    }
    try {
        std::ifstream script(argv[1]);
        if (!script) throw std::runtime_error(std::string("cannot open ") + argv[1]);
        CarbonTrackerConfig config;
        CarbonTrackerSources sources;
        auto clock = std::make_shared<ScriptClock>();
        sources.clock = clock;
        sources.cuda_visible_devices = std::nullopt;
        std::unique_ptr<CarbonTracker> tracker;
        std::string line;
        while (std::getline(script, line)) {
            std::vector<std::string> f;
            std::stringstream ss(line);
            for (std::string part; std::getline(ss, part, '\t');) f.push_back(part);
            if (f.empty()) continue;
            const std::string& cmd = f[0];
            const auto num = [&](std::size_t i) { return std::stod(f.at(i)); };
            if (cmd == "intensity") {
                const auto* c = find_country_carbon_intensity(f.at(1));
                std::printf("intensity\t%s\t%d\t%s\t%s\n", f[1].c_str(), c ? 1 : 0,
                            c ? std::string(c->country_name).c_str() : "",
                            repr(c ? c->g_co2e_per_kwh : kWorldAverageCarbonIntensity).c_str());
            } else if (cmd == "ram") {
                std::printf("ram\t%d\t%s\n", ram_dimm_count_estimate(num(1)),
                            repr(ram_power_estimate_w(num(1), f.at(2) == "1")).c_str());
            } else if (cmd == "cpuload") {
                std::printf("cpuload\t%s\n", repr(cpu_power_from_load_w(num(1), num(2))).c_str());
            } else if (cmd == "cpuconst") {
                std::printf("cpuconst\t%s\n", repr(cpu_power_constant_w(num(1))).c_str());
            } else if (cmd == "meminfo") {
                const MemInfo m = read_meminfo(f.at(1));
                std::printf("meminfo\t%s\t%s\t%s\n", repr(bytes_to_gb(m.total_bytes)).c_str(),
                            repr(meminfo_used_gb(m)).c_str(), repr(meminfo_used_percent(m)).c_str());
            } else if (cmd == "load") {
                const auto a = read_proc_stat_cpu_times(f.at(1));
                const auto b = read_proc_stat_cpu_times(f.at(2));
                if (!a || !b) throw std::runtime_error("cannot read " + f[1] + " or " + f[2]);
                std::printf("load\t%s\n", repr(cpu_load_percent(*a, *b)).c_str());
            } else if (cmd == "platform") {
                std::printf("platform\t%s\n", host_platform_string().c_str());
            } else if (cmd == "config") {
                const std::string& key = f.at(1);
                const std::string value = f.size() > 2 ? f[2] : "";
                if (key == "output_dir")
                    config.output_dir = value;
                else if (key == "output_file")
                    config.output_file = value;
                else if (key == "country")
                    config.country_iso_code = value;
                else if (key == "pue")
                    config.pue = std::stod(value);
                else if (key == "wue")
                    config.wue = std::stod(value);
                else if (key == "run_id")
                    config.run_id = value;
                else if (key == "project_name")
                    config.project_name = value;
                else if (key == "sysfs_root")
                    sources.sysfs_root = value;
                else if (key == "procfs_root")
                    sources.procfs_root = value;
                else if (key == "nvml_library")
                    sources.nvml_library = value;
                else if (key == "gpu_indices")
                    config.gpu_indices = parse_indices(value);
                else if (key == "cuda_visible_devices")
                    sources.cuda_visible_devices = value;
                else if (key == "cpu_mode")
                    config.cpu_mode = value == "rapl"   ? CpuPowerMode::rapl
                                      : value == "load" ? CpuPowerMode::load
                                                        : CpuPowerMode::constant;
                else if (key == "force_cpu_power_w")
                    config.force_cpu_power_w = std::stod(value);
                else if (key == "force_ram_power_w")
                    config.force_ram_power_w = std::stod(value);
                else if (key == "ram_total_gb")
                    config.ram_total_gb = std::stod(value);
                else if (key == "allow_unknown_country")
                    config.allow_unknown_country = value == "1";
                else if (key == "arm")
                    sources.arm_cpu = value == "1";
                else
                    throw std::runtime_error("unknown config key " + key);
            } else if (cmd == "start") {
                clock->t = num(1);
                tracker = std::make_unique<CarbonTracker>(config, std::move(sources));
                for (const auto& n : tracker->take_new_notes()) std::printf("note\t%s\n", n.c_str());
                std::printf("started\t%s\t%zu\t%s\n", std::string(cpu_power_mode_name(tracker->cpu_mode())).c_str(),
                            tracker->gpu_indices().size(), repr(tracker->ram_power_w()).c_str());
            } else if (cmd == "write") {
                std::ofstream out(f.at(1), std::ios::binary | std::ios::trunc);
                out << unescape(f.size() > 2 ? f[2] : "");
                if (!out) throw std::runtime_error("cannot write " + f[1]);
            } else if (cmd == "measure" || cmd == "flush" || cmd == "stop") {
                if (!tracker) throw std::runtime_error(cmd + " before start");
                clock->t = num(1);
                if (cmd == "measure") {
                    tracker->measure();
                } else {
                    const EmissionsRecord r = cmd == "flush" ? tracker->flush() : tracker->stop();
                    std::printf("row\t%s\t%s\n", repr(r.energy_consumed).c_str(), repr(r.emissions).c_str());
                }
                for (const auto& n : tracker->take_new_notes()) std::printf("note\t%s\n", n.c_str());
            } else if (cmd == "totals") {
                std::printf("totals\t%s\t%s\n", repr(tracker->energy_kwh()).c_str(),
                            repr(tracker->emissions_kg()).c_str());
            } else {
                throw std::runtime_error("bad script line: " + line);
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "carbon_probe: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
