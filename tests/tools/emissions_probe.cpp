// emissions_probe CSV SCRIPT: drives mds::observe::EmissionsCsvWriter for
// tests/crosscheck/test_emissions.py. SCRIPT lines:
//   R <38 tab-separated values in header order>   append a record (numbers via strtod / strtoll;
//                                                   an empty longitude / latitude means "none")
//   U                                              print a new run_id
//   T                                              print the current emissions timestamp
//   H                                              print the header line
// After each R, prints "backup <path>" when the writer moved an old file away.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mds/observe/emissions_csv.h"

namespace {

mds::observe::EmissionsRecord parse_record(const std::vector<std::string>& v) {
    mds::observe::EmissionsRecord r;
    const auto d = [&](std::size_t i) { return std::strtod(v[i].c_str(), nullptr); };
    const auto n = [&](std::size_t i) { return static_cast<std::int64_t>(std::strtoll(v[i].c_str(), nullptr, 10)); };
    r.timestamp = v[0];
    r.project_name = v[1];
    r.run_id = v[2];
    r.experiment_id = v[3];
    r.duration = d(4);
    r.emissions = d(5);
    r.emissions_rate = d(6);
    r.cpu_power = d(7);
    r.gpu_power = d(8);
    r.ram_power = d(9);
    r.cpu_energy = d(10);
    r.gpu_energy = d(11);
    r.ram_energy = d(12);
    r.energy_consumed = d(13);
    r.water_consumed = d(14);
    r.country_name = v[15];
    r.country_iso_code = v[16];
    r.region = v[17];
    r.cloud_provider = v[18];
    r.cloud_region = v[19];
    r.os = v[20];
    r.python_version = v[21];
    r.codecarbon_version = v[22];
    r.cpu_count = n(23);
    r.cpu_model = v[24];
    r.gpu_count = n(25);
    r.gpu_model = v[26];
    if (!v[27].empty()) r.longitude = d(27);
    if (!v[28].empty()) r.latitude = d(28);
    r.ram_total_size = d(29);
    r.tracking_mode = v[30];
    r.cpu_utilization_percent = d(31);
    r.gpu_utilization_percent = d(32);
    r.ram_utilization_percent = d(33);
    r.ram_used_gb = d(34);
    r.on_cloud = v[35];
    r.pue = d(36);
    r.wue = d(37);
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: emissions_probe CSV SCRIPT\n");
        return 2;
    }
    try {
        std::ifstream script(argv[2]);
        if (!script) throw std::runtime_error(std::string("cannot open ") + argv[2]);
        mds::observe::EmissionsCsvWriter writer(argv[1]);
        std::string line;
        while (std::getline(script, line)) {
            std::vector<std::string> f;
            std::stringstream ss(line);
            for (std::string part; std::getline(ss, part, '\t');) f.push_back(part);
            if (!line.empty() && line.back() == '\t') f.emplace_back();  // getline drops a trailing empty field
            if (f.empty()) continue;
            if (f[0] == "R" && f.size() == 39) {
                writer.append(parse_record(std::vector<std::string>(f.begin() + 1, f.end())));
                if (writer.last_backup()) std::printf("backup %s\n", writer.last_backup()->c_str());
            } else if (f[0] == "U") {
                std::printf("%s\n", mds::observe::new_run_id().c_str());
            } else if (f[0] == "T") {
                std::printf("%s\n", mds::observe::emissions_timestamp().c_str());
            } else if (f[0] == "H") {
                std::printf("%s", mds::observe::emissions_csv_header_line().c_str());
            } else {
                throw std::runtime_error("bad script line (" + std::to_string(f.size()) + " fields): " + line);
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "emissions_probe: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
