// RAPL package counters from the powercap tree (codecarbon core/cpu.py::IntelRAPL, core/rapl.py).
#include "mds/observe/rapl_reader.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "mds/util/text.h"  // to_lower

namespace mds::observe {

namespace {

namespace fs = std::filesystem;

// codecarbon's counters_match tolerances: 1e-6 relative, or 1 J, since the files are read one after
// the other and a mirrored counter moves on between the two reads.
constexpr double kMirrorRelativeTolerance = 1e-6;
constexpr std::uint64_t kMirrorAbsoluteToleranceUj = 1'000'000;

bool counters_match(std::uint64_t a, std::uint64_t b) {
    const std::uint64_t diff = a > b ? a - b : b - a;
    const double tolerance = std::max(kMirrorRelativeTolerance * static_cast<double>(std::max(a, b)),
                                      static_cast<double>(kMirrorAbsoluteToleranceUj));
    return static_cast<double>(diff) <= tolerance;
}

// The whole file as an unsigned decimal; nullopt when it cannot be opened or parsed. errno_out gets
// the open() error so that the note can say "Permission denied".
std::optional<std::uint64_t> read_uint(const std::string& path, int* errno_out = nullptr) {
    std::ifstream in(path);
    if (!in) {
        if (errno_out) *errno_out = errno;
        return std::nullopt;
    }
    std::uint64_t v = 0;
    if (!(in >> v)) {
        if (errno_out) *errno_out = errno ? errno : EIO;
        return std::nullopt;
    }
    return v;
}

std::string read_name(const fs::path& dir) {
    std::ifstream in(dir / "name");
    std::string name;
    if (!in || !std::getline(in, name)) return dir.filename().string();
    while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
    return name.empty() ? dir.filename().string() : name;
}

// "intel-rapl:0" or "intel-rapl-mmio:1": a top-level zone (sub-zones have a second ':N').
bool is_top_level_zone(const std::string& entry) {
    for (const std::string prefix : {"intel-rapl:", "intel-rapl-mmio:"}) {
        if (!entry.starts_with(prefix)) continue;
        const std::string rest = entry.substr(prefix.size());
        return !rest.empty() && std::all_of(rest.begin(), rest.end(), [](unsigned char c) { return std::isdigit(c); });
    }
    return false;
}

}  // namespace

RaplReader::RaplReader(const std::string& sysfs_root) {
    const fs::path powercap = fs::path(sysfs_root) / "class" / "powercap";
    std::error_code ec;
    if (!fs::is_directory(powercap, ec)) {
        note_ = "RAPL: " + powercap.string() + " does not exist (no powercap driver)";
        return;
    }
    std::vector<std::string> entries;
    for (const auto& e : fs::directory_iterator(powercap, ec)) {
        const std::string name = e.path().filename().string();
        if (is_top_level_zone(name) && fs::is_directory(e.path(), ec)) entries.push_back(name);
    }
    std::sort(entries.begin(), entries.end());

    struct Zone {
        RaplDomain domain;
        std::uint64_t first_uj;
        bool mmio;
    };
    std::vector<Zone> packages, psys;
    std::string unreadable;  // first unreadable counter, for the note
    int unreadable_errno = 0;
    for (const auto& entry : entries) {
        const fs::path dir = powercap / entry;
        Zone z;
        z.domain.name = read_name(dir);
        z.domain.dir = dir.string();
        z.mmio = entry.starts_with("intel-rapl-mmio:");
        const std::string kind = to_lower(z.domain.name);
        const bool is_package = kind.find("package") != std::string::npos;
        if (!is_package && kind != "psys") continue;  // dram and others are not the CPU package
        int err = 0;
        const auto value = read_uint((dir / "energy_uj").string(), &err);
        if (!value) {
            if (unreadable.empty()) {
                unreadable = (dir / "energy_uj").string();
                unreadable_errno = err;
            }
            continue;
        }
        z.first_uj = *value;
        z.domain.max_energy_range_uj = read_uint((dir / "max_energy_range_uj").string()).value_or(0);
        (is_package ? packages : psys).push_back(std::move(z));
    }
    // Packages when there are any: psys (the whole platform) only as codecarbon's second choice.
    std::vector<Zone>& chosen = packages.empty() ? psys : packages;
    // The MSR and MMIO interfaces may both expose "package-0": keep one, the MMIO one as codecarbon does.
    std::map<std::string, std::size_t> by_name;
    std::vector<Zone> unique;
    for (auto& z : chosen) {
        const auto it = by_name.find(z.domain.name);
        if (it == by_name.end()) {
            by_name.emplace(z.domain.name, unique.size());
            unique.push_back(std::move(z));
        } else if (z.mmio && !unique[it->second].mmio) {
            unique[it->second] = std::move(z);
        }
    }
    for (auto& z : unique) {
        Counter c;
        c.domain = std::move(z.domain);
        c.last_uj = z.first_uj;
        counters_.push_back(std::move(c));
    }
    if (counters_.empty()) {
        note_ = unreadable.empty() ? "RAPL: no package or psys domain under " + powercap.string()
                                   : "RAPL: cannot read " + unreadable + " (" + std::strerror(unreadable_errno) +
                                         "; energy_uj is root-only since Linux 5.10, see CVE-2020-8694)";
        return;
    }
    // Equal first readings: the later counter probably mirrors the earlier one (one package counter
    // per die of the same socket); it stays out until a measured interval decides.
    for (std::size_t i = 0; i < counters_.size(); ++i) {
        const std::uint64_t v = *counters_[i].last_uj;
        if (v == 0) continue;  // an idle zero counter says nothing
        for (std::size_t j = 0; j < i; ++j) {
            const bool j_is_candidate = std::any_of(mirror_candidates_.begin(), mirror_candidates_.end(),
                                                    [&](const MirrorCandidate& m) { return m.index == j; });
            if (j_is_candidate || *counters_[j].last_uj == 0) continue;
            if (counters_match(v, *counters_[j].last_uj)) {
                mirror_candidates_.push_back({i, j});
                break;
            }
        }
    }
    note_ = "RAPL: " + std::to_string(counters_.size()) + " domain(s):";
    for (const auto& c : counters_) note_ += " " + c.domain.name;
    if (!unreadable.empty()) note_ += " (unreadable, left out: " + unreadable + ")";
    if (!mirror_candidates_.empty())
        note_ += " (" + std::to_string(mirror_candidates_.size()) +
                 " looking like mirrors of another, left out until confirmed)";
}

std::vector<RaplDomain> RaplReader::domains() const {
    std::vector<RaplDomain> out;
    for (std::size_t i = 0; i < counters_.size(); ++i) {
        const bool pending = std::any_of(mirror_candidates_.begin(), mirror_candidates_.end(),
                                         [&](const MirrorCandidate& m) { return m.index == i; });
        if (!pending) out.push_back(counters_[i].domain);
    }
    return out;
}

void RaplReader::confirm_mirrors() {
    std::vector<MirrorCandidate> pending;
    std::vector<std::size_t> confirmed;
    for (const auto& m : mirror_candidates_) {
        const Counter& c = counters_[m.index];
        const Counter& ref = counters_[m.reference];
        if (c.skipped || ref.skipped || (c.delta_uj == 0 && ref.delta_uj == 0))
            pending.push_back(m);  // this interval proves nothing
        else if (counters_match(c.delta_uj, ref.delta_uj))
            confirmed.push_back(m.index);
        // else: an independent meter after all; it is summed again from this interval on
    }
    mirror_candidates_ = std::move(pending);
    if (confirmed.empty()) return;
    std::sort(confirmed.rbegin(), confirmed.rend());
    for (const std::size_t i : confirmed) {
        counters_.erase(counters_.begin() + static_cast<std::ptrdiff_t>(i));
        for (auto& m : mirror_candidates_) {
            if (m.index > i) --m.index;
            if (m.reference > i) --m.reference;
        }
    }
}

std::uint64_t RaplReader::read_energy_delta_uj() {
    for (auto& c : counters_) {
        const auto now = read_uint(c.domain.dir + "/energy_uj");
        c.delta_uj = 0;
        c.skipped = true;
        if (now && c.last_uj) {
            std::uint64_t v = *now;
            if (v < *c.last_uj) v += c.domain.max_energy_range_uj;  // the counter wrapped
            if (v >= *c.last_uj) {
                c.delta_uj = v - *c.last_uj;
                c.skipped = false;
            }
        }
        c.last_uj = now;  // re-baseline on the raw value, or lose the baseline when unreadable
    }
    confirm_mirrors();
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < counters_.size(); ++i) {
        const bool pending = std::any_of(mirror_candidates_.begin(), mirror_candidates_.end(),
                                         [&](const MirrorCandidate& m) { return m.index == i; });
        if (!pending) total += counters_[i].delta_uj;
    }
    return total;
}

}  // namespace mds::observe
