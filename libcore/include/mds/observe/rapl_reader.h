// Intel RAPL energy counters of the CPU packages, read from the Linux powercap tree
// (<sysfs>/class/powercap/intel-rapl:N/{name,energy_uj,max_energy_range_uj}) the way codecarbon's
// IntelRAPL / RAPLFile read them (specs/ops.md §1.2 CPU step 1): package domains only (their core /
// uncore / dram sub-domains would count twice), deltas of energy_uj with max_energy_range_uj added
// on wrap-around, and counters that mirror another package's (multi-die AMD CPUs expose one per die)
// left out once their deltas confirm it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mds::observe {

struct RaplDomain {
    std::string name;                       // the zone's "name", e.g. "package-0" or "psys"
    std::string dir;                        // .../class/powercap/intel-rapl:0
    std::uint64_t max_energy_range_uj = 0;  // 0 when unreadable: a wrap-around then skips the sample
};

class RaplReader {
public:
    // Finds the zones under `<sysfs_root>/class/powercap` and reads every counter once as the
    // baseline. Never throws: a missing tree or counters that cannot be read (energy_uj is
    // root-only since Linux 5.10) leave available() false with the reason in note().
    explicit RaplReader(const std::string& sysfs_root = "/sys");

    // At least one package domain (psys when there is no package) can be read.
    bool available() const { return !counters_.empty(); }
    // One line on what was found or why RAPL cannot be used.
    const std::string& note() const { return note_; }
    // The domains summed (mirrors already dropped), in the order of their zone names.
    std::vector<RaplDomain> domains() const;

    // Energy consumed since the previous call (the first call: since construction), µJ summed over
    // the domains. A counter that cannot be read, or goes backwards even after adding
    // max_energy_range_uj, contributes 0 for this interval and becomes the new baseline.
    std::uint64_t read_energy_delta_uj();

private:
    struct Counter {
        RaplDomain domain;
        std::optional<std::uint64_t> last_uj;  // nullopt: no baseline (unreadable last time)
        std::uint64_t delta_uj = 0;
        bool skipped = false;  // the last delta could not be measured
    };
    // A domain whose first reading matched an earlier one's: left out until a delta decides.
    struct MirrorCandidate {
        std::size_t index;
        std::size_t reference;
    };
    void confirm_mirrors();

    std::vector<Counter> counters_;
    std::vector<MirrorCandidate> mirror_candidates_;
    std::string note_;
};

}  // namespace mds::observe
