// procfs and uname readers for the carbon tracker (mds/observe/host_info.h).
#include "mds/observe/host_info.h"

#include <gnu/libc-version.h>  // gnu_get_libc_version
#include <sys/utsname.h>       // uname
#include <unistd.h>            // sysconf

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "mds/util/error.h"
#include "mds/util/text.h"  // trim, to_lower

namespace mds::observe {

namespace {

// "Key:   1234 kB" → bytes; nullopt when the value is not a number.
std::optional<std::uint64_t> meminfo_bytes(const std::string& rest) {
    std::istringstream in(rest);
    std::uint64_t value = 0;
    std::string unit;
    if (!(in >> value)) return std::nullopt;
    in >> unit;
    return unit == "kB" ? value * 1024 : value;
}

}  // namespace

MemInfo read_meminfo(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error(errno_message("reading " + path + " (total RAM for the RAM power estimate)", errno));
    std::optional<std::uint64_t> total, available, free_b, buffers, cached, sreclaimable;
    for (std::string line; std::getline(in, line);) {
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        const std::string key = line.substr(0, colon);
        const auto value = meminfo_bytes(line.substr(colon + 1));
        if (key == "MemTotal")
            total = value;
        else if (key == "MemAvailable")
            available = value;
        else if (key == "MemFree")
            free_b = value;
        else if (key == "Buffers")
            buffers = value;
        else if (key == "Cached")
            cached = value;
        else if (key == "SReclaimable")
            sreclaimable = value;
    }
    if (!total || *total == 0) throw Error(path + ": no MemTotal line with a size (expected \"MemTotal: <n> kB\")");
    MemInfo info;
    info.total_bytes = *total;
    // Kernels before 3.14 lack MemAvailable; psutil then estimates it, roughly as below.
    info.available_bytes =
        available ? *available
                  : free_b.value_or(0) + buffers.value_or(0) + cached.value_or(0) + sreclaimable.value_or(0);
    return info;
}

double meminfo_used_gb(const MemInfo& info) {
    const std::uint64_t avail = std::min(info.available_bytes, info.total_bytes);
    return bytes_to_gb(info.total_bytes - avail);
}

double meminfo_used_percent(const MemInfo& info) {
    const std::uint64_t avail = std::min(info.available_bytes, info.total_bytes);
    const double percent = static_cast<double>(info.total_bytes - avail) / static_cast<double>(info.total_bytes) * 100;
    // Python's round(x, 1): correctly rounded to one decimal, which printf's "%.1f" also is.
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", percent);
    return std::strtod(buf, nullptr);
}

std::optional<CpuTimes> read_proc_stat_cpu_times(const std::string& path) {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("cpu ", 0) != 0) continue;
        std::istringstream fields(line.substr(4));
        std::vector<std::uint64_t> v;
        for (std::uint64_t x; fields >> x;) v.push_back(x);
        if (v.size() < 4) return std::nullopt;
        v.resize(10, 0);  // user nice system idle iowait irq softirq steal guest guest_nice
        std::uint64_t total = 0;
        for (const auto x : v) total += x;
        total -= v[8] + v[9];
        CpuTimes t;
        t.total_ticks = total;
        t.busy_ticks = total - v[3] - v[4];
        return t;
    }
    return std::nullopt;
}

double cpu_load_percent(const CpuTimes& before, const CpuTimes& after) {
    // Counters only grow; a reset (or a fake file rewritten) gives no elapsed time rather than garbage.
    if (after.total_ticks <= before.total_ticks) return 0.0;
    const double total = static_cast<double>(after.total_ticks - before.total_ticks);
    const double busy =
        after.busy_ticks >= before.busy_ticks ? static_cast<double>(after.busy_ticks - before.busy_ticks) : 0.0;
    return std::clamp(busy / total * 100, 0.0, 100.0);
}

CpuInfo read_cpuinfo(const std::string& path) {
    CpuInfo info;
    std::ifstream in(path);
    std::string arm_model;
    for (std::string line; std::getline(in, line);) {
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        const std::string key = trim(line.substr(0, colon));
        if (key == "processor")
            ++info.logical_count;
        else if (key == "model name" && info.model.empty())
            info.model = trim(line.substr(colon + 1));
        else if ((key == "Model" || key == "Hardware") && arm_model.empty())
            arm_model = trim(line.substr(colon + 1));
    }
    if (info.model.empty()) info.model = arm_model;
    return info;
}

std::string host_platform_string() {
    struct utsname u {};
    if (::uname(&u) != 0) return "Linux";
    // platform.platform() joins the parts with '-', turns blanks into '_' and '/' into '-'.
    std::string s = std::string(u.sysname) + "-" + u.release + "-" + u.machine + "-with-glibc" + gnu_get_libc_version();
    std::replace(s.begin(), s.end(), ' ', '_');
    std::replace(s.begin(), s.end(), '/', '-');
    return s;
}

bool host_is_arm() {
    struct utsname u {};
    if (::uname(&u) != 0) return false;
    const std::string m = to_lower(u.machine);
    return m.find("arm") != std::string::npos || m.find("aarch") != std::string::npos;
}

std::int64_t host_cpu_count() {
    const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

}  // namespace mds::observe
