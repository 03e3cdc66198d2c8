// Shared command-line plumbing over CLI11: parsing with mds exit statuses, and flags that several
// tools attach (declared once here, with their help text).
#pragma once

#include <CLI/CLI.hpp>  // CLI::App, CLI::ParseError

#include <optional>

namespace mds {

// Parses argv. Returns an exit status when the tool must stop now (0 after --help/--version,
// 2 after a usage error, with `mds-<tool>: error: ...` printed), or nullopt to go on.
std::optional<int> parse_cli(CLI::App& app, int argc, char** argv);

// --quiet: no progress and no summary on stderr.
void add_quiet_flag(CLI::App& app, bool& quiet);
// --json: machine-readable summary on stdout.
void add_json_flag(CLI::App& app, bool& json);

}  // namespace mds
