// Shared command-line plumbing over CLI11: parsing with mds exit statuses, and flags that several
// tools attach (declared once here, with their help text).
#pragma once

#include <CLI/CLI.hpp>  // CLI::App, CLI::ParseError

#include <optional>
#include <string>
#include <string_view>

#include "mds/util/progress.h"

namespace mds {

// Parses argv. Returns an exit status when the tool must stop now (0 after --help/--version,
// 2 after a usage error, with `mds-<tool>: error: ...` printed), or nullopt to go on.
std::optional<int> parse_cli(CLI::App& app, int argc, char** argv);

// --quiet: no progress and no summary on stderr.
void add_quiet_flag(CLI::App& app, bool& quiet);
// --json: machine-readable summary on stdout.
void add_json_flag(CLI::App& app, bool& json);
// The version of mds ("0.1.0").
const char* mds_version();
// --version: prints "<tool> <mds version>".
void add_version_flag(CLI::App& app, std::string_view tool);
// --skip-bad-lines for tools that read jsonl.
void add_skip_bad_lines_flag(CLI::App& app, bool& skip);

// --progress MODE, --progress-interval S and -q/--quiet, for tools that do long work.
struct ProgressFlags {
    std::string mode = "auto";
    double interval_s = 30.0;
    bool quiet = false;
    // The display to use after parsing: --quiet turns it off.
    Progress::Mode resolved() const;
};
void add_progress_flags(CLI::App& app, ProgressFlags& flags);

}  // namespace mds
