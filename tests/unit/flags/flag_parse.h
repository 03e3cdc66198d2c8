// mds-train's flags parsed as its command line would be, for the flags area's unit tests.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "mds/flags/dry_run.h"
#include "mds/flags/train_args.h"

namespace mds::flags_test {

// argv (without the program name) into `args`, as CLI11 fills them; nothing resolved or checked.
inline void parse(mds::flags::TrainArgs& args, std::vector<std::string> argv, mds::flags::DryRunOptions* options = nullptr) {
    CLI::App app("mds-train");
    mds::flags::add_train_flags(app, args);
    if (options) mds::flags::add_dry_run_flags(app, *options);
    argv.insert(argv.begin(), "mds-train");
    std::vector<char*> ptrs;
    for (auto& a : argv) ptrs.push_back(a.data());
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
}

// With --dry-run's flags too, then resolved for a world of `world` ranks.
inline void parse(mds::flags::TrainArgs& args, mds::flags::DryRunOptions& options, std::vector<std::string> argv,
                  std::int64_t world) {
    parse(args, std::move(argv), &options);
    args.parallel.world_size = world;
    mds::flags::resolve_train_args(args);
}

}  // namespace mds::flags_test
