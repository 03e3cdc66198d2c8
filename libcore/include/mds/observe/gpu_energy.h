// GPU energy counters for the carbon tracker: an interface over "total energy since the driver
// loaded, in mJ" per device, and its NVML implementation. NVML is loaded at run time
// (dlopen("libnvidia-ml.so.1")) so that binaries run on machines without an NVIDIA driver; its
// absence is reported as a note, not an error. codecarbon reads the same counter
// (nvmlDeviceGetTotalEnergyConsumption, Volta and newer; specs/ops.md §1.2 GPU).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace mds::observe {

class GpuEnergyReader {
public:
    virtual ~GpuEnergyReader() = default;
    // Devices in the reader's numbering (NVML indices, which ignore CUDA_VISIBLE_DEVICES).
    virtual unsigned device_count() const = 0;
    // The device's product name ("NVIDIA A100-SXM4-80GB"); empty when unknown.
    virtual std::string device_name(unsigned index) const = 0;
    // Energy used since the driver loaded, mJ; nullopt when the counter cannot be read right now
    // (or the device has none). `index` < device_count().
    virtual std::optional<std::uint64_t> total_energy_mj(unsigned index) = 0;
};

// The result of looking for NVML: a reader, or none and the reason.
struct GpuEnergyReaderOpened {
    std::unique_ptr<GpuEnergyReader> reader;  // nullptr when NVML is missing or fails to initialise
    std::string note;                         // what was found, or why no GPU energy is measured
};

// dlopen()s `library` (the driver's libnvidia-ml.so.1 by default; tests pass a fake), resolves
// nvmlInit_v2, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2,
// nvmlDeviceGetTotalEnergyConsumption, nvmlDeviceGetName and nvmlShutdown, initialises NVML and
// takes a handle for every device. Never throws; the reader calls nvmlShutdown when destroyed.
GpuEnergyReaderOpened open_nvml_energy_reader(const std::string& library = "libnvidia-ml.so.1");

}  // namespace mds::observe
