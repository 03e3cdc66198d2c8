// What the carbon tracker reads about its host from procfs and uname: total and used RAM
// (/proc/meminfo, as psutil.virtual_memory() computes them), system CPU time (/proc/stat, as
// psutil.cpu_times() and codecarbon's SystemCPULoadMeter use it), the CPU model and count
// (/proc/cpuinfo), and platform.platform()'s string for the `os` column. Paths are parameters so
// that tests read fake files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mds::observe {

struct MemInfo {
    std::uint64_t total_bytes = 0;  // MemTotal
    std::uint64_t available_bytes =
        0;  // MemAvailable (MemFree + Buffers + Cached + SReclaimable on kernels without it)
};

// Parses /proc/meminfo. Throws mds::Error naming the file when it cannot be read or has no MemTotal.
MemInfo read_meminfo(const std::string& path);

// psutil's used = total − available (available clamped to [0, total]), and its percent rounded to
// one decimal as psutil rounds it.
double meminfo_used_gb(const MemInfo& info);  // GiB (bytes / 2³⁰)
double meminfo_used_percent(const MemInfo& info);

// Bytes → codecarbon's GB (psutil bytes / 1024³).
inline double bytes_to_gb(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

// The aggregate "cpu" line of /proc/stat in clock ticks, split as codecarbon's SystemCPULoadMeter
// does: total = all fields − guest − guest_nice (already counted in user / nice); busy = total − idle
// − iowait.
struct CpuTimes {
    std::uint64_t busy_ticks = 0;
    std::uint64_t total_ticks = 0;
};
// nullopt when the file cannot be read or has no "cpu " line.
std::optional<CpuTimes> read_proc_stat_cpu_times(const std::string& path);
// System CPU load between two readings, in percent, clamped to [0, 100]; 0 when no tick elapsed.
double cpu_load_percent(const CpuTimes& before, const CpuTimes& after);

struct CpuInfo {
    std::string model;               // first "model name" (x86) or "Model" / "Hardware" (ARM); may be empty
    std::int64_t logical_count = 0;  // number of "processor" entries
};
// Parses /proc/cpuinfo; an unreadable file gives an empty CpuInfo (the columns are informational).
CpuInfo read_cpuinfo(const std::string& path);

// Python's platform.platform() on Linux: "<system>-<release>-<machine>-with-glibc<version>".
std::string host_platform_string();
// codecarbon's RAM._detect_arm_cpu(): the machine name contains "arm" or "aarch".
bool host_is_arm();
// Logical CPUs online (psutil.cpu_count()), for when /proc/cpuinfo is not readable.
std::int64_t host_cpu_count();

}  // namespace mds::observe
