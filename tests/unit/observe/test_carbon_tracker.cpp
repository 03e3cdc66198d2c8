// Carbon tracker: country intensities, codecarbon's CPU / RAM power models, procfs readers, RAPL
// counters in a fake powercap tree (wrap-around, MSR/MMIO duplicates, mirrored dies, unreadable
// files), NVML through a fake libnvidia-ml, and CarbonTracker's accounting with a fake clock
// (energies, PUE, mean powers, emissions, CSV rows, GPU outages, config errors).
#include <doctest/doctest.h>

#include <dlfcn.h>  // dlopen, dlsym: fake_nvml_init_count

#include <cstdlib>  // setenv
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "mds/observe/carbon_intensity.h"
#include "mds/observe/carbon_tracker.h"
#include "mds/observe/power_estimates.h"
#include "mds/util/error.h"
#include "mds/util/text.h"  // python_float_repr
#include "test_support.h"

using mds::test::slurp;

using namespace mds::observe;
namespace fs = std::filesystem;

namespace {

// Writes a file of the fake /proc and /sys trees, creating its folders.
void put_file(const fs::path& p, const std::string& s) {
    fs::create_directories(p.parent_path());
    mds::test::spit(p, s);
}

// codecarbon's unit constants (core/units.py), for expected values.
constexpr double kJ2kWh = 2.77778e-7;
double mj_kwh(double mj) { return mj * 1e-3 * kJ2kWh; }
double uj_kwh(double uj) { return uj * 1e-6 * kJ2kWh; }
double w_s_kwh(double w, double s) { return w * 0.001 * (s * (1.0 / 3600)); }

std::vector<std::map<std::string, std::string>> read_csv(const fs::path& p) {
    std::vector<std::map<std::string, std::string>> rows;
    std::istringstream in(slurp(p));
    std::string line;
    std::getline(in, line);
    std::vector<std::string> header;
    for (std::stringstream h(line); std::getline(h, line, ',');) header.push_back(line);
    while (std::getline(in, line)) {
        std::map<std::string, std::string> row;
        std::stringstream fields(line);
        std::string v;
        for (const auto& name : header) {
            std::getline(fields, v, ',');  // test rows hold no quoted commas
            row[name] = v;
        }
        rows.push_back(row);
    }
    return rows;
}

class FakeClock final : public CarbonClock {
public:
    double t = 1000.0;
    double monotonic_seconds() override { return t; }
    std::chrono::system_clock::time_point wall_time() override {
        return std::chrono::system_clock::time_point(std::chrono::seconds(1'790'000'000 + static_cast<long>(t)));
    }
};

class FakeGpus final : public GpuEnergyReader {
public:
    std::vector<std::string> names;
    std::vector<std::optional<std::uint64_t>> mj;
    unsigned device_count() const override { return static_cast<unsigned>(names.size()); }
    std::string device_name(unsigned i) const override { return names.at(i); }
    std::optional<std::uint64_t> total_energy_mj(unsigned i) override { return mj.at(i); }
};

// A fake machine: powercap tree, procfs files, clock and GPUs.
struct Machine {
    fs::path root;
    std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>();
    FakeGpus* gpus = nullptr;  // owned by the tracker once created

    explicit Machine(const std::string& name) : root(mds::test::scratch_dir("carbon-" + name)) {
        put_file(root / "proc/meminfo",
            "MemTotal:       527994880 kB\nMemFree:         1000000 kB\nMemAvailable:   395996160 kB\n");
        put_file(root / "proc/cpuinfo",
            "processor\t: 0\nmodel name\t: AMD EPYC 7543 32-Core Processor\n\nprocessor\t: 1\n"
            "model name\t: AMD EPYC 7543 32-Core Processor\n");
        put_file(root / "proc/stat", "cpu  1000 0 1000 8000 0 0 0 0 0 0\ncpu0 1 2 3 4\n");
    }
    void rapl_zone(const std::string& zone, const std::string& name, std::uint64_t uj,
                   std::uint64_t max_uj = 262143328850) {
        const fs::path dir = root / "sys/class/powercap" / zone;
        put_file(dir / "name", name + "\n");
        put_file(dir / "energy_uj", std::to_string(uj) + "\n");
        put_file(dir / "max_energy_range_uj", std::to_string(max_uj) + "\n");
    }
    void rapl_set(const std::string& zone, std::uint64_t uj) {
        put_file(root / "sys/class/powercap" / zone / "energy_uj", std::to_string(uj) + "\n");
    }
    CarbonTrackerSources sources(std::vector<std::string> gpu_names = {}, std::vector<std::uint64_t> gpu_mj = {}) {
        CarbonTrackerSources s;
        s.clock = clock;
        auto g = std::make_unique<FakeGpus>();
        g->names = std::move(gpu_names);
        for (auto v : gpu_mj) g->mj.emplace_back(v);
        gpus = g.get();
        s.gpu_reader = std::move(g);
        s.sysfs_root = (root / "sys").string();
        s.procfs_root = (root / "proc").string();
        s.cuda_visible_devices = std::nullopt;
        s.os = "Linux-test";
        s.arm_cpu = false;
        return s;
    }
    CarbonTrackerConfig config() const {
        CarbonTrackerConfig c;
        c.output_dir = (root / "out/codecarbon").string();
        return c;
    }
};

}  // namespace

TEST_CASE("carbon intensity: codecarbon's country table") {
    const auto table = country_carbon_intensities();
    CHECK(table.size() == 213);
    for (std::size_t i = 1; i < table.size(); ++i) CHECK(table[i - 1].iso_code < table[i].iso_code);
    const auto* fra = find_country_carbon_intensity("FRA");
    REQUIRE(fra != nullptr);
    CHECK(fra->country_name == "France");
    CHECK(fra->g_co2e_per_kwh == 56.039);
    CHECK(fra->year == 2023);
    CHECK(find_country_carbon_intensity("usa")->g_co2e_per_kwh == 369.473);
    CHECK(find_country_carbon_intensity("DEU")->country_name == "Germany");
    CHECK(find_country_carbon_intensity("XYZ") == nullptr);
    CHECK(find_country_carbon_intensity("") == nullptr);
    CHECK(find_country_carbon_intensity("FRANCE") == nullptr);
    CHECK(kWorldAverageCarbonIntensity == 475.0);
    CHECK(emissions_kg(1000.0, 56.039) == doctest::Approx(56.039));
}

TEST_CASE("power estimates: codecarbon's RAM DIMM rule and CPU TDP modes") {
    // DIMM counts (codecarbon external/ram.py::_estimate_dimm_count).
    CHECK(ram_dimm_count_estimate(1) == 1);
    CHECK(ram_dimm_count_estimate(2) == 1);
    CHECK(ram_dimm_count_estimate(8) == 2);
    CHECK(ram_dimm_count_estimate(16) == 2);
    CHECK(ram_dimm_count_estimate(31.3) == 4);
    CHECK(ram_dimm_count_estimate(64) == 4);
    CHECK(ram_dimm_count_estimate(125.7) == 8);
    CHECK(ram_dimm_count_estimate(503.5) == 16);  // 64 > 503.5/8: 32 GB DIMMs
    CHECK(ram_dimm_count_estimate(512) == 8);     // 8 x 64 GB
    CHECK(ram_dimm_count_estimate(4096) == 32);   // capped
    // Watts: 5 W per DIMM, 0.9 / 0.8 / 0.7 beyond 4 / 8 / 16, at least 10 W (x86).
    CHECK(ram_power_estimate_w(1, false) == 10.0);
    CHECK(ram_power_estimate_w(32, false) == 20.0);
    CHECK(ram_power_estimate_w(512, false) == doctest::Approx(38.0));
    CHECK(ram_power_estimate_w(503.5, false) == doctest::Approx(70.0));
    CHECK(ram_power_estimate_w(4096, false) == doctest::Approx(20 + 18 + 32 + 0.7 * 5 * 16));
    CHECK(ram_power_estimate_w(8, true) == 3.0);
    CHECK(ram_power_estimate_w(128, true) == doctest::Approx(1.5 * 4 + 1.5 * 0.9 * 4));

    CHECK(cpu_power_from_load_w(85, 0) == doctest::Approx(8.5));
    CHECK(cpu_power_from_load_w(85, 100) == doctest::Approx(85));
    CHECK(cpu_power_from_load_w(85, 50) == doctest::Approx(85 * (0.1 + 0.9 * 0.125)));
    CHECK(cpu_power_from_load_w(85, 150) == doctest::Approx(85));  // clamped
    CHECK(cpu_power_constant_w(85) == 42.5);
}

TEST_CASE("host info: meminfo, /proc/stat and cpuinfo") {
    const auto dir = mds::test::scratch_dir("carbon-host");
    put_file(dir / "meminfo", "MemTotal:       16384000 kB\nMemFree:  100 kB\nMemAvailable:    4096000 kB\nCached: 5 kB\n");
    const MemInfo m = read_meminfo((dir / "meminfo").string());
    CHECK(m.total_bytes == 16384000ull * 1024);
    CHECK(m.available_bytes == 4096000ull * 1024);
    CHECK(meminfo_used_gb(m) == doctest::Approx(12288000.0 * 1024 / (1024.0 * 1024 * 1024)));
    CHECK(meminfo_used_percent(m) == 75.0);
    put_file(dir / "old-meminfo",
        "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 200 kB\nSReclaimable: 50 kB\n");
    CHECK(read_meminfo((dir / "old-meminfo").string()).available_bytes == 400 * 1024);
    put_file(dir / "bad-meminfo", "MemFree: 1 kB\n");
    CHECK_THROWS_WITH_AS(read_meminfo((dir / "bad-meminfo").string()), doctest::Contains("MemTotal"), mds::Error);
    CHECK_THROWS_WITH_AS(read_meminfo((dir / "missing").string()), doctest::Contains("missing"), mds::Error);

    put_file(dir / "stat1", "cpu  100 0 100 700 100 0 0 0 0 0\n");
    put_file(dir / "stat2", "cpu  400 0 100 800 100 0 0 0 50 50\n");  // guest time is inside user / nice
    const auto a = read_proc_stat_cpu_times((dir / "stat1").string());
    const auto b = read_proc_stat_cpu_times((dir / "stat2").string());
    REQUIRE(a);
    REQUIRE(b);
    CHECK(a->total_ticks == 1000);
    CHECK(a->busy_ticks == 200);
    CHECK(b->total_ticks == 1400);
    CHECK(cpu_load_percent(*a, *b) == doctest::Approx(75.0));
    CHECK(cpu_load_percent(*b, *a) == 0.0);
    CHECK_FALSE(read_proc_stat_cpu_times((dir / "missing").string()));

    put_file(dir / "cpuinfo", "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz\n\nprocessor\t: 1\n");
    const CpuInfo info = read_cpuinfo((dir / "cpuinfo").string());
    CHECK(info.model == "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz");
    CHECK(info.logical_count == 2);
    CHECK(read_cpuinfo((dir / "missing").string()).logical_count == 0);
    CHECK(host_platform_string().rfind("Linux-", 0) == 0);
    CHECK(host_cpu_count() >= 1);
}

TEST_CASE("RAPL: package domains, wrap-around, duplicates and mirrors") {
    Machine m("rapl");
    SUBCASE("no powercap tree") {
        RaplReader r((m.root / "nothing").string());
        CHECK_FALSE(r.available());
        CHECK(r.note().find("does not exist") != std::string::npos);
    }
    SUBCASE("packages summed; sub-domains, psys and the MMIO duplicate left out") {
        m.rapl_zone("intel-rapl:0", "package-0", 1'000'000'000, 2'000'000'000);
        m.rapl_zone("intel-rapl:0:0", "core", 5);
        m.rapl_zone("intel-rapl:1", "package-1", 50'000'000);
        m.rapl_zone("intel-rapl:2", "psys", 7);
        m.rapl_zone("intel-rapl-mmio:0", "package-0", 1'000'000'000, 2'000'000'000);
        RaplReader r((m.root / "sys").string());
        REQUIRE(r.available());
        const auto d = r.domains();
        REQUIRE(d.size() == 2);
        CHECK(d[0].name == "package-0");
        CHECK(d[0].dir.find("intel-rapl-mmio:0") != std::string::npos);  // MMIO preferred, as codecarbon
        CHECK(d[1].name == "package-1");
        m.rapl_set("intel-rapl-mmio:0", 1'500'000'000);
        m.rapl_set("intel-rapl:1", 80'000'000);
        CHECK(r.read_energy_delta_uj() == 500'000'000 + 30'000'000);
        // package-0 wraps at 2e9: 1.5e9 → 0.1e9 is 0.6e9 µJ.
        m.rapl_set("intel-rapl-mmio:0", 100'000'000);
        m.rapl_set("intel-rapl:1", 80'000'001);
        CHECK(r.read_energy_delta_uj() == 600'000'000 + 1);
        // Unreadable: 0 for this interval and no baseline; the next reading only re-baselines.
        put_file(m.root / "sys/class/powercap/intel-rapl:1/energy_uj", "garbage\n");
        m.rapl_set("intel-rapl-mmio:0", 100'000'010);
        CHECK(r.read_energy_delta_uj() == 10);
        m.rapl_set("intel-rapl:1", 90'000'000);
        CHECK(r.read_energy_delta_uj() == 0);
        m.rapl_set("intel-rapl:1", 90'000'005);
        CHECK(r.read_energy_delta_uj() == 5);
    }
    SUBCASE("psys when there is no package; nothing readable → unavailable") {
        m.rapl_zone("intel-rapl:0", "psys", 10);
        RaplReader r((m.root / "sys").string());
        REQUIRE(r.available());
        CHECK(r.domains()[0].name == "psys");
        put_file(m.root / "sys/class/powercap/intel-rapl:0/energy_uj", "");  // unreadable
        RaplReader u((m.root / "sys").string());
        CHECK_FALSE(u.available());
        CHECK(u.note().find("cannot read") != std::string::npos);
    }
    SUBCASE("a counter mirroring another die's is dropped once its delta matches too") {
        m.rapl_zone("intel-rapl:0", "package-0", 5'000'000'000);
        m.rapl_zone("intel-rapl:1", "package-1", 5'000'000'300);
        RaplReader r((m.root / "sys").string());
        CHECK(r.domains().size() == 1);  // pending
        CHECK(r.note().find("mirror") != std::string::npos);
        m.rapl_set("intel-rapl:0", 5'100'000'000);
        m.rapl_set("intel-rapl:1", 5'100'000'400);
        CHECK(r.read_energy_delta_uj() == 100'000'000);
        CHECK(r.domains().size() == 1);
        m.rapl_set("intel-rapl:0", 5'200'000'000);
        m.rapl_set("intel-rapl:1", 5'200'000'400);
        CHECK(r.read_energy_delta_uj() == 100'000'000);
    }
    SUBCASE("equal first readings but independent deltas: summed again") {
        m.rapl_zone("intel-rapl:0", "package-0", 5'000'000'000);
        m.rapl_zone("intel-rapl:1", "package-1", 5'000'000'000);
        RaplReader r((m.root / "sys").string());
        m.rapl_set("intel-rapl:0", 5'100'000'000);
        m.rapl_set("intel-rapl:1", 5'900'000'000);
        CHECK(r.read_energy_delta_uj() == 100'000'000 + 900'000'000);
        CHECK(r.domains().size() == 2);
    }
}

TEST_CASE("NVML through dlopen: missing library, fake driver, init failure") {
    const auto dir = mds::test::scratch_dir("carbon-nvml");
    SUBCASE("missing library is a note") {
        const auto opened = open_nvml_energy_reader((dir / "libnvidia-ml.so.1").string());
        CHECK(opened.reader == nullptr);
        CHECK(opened.note.find("NVML not available") != std::string::npos);
    }
    SUBCASE("fake driver") {
        put_file(dir / "state", "NVIDIA A100-SXM4-80GB\t1000\nNVIDIA A100-SXM4-80GB\terr\n");
        ::setenv("MDS_FAKE_NVML_STATE", (dir / "state").c_str(), 1);
        void* lib = ::dlopen(MDS_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
        REQUIRE(lib != nullptr);
        const auto init_count = reinterpret_cast<int (*)()>(::dlsym(lib, "fake_nvml_init_count"));
        REQUIRE((init_count != nullptr));
        {
            auto opened = open_nvml_energy_reader(MDS_FAKE_NVML);
            REQUIRE(opened.reader != nullptr);
            CHECK(init_count() == 1);
            CHECK(opened.note == "NVML: 2 GPU(s)");
            CHECK(opened.reader->device_count() == 2);
            CHECK(opened.reader->device_name(1) == "NVIDIA A100-SXM4-80GB");
            CHECK(opened.reader->total_energy_mj(0) == std::optional<std::uint64_t>(1000));
            CHECK_FALSE(opened.reader->total_energy_mj(1));
            CHECK_FALSE(opened.reader->total_energy_mj(7));
        }
        CHECK(init_count() == 0);  // nvmlShutdown when the reader goes
        put_file(dir / "state", "init_error 9\n");
        const auto failed = open_nvml_energy_reader(MDS_FAKE_NVML);
        CHECK(failed.reader == nullptr);
        CHECK(failed.note.find("nvmlInit_v2 failed: NVML error 9 (Driver Not Loaded)") != std::string::npos);
        ::dlclose(lib);
        ::unsetenv("MDS_FAKE_NVML_STATE");
    }
    SUBCASE("a library without the symbols") {
        const auto opened = open_nvml_energy_reader("libc.so.6");
        CHECK(opened.reader == nullptr);
        CHECK(opened.note.find("nvmlInit_v2 not found") != std::string::npos);
    }
}

TEST_CASE("carbon tracker: RAPL + 2 GPUs + RAM, PUE, emissions and cumulative rows") {
    Machine m("rows");
    m.rapl_zone("intel-rapl:0", "package-0", 1'000'000'000);
    auto config = m.config();
    config.pue = 1.2;
    config.wue = 1.8;
    config.project_name = "tr11-176B-ml";
    CarbonTracker t(config, m.sources({"NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"}, {5'000'000, 7'000'000}));
    CHECK(t.cpu_mode() == CpuPowerMode::rapl);
    CHECK(t.country_name() == "France");
    CHECK(t.gpu_indices() == std::vector<unsigned>{0, 1});
    const double ram_gb = 527994880.0 * 1024 / (1024.0 * 1024 * 1024);
    CHECK(t.ram_total_gb() == doctest::Approx(ram_gb));
    CHECK(t.ram_power_w() == doctest::Approx(ram_power_estimate_w(ram_gb, false)));

    // 15 s: GPUs +6 kJ and +3 kJ, CPU +1.5 kJ.
    m.clock->t += 15;
    m.gpus->mj = {5'000'000 + 6'000'000, 7'000'000 + 3'000'000};
    m.rapl_set("intel-rapl:0", 2'500'000'000);
    t.measure();
    // 45 s more: GPUs +18 kJ, +9 kJ; CPU +4.5 kJ.
    m.clock->t += 45;
    m.gpus->mj = {11'000'000 + 18'000'000, 10'000'000 + 9'000'000};
    m.rapl_set("intel-rapl:0", 7'000'000'000);
    const EmissionsRecord r = t.flush();

    const double pue = 1.2;
    const double gpu = mj_kwh(9'000'000 + 27'000'000) * pue;
    const double cpu = uj_kwh(6'000'000'000) * pue;
    const double ram = w_s_kwh(t.ram_power_w(), 60) * pue;
    CHECK(r.gpu_energy == doctest::Approx(gpu).epsilon(1e-12));
    CHECK(r.cpu_energy == doctest::Approx(cpu).epsilon(1e-12));
    CHECK(r.ram_energy == doctest::Approx(ram).epsilon(1e-12));
    CHECK(r.energy_consumed == doctest::Approx(gpu + cpu + ram).epsilon(1e-12));
    CHECK(t.energy_kwh() == r.energy_consumed);
    CHECK(r.emissions == doctest::Approx((gpu + cpu + ram) * 56.039 / 1000).epsilon(1e-12));
    CHECK(t.emissions_kg() == r.emissions);
    CHECK(r.water_consumed == doctest::Approx(1.8 * (gpu + cpu + ram)).epsilon(1e-12));
    CHECK(r.duration == 60.0);
    CHECK(r.emissions_rate == doctest::Approx(r.emissions / 60));
    // Mean of the two interval powers, × PUE (as codecarbon 3.3.2): GPUs 600 W then 600 W.
    CHECK(r.gpu_power == doctest::Approx(600.0 * mj_kwh(1) / (1e-3 / 3.6e6) * pue).epsilon(1e-9));
    CHECK(r.cpu_power == doctest::Approx(100.0 * uj_kwh(1) / (1e-6 / 3.6e6) * pue).epsilon(1e-9));
    CHECK(r.ram_power == doctest::Approx(t.ram_power_w() * pue));
    CHECK(r.gpu_count == 2);
    CHECK(r.gpu_model == "2 x NVIDIA A100-SXM4-80GB");
    CHECK(r.cpu_model == "AMD EPYC 7543 32-Core Processor");
    CHECK(r.cpu_count == 2);
    CHECK(r.country_iso_code == "FRA");
    CHECK(r.os == "Linux-test");
    CHECK(r.pue == 1.2);
    CHECK(r.ram_used_gb == doctest::Approx((527994880.0 - 395996160.0) * 1024 / (1024.0 * 1024 * 1024)));
    CHECK(r.ram_utilization_percent == 25.0);
    CHECK(r.timestamp == emissions_timestamp(m.clock->wall_time()));

    // A second flush appends a second cumulative row with the same run_id; stop() a third.
    m.clock->t += 30;
    m.gpus->mj = {29'000'000 + 12'000'000, 19'000'000};
    t.flush();
    m.clock->t += 1;
    const EmissionsRecord last = t.stop();
    CHECK(t.stopped());
    m.clock->t += 100;
    CHECK(t.flush().energy_consumed == last.energy_consumed);  // nothing after stop
    CHECK(t.stop().duration == last.duration);
    const auto rows = read_csv(fs::path(t.output_path()));
    REQUIRE(rows.size() == 3);
    CHECK(t.output_path() == (m.root / "out/codecarbon/emissions.csv").string());
    for (const auto& row : rows) CHECK(row.at("run_id") == t.run_id());
    CHECK(rows[0].at("project_name") == "tr11-176B-ml");
    CHECK(rows[0].at("country_name") == "France");
    CHECK(rows[0].at("duration") == "60.0");
    CHECK(rows[1].at("duration") == "90.0");
    CHECK(rows[2].at("duration") == "91.0");
    CHECK(std::stod(rows[1].at("gpu_energy")) == doctest::Approx(gpu + mj_kwh(12'000'000) * pue).epsilon(1e-12));
    CHECK(rows[2].at("energy_consumed") == mds::python_float_repr(last.energy_consumed));
}

TEST_CASE("carbon tracker: a GPU counter outage is recovered, a reset starts again") {
    Machine m("outage");
    auto config = m.config();
    config.force_ram_power_w = 0;
    config.cpu_mode = CpuPowerMode::constant;
    config.force_cpu_power_w = 0;
    CarbonTracker t(config, m.sources({"H100"}, {1'000'000}));
    m.clock->t += 10;
    m.gpus->mj = {std::nullopt};
    t.measure();
    CHECK(t.energy_kwh() == 0);
    auto notes = t.take_new_notes();
    REQUIRE_FALSE(notes.empty());
    CHECK(notes.back().find("GPU 0: energy counter unreadable") != std::string::npos);
    CHECK(t.take_new_notes().empty());
    m.clock->t += 10;
    m.gpus->mj = {1'000'000 + 8'000'000};  // 8 kJ over the 20 s since the last good reading
    t.measure();
    CHECK(t.energy_kwh() == doctest::Approx(mj_kwh(8'000'000)).epsilon(1e-12));
    const EmissionsRecord r = t.current_record();
    // Powers: 0 W (outage), then 8 kJ / 20 s = 400 W; mean 200 W.
    CHECK(r.gpu_power == doctest::Approx(200.0 * (mj_kwh(1) / (1e-3 / 3.6e6))).epsilon(1e-9));
    // Driver reload: the counter restarts near 0; that interval counts 0 and re-baselines.
    m.clock->t += 10;
    m.gpus->mj = {500};
    t.measure();
    CHECK(t.energy_kwh() == doctest::Approx(mj_kwh(8'000'000)).epsilon(1e-12));
    m.clock->t += 10;
    m.gpus->mj = {1500};
    t.measure();
    CHECK(t.energy_kwh() == doctest::Approx(mj_kwh(8'001'000)).epsilon(1e-12));
    CHECK(t.notes().back().find("went backwards") != std::string::npos);
}

TEST_CASE("carbon tracker: CPU modes") {
    Machine m("cpu");
    auto config = m.config();
    config.force_ram_power_w = 0;
    SUBCASE("no RAPL, /proc/stat: cpu_load with the 85 W generic TDP") {
        CarbonTracker t(config, m.sources());
        CHECK(t.cpu_mode() == CpuPowerMode::load);
        CHECK(t.cpu_tdp_w() == 85.0);
        put_file(m.root / "proc/stat", "cpu  1500 0 1500 8000 0 0 0 0 0 0\n");  // 1000 of 1000 ticks busy
        m.clock->t += 36;
        t.measure();
        CHECK(t.current_record().cpu_power == doctest::Approx(85.0));
        CHECK(t.current_record().cpu_energy == doctest::Approx(w_s_kwh(85, 36)).epsilon(1e-12));
        CHECK(t.current_record().cpu_utilization_percent == doctest::Approx(100.0));
        put_file(m.root / "proc/stat", "cpu  1500 0 1500 9000 0 0 0 0 0 0\n");  // idle
        m.clock->t += 36;
        t.measure();
        CHECK(t.current_record().cpu_power == doctest::Approx((85.0 + 8.5) / 2));
        CHECK(t.current_record().cpu_utilization_percent == doctest::Approx(50.0));
    }
    SUBCASE("force_cpu_power skips RAPL, as in codecarbon") {
        m.rapl_zone("intel-rapl:0", "package-0", 1);
        config.force_cpu_power_w = 200;
        CarbonTracker t(config, m.sources());
        CHECK(t.cpu_mode() == CpuPowerMode::load);
        CHECK(t.cpu_tdp_w() == 200.0);
    }
    SUBCASE("no RAPL, no /proc/stat: constant") {
        fs::remove(m.root / "proc/stat");
        CarbonTracker t(config, m.sources());
        CHECK(t.cpu_mode() == CpuPowerMode::constant);
        m.clock->t += 3600;
        t.measure();
        CHECK(t.current_record().cpu_power == 42.5);
        CHECK(t.current_record().cpu_energy == doctest::Approx(0.0425));
        CHECK(t.notes().back().find("constant mode") != std::string::npos);
    }
    SUBCASE("explicit rapl without counters is an error") {
        config.cpu_mode = CpuPowerMode::rapl;
        CHECK_THROWS_WITH_AS(CarbonTracker(config, m.sources()), doctest::Contains("cpu_mode rapl"), mds::Error);
    }
}

TEST_CASE("carbon tracker: GPU selection and NVML") {
    Machine m("gpus");
    auto config = m.config();
    SUBCASE("explicit indices; out of range is an error") {
        config.gpu_indices = std::vector<unsigned>{3, 1, 3};
        CarbonTracker t(config, m.sources({"A", "B", "B", "B"}, {0, 0, 0, 0}));
        CHECK(t.gpu_indices() == std::vector<unsigned>{1, 3});
        CHECK(t.current_record().gpu_model == "2 x B");
        config.gpu_indices = std::vector<unsigned>{4};
        CHECK_THROWS_WITH_AS(CarbonTracker(config, m.sources({"A", "B", "B", "B"}, {0, 0, 0, 0})),
                             doctest::Contains("gpu_indices has 4, but NVML reports 4 GPU(s)"), mds::Error);
    }
    SUBCASE("CUDA_VISIBLE_DEVICES: indices taken, UUIDs mean all") {
        auto s = m.sources({"A", "B", "C"}, {0, 0, 0});
        s.cuda_visible_devices = "2,0";
        CarbonTracker t(config, std::move(s));
        CHECK(t.gpu_indices() == std::vector<unsigned>{0, 2});
        CHECK(t.current_record().gpu_model == "1 x A1 x C");  // codecarbon's "".join
        auto u = m.sources({"A", "B"}, {0, 0});
        u.cuda_visible_devices = "GPU-4e817856-1fb8";
        CarbonTracker all(config, std::move(u));
        CHECK(all.gpu_indices() == std::vector<unsigned>{0, 1});
    }
    SUBCASE("no NVML: gpu_count 0 and a note, not an error") {
        auto s = m.sources();
        s.gpu_reader = nullptr;
        s.nvml_library = (m.root / "no/libnvidia-ml.so.1").string();
        config.gpu_indices = std::vector<unsigned>{0, 1};
        CarbonTracker t(config, std::move(s));
        CHECK(t.current_record().gpu_count == 0);
        CHECK(t.gpu_indices().empty());
        bool noted = false;
        for (const auto& n : t.notes()) noted = noted || n.find("NVML not available") != std::string::npos;
        CHECK(noted);
        m.clock->t += 15;
        t.measure();
        CHECK(t.current_record().gpu_energy == 0);
    }
    SUBCASE("the fake libnvidia-ml through the tracker") {
        put_file(m.root / "nvml-state", "NVIDIA H100 80GB HBM3\t100000\n");
        ::setenv("MDS_FAKE_NVML_STATE", (m.root / "nvml-state").c_str(), 1);
        auto s = m.sources();
        s.gpu_reader = nullptr;
        s.nvml_library = MDS_FAKE_NVML;
        CarbonTracker t(config, std::move(s));
        put_file(m.root / "nvml-state", "NVIDIA H100 80GB HBM3\t3700000\n");
        m.clock->t += 10;
        t.measure();
        CHECK(t.current_record().gpu_model == "1 x NVIDIA H100 80GB HBM3");
        CHECK(t.current_record().gpu_energy == doctest::Approx(mj_kwh(3'600'000)).epsilon(1e-12));
        ::unsetenv("MDS_FAKE_NVML_STATE");
    }
}

TEST_CASE("carbon tracker: config errors and options") {
    Machine m("config");
    auto config = m.config();
    SUBCASE("unknown country") {
        config.country_iso_code = "XYZ";
        CHECK_THROWS_WITH_AS(CarbonTracker(config, m.sources()), doctest::Contains("'XYZ' is not a country"),
                             mds::Error);
        config.allow_unknown_country = true;
        CarbonTracker t(config, m.sources());
        CHECK(t.carbon_intensity_g_per_kwh() == 475.0);
        CHECK(t.country_name().empty());
    }
    SUBCASE("lower-case code, forced intensity") {
        config.country_iso_code = "deu";
        config.force_carbon_intensity_g_per_kwh = 100;
        CarbonTracker t(config, m.sources());
        CHECK(t.country_name() == "Germany");
        CHECK(t.current_record().country_iso_code == "DEU");
        CHECK(t.carbon_intensity_g_per_kwh() == 100.0);
    }
    SUBCASE("bad numbers") {
        config.pue = 0.9;
        CHECK_THROWS_WITH_AS(CarbonTracker(config, m.sources()), doctest::Contains("pue is 0.9, expected"), mds::Error);
        config.pue = 1.0;
        config.measure_power_secs = 0;
        CHECK_THROWS_WITH_AS(CarbonTracker(config, m.sources()), doctest::Contains("measure_power_secs"), mds::Error);
        config.measure_power_secs = 15;
        config.output_dir.clear();
        CHECK_THROWS_WITH_AS(CarbonTracker(config, m.sources()), doctest::Contains("output_dir"), mds::Error);
    }
    SUBCASE("meminfo: required for the estimate, not with a forced RAM power") {
        fs::remove(m.root / "proc/meminfo");
        CHECK_THROWS_WITH_AS(CarbonTracker(config, m.sources()), doctest::Contains((m.root / "proc/meminfo").c_str()),
                             mds::Error);
        config.force_ram_power_w = 12;
        CarbonTracker t(config, m.sources());
        CHECK(t.ram_power_w() == 12.0);
        config.force_ram_power_w.reset();
        config.ram_total_gb = 512;
        CarbonTracker u(config, m.sources());
        CHECK(u.ram_power_w() == doctest::Approx(38.0));
        CHECK(u.current_record().ram_total_size == 512.0);
    }
    SUBCASE("output directory that cannot be created") {
        put_file(m.root / "file", "x");
        config.output_dir = (m.root / "file/sub").string();
        CHECK_THROWS_WITH_AS(CarbonTracker(config, m.sources()), doctest::Contains("creating the output directory"),
                             mds::Error);
    }
}

TEST_CASE("carbon tracker: measure_if_due and the stale-measurement rule of flush") {
    Machine m("cadence");
    auto config = m.config();
    config.measure_power_secs = 60;
    config.force_ram_power_w = 36;
    config.run_id = "0b5a1f5e-8d3c-4a7e-9f1b-2c3d4e5f6a7b";
    config.output_file = "emissions-node000.csv";
    CarbonTracker t(config, m.sources());
    m.clock->t += 59.9;
    CHECK_FALSE(t.measure_if_due());
    m.clock->t += 0.1;
    CHECK(t.measure_if_due());
    CHECK(t.current_record().ram_energy == doctest::Approx(w_s_kwh(36, 60)));
    m.clock->t += 0.01;  // under 50 ms: flush does not measure again
    const auto r = t.flush();
    CHECK(r.ram_energy == doctest::Approx(w_s_kwh(36, 60)));
    CHECK(r.duration == doctest::Approx(60.01));
    CHECK(r.run_id == config.run_id);
    CHECK(fs::exists(m.root / "out/codecarbon/emissions-node000.csv"));
}
