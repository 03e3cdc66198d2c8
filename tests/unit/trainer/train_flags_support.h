// mds-train's command line in the trainer's unit tests (test_exit_points.cpp, test_fused_adam.cpp,
// test_megatron_args_golden.cpp): flags parsed by mds-train's own parser, as its main parses them.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mds/flags/train_args.h"

namespace mds::trainer_test {

// `argv` (the flags, without the program's name) parsed; then, when `resolve`, resolved as mds-train does (the
// DeepSpeed config read, the flags checked) with `world_size` processes where given.
inline flags::TrainArgs parse_train_flags(std::vector<std::string> argv, bool resolve = true,
                                          std::optional<std::int64_t> world_size = std::nullopt) {
    flags::TrainArgs args;
    CLI::App app("mds-train");
    flags::add_train_flags(app, args);
    argv.insert(argv.begin(), "mds-train");
    std::vector<char*> ptrs;
    for (auto& a : argv) ptrs.push_back(a.data());
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
    if (world_size) args.parallel.world_size = world_size;
    if (resolve) (void)flags::resolve_train_args(args);
    return args;
}

}  // namespace mds::trainer_test
