// Helpers shared by the unit tests: a scratch directory removed at exit, the path of
// ../shared/data/gpt2 (skipping tests that need it when it is absent), whole files read and written,
// and the message of the mds::Error a call throws. Each area's tests are built as one translation unit
// (CMake's unity build): a helper two test files need lives here, not in each file.
#pragma once

#include <unistd.h>  // getpid

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>

#include "mds/util/error.h"

namespace mds::test {

inline std::filesystem::path scratch_dir(const std::string& name) {
    auto dir = std::filesystem::temp_directory_path() / ("mds-test-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

inline std::string gpt2_dir() {
    if (const char* env = std::getenv("MDS_GPT2_DIR")) return env;
    return std::string(MDS_SOURCE_DIR) + "/../shared/data/gpt2";
}

inline bool have_gpt2() { return std::filesystem::exists(gpt2_dir() + "/encoder.json"); }

// The bytes of a file ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// Writes `bytes` as the whole file.
inline void spit(const std::filesystem::path& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << bytes;
}

inline bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

inline std::span<const std::byte> as_bytes(const std::string& s) {
    return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// The message of the mds::Error `f()` throws; "" when it throws none.
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const mds::Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace mds::test
