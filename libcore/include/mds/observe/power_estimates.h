// codecarbon's power models for hardware without an energy counter (specs/ops.md §1.2): the CPU
// from its TDP (cpu_load and constant modes, codecarbon/external/hardware.py::CPU) and RAM from an
// estimated DIMM count (v3 rule, codecarbon/external/ram.py::RAM). Plain functions of their inputs,
// so the cross-check can compare them with codecarbon's own code value by value.
#pragma once

namespace mds::observe {

// codecarbon's POWER_CONSTANT: the TDP assumed for a CPU model it cannot match (W).
inline constexpr double kGenericCpuTdpW = 85.0;
// codecarbon's CONSUMPTION_PERCENTAGE_CONSTANT: share of the TDP drawn in constant mode.
inline constexpr double kCpuConstantModeFraction = 0.5;

// cpu_load mode, machine tracking: TDP × (0.1 + 0.9 × (load_percent / 100)³), the load clamped to
// [0, 100]. The cubic keeps 10 % of the TDP at idle and reaches the TDP at full load.
double cpu_power_from_load_w(double tdp_w, double load_percent);
// constant mode (codecarbon without psutil): TDP × 0.5.
double cpu_power_constant_w(double tdp_w);

// DIMM count codecarbon assumes for a machine with `total_gb` of RAM (GiB, bytes / 2³⁰, as psutil
// reports it): ≤2 → 1; ≤16 → 2; ≤32 → 4; ≤64 → 4; ≤128 → 8; larger: ceil(total / size) for the
// largest size in {4, 8, 16, 32, 64, 128} GB not above total / 8, at most 32.
int ram_dimm_count_estimate(double total_gb);

// RAM power (W): 5 W per DIMM on x86 (1.5 W on ARM) with a marginal factor of 1.0 for DIMMs 1–4,
// 0.9 for 5–8, 0.8 for 9–16 and 0.7 beyond; at least 10 W on x86 (3 W on ARM).
double ram_power_estimate_w(double total_gb, bool arm_cpu);

}  // namespace mds::observe
