// A stand-in for libnvidia-ml.so.1 with the entry points mds's carbon tracker resolves, for tests on
// machines without an NVIDIA driver. Each call reads the state file named by $MDS_FAKE_NVML_STATE:
//   one line per device: <name> TAB <total energy in mJ, or "err" for an unreadable counter>
//   an optional first line "init_error <nvmlReturn_t>" makes nvmlInit_v2 fail with that code.
// No variable or an unreadable file: nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED (9).
// fake_nvml_init_count() tells tests whether every nvmlInit_v2 was matched by nvmlShutdown.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

struct Device {
    std::string name;
    bool readable = false;
    unsigned long long energy_mj = 0;
};

struct State {
    bool present = false;
    int init_error = 0;
    std::vector<Device> devices;
};

int g_init_count = 0;

State read_state() {
    State s;
    const char* path = std::getenv("MDS_FAKE_NVML_STATE");
    if (!path) return s;
    std::ifstream in(path);
    if (!in) return s;
    s.present = true;
    for (std::string line; std::getline(in, line);) {
        if (line.empty()) continue;
        if (line.rfind("init_error ", 0) == 0) {
            s.init_error = std::atoi(line.c_str() + 11);
            continue;
        }
        Device d;
        const auto tab = line.find('\t');
        d.name = line.substr(0, tab);
        if (tab != std::string::npos && line.compare(tab + 1, std::string::npos, "err") != 0) {
            d.readable = true;
            d.energy_mj = std::strtoull(line.c_str() + tab + 1, nullptr, 10);
        }
        s.devices.push_back(d);
    }
    return s;
}

// Handles are index + 1, never dereferenced.
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
nvmlDevice_t handle_of(unsigned i) { return reinterpret_cast<nvmlDevice_t>(static_cast<std::uintptr_t>(i) + 1); }
unsigned index_of(nvmlDevice_t d) { return static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(d) - 1); }

constexpr int kSuccess = 0, kInvalidArgument = 2, kUninitialized = 1, kDriverNotLoaded = 9, kUnknown = 999;

}  // namespace

extern "C" {

int nvmlInit_v2() {
    const State s = read_state();
    if (!s.present) return kDriverNotLoaded;
    if (s.init_error) return s.init_error;
    ++g_init_count;
    return kSuccess;
}

int nvmlShutdown() {
    if (g_init_count == 0) return kUninitialized;
    --g_init_count;
    return kSuccess;
}

int nvmlDeviceGetCount_v2(unsigned* count) {
    if (g_init_count == 0) return kUninitialized;
    *count = static_cast<unsigned>(read_state().devices.size());
    return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
    if (g_init_count == 0) return kUninitialized;
    if (index >= read_state().devices.size()) return kInvalidArgument;
    *device = handle_of(index);
    return kSuccess;
}

int nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* energy) {
    if (g_init_count == 0) return kUninitialized;
    const State s = read_state();
    const unsigned i = index_of(device);
    if (i >= s.devices.size()) return kInvalidArgument;
    if (!s.devices[i].readable) return kUnknown;
    *energy = s.devices[i].energy_mj;
    return kSuccess;
}

int nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
    if (g_init_count == 0) return kUninitialized;
    const State s = read_state();
    const unsigned i = index_of(device);
    if (i >= s.devices.size() || length == 0) return kInvalidArgument;
    const std::string& n = s.devices[i].name;
    const std::size_t k = std::min<std::size_t>(n.size(), length - 1);
    n.copy(name, k);
    name[k] = '\0';
    return kSuccess;
}

const char* nvmlErrorString(int result) {
    switch (result) {
        case kSuccess: return "Success";
        case kUninitialized: return "Uninitialized";
        case kInvalidArgument: return "Invalid Argument";
        case kDriverNotLoaded: return "Driver Not Loaded";
        default: return "Unknown Error";
    }
}

int fake_nvml_init_count() { return g_init_count; }

}  // extern "C"
