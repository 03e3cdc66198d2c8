// codecarbon's CPU-from-TDP and RAM-from-DIMMs power models, in codecarbon's arithmetic order so that
// the cross-check (tests/crosscheck/test_carbon_tracker.py) can ask for equal doubles.
#include "mds/observe/power_estimates.h"

#include <algorithm>
#include <cmath>

namespace mds::observe {

double cpu_power_from_load_w(double tdp_w, double load_percent) {
    const double load = std::clamp(load_percent, 0.0, 100.0) / 100.0;
    return tdp_w * (0.1 + 0.9 * std::pow(load, 3.0));  // Python's `** 3` on a float is pow()
}

double cpu_power_constant_w(double tdp_w) { return tdp_w * kCpuConstantModeFraction; }

int ram_dimm_count_estimate(double total_gb) {
    if (total_gb <= 2) return 1;
    if (total_gb <= 16) return 2;  // 4 GB = 2×2, 8 GB = 2×4, 16 GB = 2×8: two DIMMs are most common
    if (total_gb <= 32) return 4;
    if (total_gb <= 64) return 4;
    if (total_gb <= 128) return 8;
    // Larger servers: assume at least 8 DIMMs of the largest common size that allows it.
    for (const double dimm_gb : {128.0, 64.0, 32.0, 16.0, 8.0, 4.0})
        if (dimm_gb <= total_gb / 8) return static_cast<int>(std::min(std::ceil(total_gb / dimm_gb), 32.0));
    return 8;  // unreachable for total_gb > 128 (4 ≤ total / 8); kept as codecarbon's default
}

double ram_power_estimate_w(double total_gb, bool arm_cpu) {
    const int dimms = ram_dimm_count_estimate(total_gb);
    const double per_dimm = arm_cpu ? 1.5 : 5.0;
    const double min_power = arm_cpu ? 3.0 : per_dimm * 2;
    double power;
    if (dimms <= 4)
        power = per_dimm * dimms;
    else if (dimms <= 8)
        power = per_dimm * 4 + per_dimm * 0.9 * (dimms - 4);
    else if (dimms <= 16)
        power = per_dimm * 4 + per_dimm * 0.9 * 4 + per_dimm * 0.8 * (dimms - 8);
    else
        power = per_dimm * 4 + per_dimm * 0.9 * 4 + per_dimm * 0.8 * 8 + per_dimm * 0.7 * (dimms - 16);
    return std::max(min_power, power);
}

}  // namespace mds::observe
