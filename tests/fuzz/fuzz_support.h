// Helpers shared by the libFuzzer targets: invariant checks that abort with a message (libFuzzer
// then saves the input as a crash), a guard that lets only mds::Error escape from library calls,
// and a per-process scratch directory for the APIs that take a path.
#pragma once

#include <cxxabi.h>  // abi::__cxa_demangle, for the type of an unexpected exception
#include <unistd.h>  // getpid, access

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <typeinfo>

#include "mds/util/error.h"

// Aborts with the failed condition when an invariant does not hold.
#define MDS_FUZZ_CHECK(cond)                                                                     \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            std::fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
            std::abort();                                                                        \
        }                                                                                        \
    } while (0)

namespace mds::fuzz {

inline std::string type_name(const std::type_info& t) {
    int status = 0;
    char* s = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
    std::string name = status == 0 && s ? s : t.name();
    std::free(s);
    return name;
}

// Runs f(): true when it returns, false when it throws mds::Error. libcore promises to throw
// nothing else for bad input (STYLE.md "Errors"), so any other exception aborts with its type.
template <class F>
bool only_mds_errors(F&& f) {
    try {
        f();
        return true;
    } catch (const mds::Error&) {
        return false;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "exception other than mds::Error escaped: %s: %s\n", type_name(typeid(e)).c_str(), e.what());
        std::abort();
    } catch (...) {
        std::fprintf(stderr, "non-std exception escaped\n");
        std::abort();
    }
}

// The folder of the scratch files: $MDS_FUZZ_SCRATCH, else /dev/shm where it is a writable folder (memory:
// the writers' fsync costs nothing there; on the 2-core CI machine's disk fuzz_safetensors ran 3.5x fewer
// inputs in the same time, 2026-11-30), else $TMPDIR (std::filesystem::temp_directory_path).
inline std::filesystem::path scratch_root() {
    if (const char* d = std::getenv("MDS_FUZZ_SCRATCH"); d && *d) return d;
    std::error_code ec;
    if (std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK | X_OK) == 0) return "/dev/shm";
    return std::filesystem::temp_directory_path();
}

// <scratch_root>/mds-fuzz-<pid>/<name>; the directory is created on first use and removed at exit.
inline std::string scratch_path(const std::string& name) {
    static const std::filesystem::path dir = [] {
        auto d = scratch_root() / ("mds-fuzz-" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        static const std::filesystem::path keep = d;
        std::atexit([] {
            std::error_code ec;
            std::filesystem::remove_all(keep, ec);
        });
        return d;
    }();
    return (dir / name).string();
}

// Plain stdio on purpose: the file is rewritten for every input, and must hold exactly these bytes.
inline void write_bytes(const std::string& path, const void* data, std::size_t n) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    MDS_FUZZ_CHECK(f != nullptr);
    MDS_FUZZ_CHECK(n == 0 || std::fwrite(data, 1, n, f) == n);
    MDS_FUZZ_CHECK(std::fclose(f) == 0);
}

}  // namespace mds::fuzz
