// codecarbon emissions.csv: header (codecarbon 3.2/3.3 EmissionsData field order), Python float
// repr, row quoting, UUID v4, timestamps, and FileOutput's append / empty-file / backup rules.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string>

#include "mds/observe/emissions_csv.h"
#include "mds/util/text.h"  // python_float_repr
#include "test_support.h"

using mds::test::slurp;
using mds::test::spit;

using namespace mds::observe;
using mds::python_float_repr;
namespace fs = std::filesystem;

namespace {

EmissionsRecord sample_record() {
    EmissionsRecord r;
    r.timestamp = "2026-11-22T10:11:12";
    r.run_id = "0b5a1f5e-8d3c-4a7e-9f1b-2c3d4e5f6a7b";
    r.duration = 3600.5;
    r.emissions = 0.0123;
    r.emissions_rate = 0.0123 / 3600.5;
    r.cpu_power = 42.5;
    r.gpu_power = 1600.0;
    r.ram_power = 38.0;
    r.cpu_energy = 0.0425;
    r.gpu_energy = 1.6;
    r.ram_energy = 0.038;
    r.energy_consumed = 0.0425 + 1.6 + 0.038;
    r.country_name = "France";
    r.country_iso_code = "FRA";
    r.os = "Linux-6.1.0-x86_64-with-glibc2.36";
    r.codecarbon_version = "mds-0.1.0";
    r.cpu_count = 64;
    r.cpu_model = "AMD EPYC 7543 32-Core Processor";
    r.gpu_count = 8;
    r.gpu_model = "8 x NVIDIA A100-SXM4-80GB";
    r.ram_total_size = 503.5;
    r.cpu_utilization_percent = 12.5;
    return r;
}

}  // namespace

TEST_CASE("emissions.csv: header") {
    CHECK(emissions_csv_header_line() ==
          "timestamp,project_name,run_id,experiment_id,duration,emissions,emissions_rate,cpu_power,gpu_power,ram_power,"
          "cpu_energy,gpu_energy,ram_energy,energy_consumed,water_consumed,country_name,country_iso_code,region,"
          "cloud_provider,cloud_region,os,python_version,codecarbon_version,cpu_count,cpu_model,gpu_count,gpu_model,"
          "longitude,latitude,ram_total_size,tracking_mode,cpu_utilization_percent,gpu_utilization_percent,"
          "ram_utilization_percent,ram_used_gb,on_cloud,pue,wue\n");
    const std::set<std::string_view> unique(emissions_csv_columns().begin(), emissions_csv_columns().end());
    CHECK(unique.size() == 38);
    EmissionsRecord r;
    for (auto c : emissions_csv_columns()) CHECK_NOTHROW(emissions_csv_value(r, c));
    CHECK_THROWS(emissions_csv_value(r, "nope"));
}

TEST_CASE("emissions.csv: Python float repr") {
    // Expected strings are Python's repr() of the same doubles.
    CHECK(python_float_repr(0.0) == "0.0");
    CHECK(python_float_repr(-0.0) == "-0.0");
    CHECK(python_float_repr(1.0) == "1.0");
    CHECK(python_float_repr(100.0) == "100.0");
    CHECK(python_float_repr(3600.5) == "3600.5");
    CHECK(python_float_repr(0.1) == "0.1");
    CHECK(python_float_repr(0.1 + 0.2) == "0.30000000000000004");
    CHECK(python_float_repr(0.0001) == "0.0001");
    CHECK(python_float_repr(0.00001) == "1e-05");
    CHECK(python_float_repr(1.5e-05) == "1.5e-05");
    CHECK(python_float_repr(0.0123 / 3600.5) == "3.416192195528399e-06");
    CHECK(python_float_repr(1e15) == "1000000000000000.0");
    CHECK(python_float_repr(1e16) == "1e+16");
    CHECK(python_float_repr(1.2345e16) == "1.2345e+16");
    CHECK(python_float_repr(123456789012345678.0) == "1.2345678901234568e+17");
    CHECK(python_float_repr(-2.5e-300) == "-2.5e-300");
    CHECK(python_float_repr(5e-324) == "5e-324");
    CHECK(python_float_repr(1.7976931348623157e308) == "1.7976931348623157e+308");
    CHECK(python_float_repr(std::numeric_limits<double>::infinity()) == "inf");
    CHECK(python_float_repr(-std::numeric_limits<double>::infinity()) == "-inf");
    CHECK(python_float_repr(std::numeric_limits<double>::quiet_NaN()) == "nan");
}

TEST_CASE("emissions.csv: row") {
    EmissionsRecord r = sample_record();
    r.cpu_model = "Intel(R) Xeon(R) Gold 6248, \"engineering\" sample";
    r.latitude = 48.7;
    r.ram_used_gb = std::numeric_limits<double>::quiet_NaN();  // pandas writes NaN as an empty field
    CHECK(emissions_csv_row(r) ==
          "2026-11-22T10:11:12,codecarbon,0b5a1f5e-8d3c-4a7e-9f1b-2c3d4e5f6a7b,5b0fa12a-3dd7-45bb-9766-cc326314d9f1,"
          "3600.5,0.0123,3.416192195528399e-06,42.5,1600.0,38.0,0.0425,1.6,0.038,1.6805,0.0,France,FRA,,,,"
          "Linux-6.1.0-x86_64-with-glibc2.36,,mds-0.1.0,64,\"Intel(R) Xeon(R) Gold 6248, \"\"engineering\"\" "
          "sample\",8,8 x NVIDIA A100-SXM4-80GB,,48.7,503.5,machine,12.5,0.0,0.0,,N,1.0,0.0\n");
}

namespace {
// `shape`: 'x' = lower-case hex digit, 'd' = decimal digit, anything else literal. (std::regex
// trips GCC 12's -Wmaybe-uninitialized in sanitizer builds.)
bool has_shape(const std::string& s, const std::string& shape) {
    if (s.size() != shape.size()) return false;
    for (std::size_t i = 0; i < s.size(); ++i) {
        char c = s[i];
        bool digit = c >= '0' && c <= '9';
        bool ok = shape[i] == 'x' ? digit || (c >= 'a' && c <= 'f') : shape[i] == 'd' ? digit : c == shape[i];
        if (!ok) return false;
    }
    return true;
}
}  // namespace

TEST_CASE("emissions.csv: run_id is a UUID v4, timestamp format") {
    std::set<std::string> seen;
    for (int i = 0; i < 100; ++i) {
        const std::string id = new_run_id();
        CHECK(has_shape(id, "xxxxxxxx-xxxx-4xxx-xxxx-xxxxxxxxxxxx"));
        CHECK(std::string("89ab").find(id[19]) != std::string::npos);  // RFC 4122 variant
        seen.insert(id);
    }
    CHECK(seen.size() == 100);
    CHECK(has_shape(emissions_timestamp(), "dddd-dd-ddTdd:dd:dd"));
}

TEST_CASE("emissions.csv: writer append, empty file, reordered header, backup") {
    const auto dir = mds::test::scratch_dir("emissions");
    const auto path = dir / "emissions.csv";
    EmissionsRecord r = sample_record();
    EmissionsCsvWriter w(path.string());

    SUBCASE("new file: header then cumulative rows") {
        w.append(r);
        r.duration = 7200.0;
        w.append(r);
        CHECK(!w.last_backup());
        CHECK(slurp(path) == emissions_csv_header_line() + emissions_csv_row(sample_record()) + emissions_csv_row(r));
    }
    SUBCASE("an empty file counts as new") {
        spit(path, "");
        w.append(r);
        CHECK(slurp(path) == emissions_csv_header_line() + emissions_csv_row(r));
        CHECK(!w.last_backup());
    }
    SUBCASE("same columns in another order: values follow the file's order") {
        spit(path, "wue,timestamp,project_name,run_id,experiment_id,duration,emissions,emissions_rate,cpu_power,"
                  "gpu_power,ram_power,cpu_energy,gpu_energy,ram_energy,energy_consumed,water_consumed,country_name,"
                  "country_iso_code,region,cloud_provider,cloud_region,os,python_version,codecarbon_version,cpu_count,"
                  "cpu_model,gpu_count,gpu_model,longitude,latitude,ram_total_size,tracking_mode,"
                  "cpu_utilization_percent,gpu_utilization_percent,ram_utilization_percent,ram_used_gb,on_cloud,pue\n");
        r.wue = 1.8;
        w.append(r);
        const std::string row = emissions_csv_row(r);
        const std::string body = slurp(path);
        CHECK(!w.last_backup());
        CHECK(body.substr(body.find('\n') + 1) == "1.8," + row.substr(0, row.rfind(',')) + "\n");
    }
    SUBCASE("an older header (codecarbon 2.8, 32 columns): the old file is backed up") {
        const std::string old =
            "timestamp,project_name,run_id,experiment_id,duration,emissions,emissions_rate,cpu_power,gpu_power,"
            "ram_power,cpu_energy,gpu_energy,ram_energy,energy_consumed,country_name,country_iso_code,region,"
            "cloud_provider,cloud_region,os,python_version,codecarbon_version,cpu_count,cpu_model,gpu_count,gpu_model,"
            "longitude,latitude,ram_total_size,tracking_mode,on_cloud,pue\nold row\n";
        spit(path, old);
        spit(dir / "emissions.csv.bak", "taken");
        w.append(r);
        REQUIRE(w.last_backup());
        CHECK(*w.last_backup() == (dir / "emissions.csv_0.bak").string());
        CHECK(slurp(dir / "emissions.csv_0.bak") == old);
        CHECK(slurp(dir / "emissions.csv.bak") == "taken");
        CHECK(slurp(path) == emissions_csv_header_line() + emissions_csv_row(r));
        spit(path, "a,b\n");
        w.append(r);
        CHECK(*w.last_backup() == (dir / "emissions.csv_1.bak").string());
    }
    fs::remove_all(dir);
}
