// GpuEnergyReader over NVML (mds/observe/gpu_energy.h), loaded through nvml_loader.
#include "mds/observe/gpu_energy.h"

#include <vector>

#include "nvml_loader.h"

namespace mds::observe {

namespace {

class NvmlEnergyReader final : public GpuEnergyReader {
public:
    NvmlEnergyReader(std::unique_ptr<nvml::Library> lib, std::vector<nvml::Device> devices,
                     std::vector<std::string> names)
        : lib_(std::move(lib)), devices_(std::move(devices)), names_(std::move(names)) {}
    ~NvmlEnergyReader() override { lib_->shutdown(); }
    NvmlEnergyReader(const NvmlEnergyReader&) = delete;
    NvmlEnergyReader& operator=(const NvmlEnergyReader&) = delete;

    unsigned device_count() const override { return static_cast<unsigned>(devices_.size()); }
    std::string device_name(unsigned index) const override { return index < names_.size() ? names_[index] : ""; }
    std::optional<std::uint64_t> total_energy_mj(unsigned index) override {
        if (index >= devices_.size() || devices_[index] == nullptr) return std::nullopt;
        unsigned long long mj = 0;
        if (lib_->device_get_total_energy_consumption(devices_[index], &mj) != nvml::kSuccess) return std::nullopt;
        return static_cast<std::uint64_t>(mj);
    }

private:
    std::unique_ptr<nvml::Library> lib_;
    std::vector<nvml::Device> devices_;  // nullptr where no handle could be had (the counter reads as missing)
    std::vector<std::string> names_;
};

}  // namespace

GpuEnergyReaderOpened open_nvml_energy_reader(const std::string& library) {
    GpuEnergyReaderOpened out;
    auto lib = std::make_unique<nvml::Library>(library);
    if (!lib->loaded()) {
        out.note = "NVML not available (" + lib->error() + "): GPU energy is not measured";
        return out;
    }
    if (const nvml::Return r = lib->init_v2(); r != nvml::kSuccess) {
        out.note = "NVML found but nvmlInit_v2 failed: " + lib->describe(r) + "; GPU energy is not measured";
        return out;
    }
    unsigned count = 0;
    if (const nvml::Return r = lib->device_get_count_v2(&count); r != nvml::kSuccess) {
        out.note = "nvmlDeviceGetCount_v2 failed: " + lib->describe(r) + "; GPU energy is not measured";
        lib->shutdown();
        return out;
    }
    std::vector<nvml::Device> devices(count, nullptr);
    std::vector<std::string> names(count);
    std::string problems;
    for (unsigned i = 0; i < count; ++i) {
        // A device we may not open (another job's GPU behind cgroups) keeps a null handle; it only
        // matters if the tracker is asked to cover it, and then its counter reads as missing.
        if (const nvml::Return r = lib->device_get_handle_by_index_v2(i, &devices[i]); r != nvml::kSuccess) {
            devices[i] = nullptr;
            problems += " GPU " + std::to_string(i) + ": " + lib->describe(r) + ";";
            continue;
        }
        char name[nvml::kDeviceNameBufferSize] = {};
        if (lib->device_get_name(devices[i], name, sizeof name) == nvml::kSuccess) names[i] = name;
    }
    out.note = "NVML: " + std::to_string(count) + " GPU(s)" + (problems.empty() ? "" : "; no handle for" + problems);
    out.reader = std::make_unique<NvmlEnergyReader>(std::move(lib), std::move(devices), std::move(names));
    return out;
}

}  // namespace mds::observe
