// The few NVML entry points the carbon tracker needs, resolved with dlopen / dlsym so that nothing
// links libnvidia-ml and no nvml.h is needed. Prototypes as in NVML's nvml.h (CUDA 12 / 13):
// every call returns an nvmlReturn_t, 0 (NVML_SUCCESS) on success.
#pragma once

#include <string>

namespace mds::observe::nvml {

using Return = int;                                    // nvmlReturn_t
struct DeviceOpaque;                                   // struct nvmlDevice_st
using Device = DeviceOpaque*;                          // nvmlDevice_t
inline constexpr Return kSuccess = 0;                  // NVML_SUCCESS
inline constexpr unsigned kDeviceNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE

// The loaded library and its functions. Load failures leave loaded() false with error() set.
class Library {
public:
    explicit Library(const std::string& path);
    ~Library();
    Library(const Library&) = delete;
    Library& operator=(const Library&) = delete;

    bool loaded() const { return handle_ != nullptr; }
    const std::string& error() const { return error_; }
    // "NVML error 9 (Driver Not Loaded)": nvmlErrorString when the library has it.
    std::string describe(Return r) const;

    Return (*init_v2)() = nullptr;
    Return (*shutdown)() = nullptr;
    Return (*device_get_count_v2)(unsigned* count) = nullptr;
    Return (*device_get_handle_by_index_v2)(unsigned index, Device* device) = nullptr;
    Return (*device_get_total_energy_consumption)(Device device, unsigned long long* energy_mj) = nullptr;
    Return (*device_get_name)(Device device, char* name, unsigned length) = nullptr;
    const char* (*error_string)(Return result) = nullptr;  // optional

private:
    void* handle_ = nullptr;
    std::string error_;
};

}  // namespace mds::observe::nvml
