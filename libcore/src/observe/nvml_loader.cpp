// dlopen / dlsym of libnvidia-ml (nvml_loader.h).
#include "nvml_loader.h"

#include <dlfcn.h>  // dlopen, dlsym, dlclose, dlerror

namespace mds::observe::nvml {

namespace {

// dlsym into a typed function pointer; POSIX guarantees the object-to-function conversion works.
template <typename Fn>
bool resolve(void* handle, const char* name, Fn& out, std::string& error) {
    ::dlerror();
    void* sym = ::dlsym(handle, name);
    if (sym == nullptr) {
        if (error.empty()) error = std::string("symbol ") + name + " not found";
        return false;
    }
    out = reinterpret_cast<Fn>(sym);
    return true;
}

}  // namespace

Library::Library(const std::string& path) {
    // RTLD_LOCAL: NVML's symbols stay out of the global namespace of the process.
    handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
        const char* why = ::dlerror();
        error_ = why ? why : "dlopen(" + path + ") failed";
        return;
    }
    bool ok = resolve(handle_, "nvmlInit_v2", init_v2, error_);
    ok = resolve(handle_, "nvmlShutdown", shutdown, error_) && ok;
    ok = resolve(handle_, "nvmlDeviceGetCount_v2", device_get_count_v2, error_) && ok;
    ok = resolve(handle_, "nvmlDeviceGetHandleByIndex_v2", device_get_handle_by_index_v2, error_) && ok;
    ok = resolve(handle_, "nvmlDeviceGetTotalEnergyConsumption", device_get_total_energy_consumption, error_) && ok;
    ok = resolve(handle_, "nvmlDeviceGetName", device_get_name, error_) && ok;
    std::string ignored;
    resolve(handle_, "nvmlErrorString", error_string, ignored);
    if (!ok) {
        error_ = path + ": " + error_;
        ::dlclose(handle_);
        handle_ = nullptr;
    }
}

Library::~Library() {
    if (handle_) ::dlclose(handle_);
}

std::string Library::describe(Return r) const {
    std::string s = "NVML error " + std::to_string(r);
    if (error_string) {
        if (const char* text = error_string(r)) s += std::string(" (") + text + ")";
    }
    return s;
}

}  // namespace mds::observe::nvml
