// Helpers shared by the unit tests: a scratch directory removed at exit, and the path of
// ../shared/data/gpt2 (skipping tests that need it when it is absent).
#pragma once

#include <unistd.h>  // getpid

#include <cstdlib>
#include <filesystem>
#include <string>

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

}  // namespace mds::test
