// codecarbon emissions.csv rows and the append / backup rules of codecarbon's FileOutput
// (codecarbon/output_methods/file.py, core/util.py::backup).
#include "mds/observe/emissions_csv.h"

#include <fcntl.h>   // open
#include <unistd.h>  // write, read, close

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <ctime>  // localtime_r, strftime
#include <filesystem>
#include <random>
#include <vector>

#include "mds/util/error.h"
#include "mds/util/text.h"  // python_float_repr

namespace mds::observe {

namespace {

constexpr std::array<std::string_view, kEmissionsCsvColumnCount> kColumns = {
    "timestamp",       "project_name",     "run_id",           "experiment_id",
    "duration",        "emissions",        "emissions_rate",   "cpu_power",
    "gpu_power",       "ram_power",        "cpu_energy",       "gpu_energy",
    "ram_energy",      "energy_consumed",  "water_consumed",   "country_name",
    "country_iso_code", "region",          "cloud_provider",   "cloud_region",
    "os",              "python_version",   "codecarbon_version", "cpu_count",
    "cpu_model",       "gpu_count",        "gpu_model",        "longitude",
    "latitude",        "ram_total_size",   "tracking_mode",    "cpu_utilization_percent",
    "gpu_utilization_percent", "ram_utilization_percent", "ram_used_gb", "on_cloud",
    "pue",             "wue",
};

// Python's csv.writer with QUOTE_MINIMAL, as pandas uses it: quote a field holding the
// delimiter, the quote character or a line break; double embedded quotes.
std::string csv_field(std::string_view s) {
    if (s.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(s);
    std::string out = "\"";
    for (const char c : s) {
        if (c == '"') out += '"';
        out += c;
    }
    out += '"';
    return out;
}

// pandas writes a missing float (NaN / None) as an empty field.
std::string csv_float(double v) { return std::isnan(v) ? std::string() : python_float_repr(v); }

std::vector<std::string> split_header(std::string line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::string> names;
    std::size_t start = 0;
    for (;;) {
        const std::size_t comma = line.find(',', start);
        std::string name = line.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (name.size() >= 2 && name.front() == '"' && name.back() == '"') name = name.substr(1, name.size() - 2);
        names.push_back(std::move(name));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return names;
}

// The first line of the file (without '\n'); nullopt for an empty or missing file.
std::optional<std::string> read_first_line(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return std::nullopt;
        throw Error(errno_message("opening " + path, errno));
    }
    std::string data;
    bool empty_file = true;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd);
            throw Error(errno_message("reading " + path, err));
        }
        if (n == 0) break;
        empty_file = false;
        data.append(buf, static_cast<std::size_t>(n));
        if (const auto nl = data.find('\n'); nl != std::string::npos) {
            data.resize(nl);
            break;
        }
    }
    ::close(fd);
    if (empty_file) return std::nullopt;  // codecarbon: "exists but is empty. Treating as new file."
    return data;
}

// codecarbon's backup(): `<name>.bak`, or `<name>_0.bak`, `<name>_1.bak`, ... if that exists.
std::string backup_file(const std::string& path) {
    namespace fs = std::filesystem;
    std::string target = path + ".bak";
    for (int i = 0; fs::exists(target); ++i) target = path + "_" + std::to_string(i) + ".bak";
    std::error_code ec;
    fs::rename(path, target, ec);
    if (ec) throw Error("backing up " + path + " (its header is not codecarbon's current one) to " + target + ": " +
                        ec.message());
    return target;
}

void append_once(const std::string& path, const std::string& data) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(errno_message("opening " + path + " for appending", errno));
    ssize_t n;
    do {
        n = ::write(fd, data.data(), data.size());
    } while (n < 0 && errno == EINTR);
    const int err = errno;
    ::close(fd);
    if (n < 0) throw Error(errno_message("appending a row to " + path, err));
    if (static_cast<std::size_t>(n) != data.size())
        throw Error("appending a row to " + path + ": short write (" + std::to_string(n) + " of " +
                    std::to_string(data.size()) + " bytes; disk full?)");
}

}  // namespace

const std::array<std::string_view, kEmissionsCsvColumnCount>& emissions_csv_columns() { return kColumns; }

std::string emissions_csv_header_line() {
    std::string s;
    for (const auto c : kColumns) {
        if (!s.empty()) s += ',';
        s += c;
    }
    return s + "\n";
}

std::string emissions_csv_value(const EmissionsRecord& r, std::string_view c) {
    // Strings
    if (c == "timestamp") return csv_field(r.timestamp);
    if (c == "project_name") return csv_field(r.project_name);
    if (c == "run_id") return csv_field(r.run_id);
    if (c == "experiment_id") return csv_field(r.experiment_id);
    if (c == "country_name") return csv_field(r.country_name);
    if (c == "country_iso_code") return csv_field(r.country_iso_code);
    if (c == "region") return csv_field(r.region);
    if (c == "cloud_provider") return csv_field(r.cloud_provider);
    if (c == "cloud_region") return csv_field(r.cloud_region);
    if (c == "os") return csv_field(r.os);
    if (c == "python_version") return csv_field(r.python_version);
    if (c == "codecarbon_version") return csv_field(r.codecarbon_version);
    if (c == "cpu_model") return csv_field(r.cpu_model);
    if (c == "gpu_model") return csv_field(r.gpu_model);
    if (c == "tracking_mode") return csv_field(r.tracking_mode);
    if (c == "on_cloud") return csv_field(r.on_cloud);
    // Counts
    if (c == "cpu_count") return std::to_string(r.cpu_count);
    if (c == "gpu_count") return std::to_string(r.gpu_count);
    // Optional floats
    if (c == "longitude") return r.longitude ? csv_float(*r.longitude) : std::string();
    if (c == "latitude") return r.latitude ? csv_float(*r.latitude) : std::string();
    // Floats
    if (c == "duration") return csv_float(r.duration);
    if (c == "emissions") return csv_float(r.emissions);
    if (c == "emissions_rate") return csv_float(r.emissions_rate);
    if (c == "cpu_power") return csv_float(r.cpu_power);
    if (c == "gpu_power") return csv_float(r.gpu_power);
    if (c == "ram_power") return csv_float(r.ram_power);
    if (c == "cpu_energy") return csv_float(r.cpu_energy);
    if (c == "gpu_energy") return csv_float(r.gpu_energy);
    if (c == "ram_energy") return csv_float(r.ram_energy);
    if (c == "energy_consumed") return csv_float(r.energy_consumed);
    if (c == "water_consumed") return csv_float(r.water_consumed);
    if (c == "ram_total_size") return csv_float(r.ram_total_size);
    if (c == "cpu_utilization_percent") return csv_float(r.cpu_utilization_percent);
    if (c == "gpu_utilization_percent") return csv_float(r.gpu_utilization_percent);
    if (c == "ram_utilization_percent") return csv_float(r.ram_utilization_percent);
    if (c == "ram_used_gb") return csv_float(r.ram_used_gb);
    if (c == "pue") return csv_float(r.pue);
    if (c == "wue") return csv_float(r.wue);
    throw Error("emissions.csv: unknown column '" + std::string(c) + "'");
}

std::string emissions_csv_row(const EmissionsRecord& record) {
    std::string s;
    for (std::size_t i = 0; i < kColumns.size(); ++i) {
        if (i > 0) s += ',';
        s += emissions_csv_value(record, kColumns[i]);
    }
    return s + "\n";
}

std::string new_run_id() {
    std::random_device rd;
    std::array<unsigned char, 16> b{};
    for (std::size_t i = 0; i < b.size(); i += 4) {
        const std::uint32_t w = rd();
        for (std::size_t k = 0; k < 4; ++k) b[i + k] = static_cast<unsigned char>(w >> (8 * k));
    }
    b[6] = static_cast<unsigned char>((b[6] & 0x0F) | 0x40);  // version 4
    b[8] = static_cast<unsigned char>((b[8] & 0x3F) | 0x80);  // RFC 4122 variant
    static constexpr char kHex[] = "0123456789abcdef";
    std::string s;
    for (std::size_t i = 0; i < b.size(); ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
        s += kHex[b[i] >> 4];
        s += kHex[b[i] & 0x0F];
    }
    return s;
}

std::string emissions_timestamp(std::chrono::system_clock::time_point t) {
    const std::time_t secs = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    ::localtime_r(&secs, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    return buf;
}

void EmissionsCsvWriter::append(const EmissionsRecord& record) {
    last_backup_.reset();
    std::optional<std::string> first_line = read_first_line(path_);
    if (first_line) {
        std::vector<std::string> have = split_header(*first_line);
        std::vector<std::string> sorted_have = have;
        std::vector<std::string> sorted_want(kColumns.begin(), kColumns.end());
        std::sort(sorted_have.begin(), sorted_have.end());
        std::sort(sorted_want.begin(), sorted_want.end());
        if (sorted_have == sorted_want) {
            // Same columns, maybe another order: follow the file's order, as codecarbon does.
            std::string row;
            for (std::size_t i = 0; i < have.size(); ++i) {
                if (i > 0) row += ',';
                row += emissions_csv_value(record, have[i]);
            }
            append_once(path_, row + "\n");
            return;
        }
        last_backup_ = backup_file(path_);
    }
    // New (or empty) file: header and first row in one write.
    append_once(path_, emissions_csv_header_line() + emissions_csv_row(record));
}

std::vector<std::string> split_csv_record(std::string_view line) {
    std::vector<std::string> fields(1);
    bool quoted = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (quoted) {
            if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
                fields.back() += '"';
                ++i;
            } else if (c == '"') {
                quoted = false;
            } else {
                fields.back() += c;
            }
        } else if (c == '"') {
            quoted = true;
        } else if (c == ',') {
            fields.emplace_back();
        } else {
            fields.back() += c;
        }
    }
    return fields;
}

}  // namespace mds::observe
