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
// A flag that takes one value and is given twice keeps the last value, as argparse (and so
// Megatron's command lines) does; every mds tool behaves alike.
std::optional<int> parse_cli(CLI::App& app, int argc, char** argv);

// The one check of numeric flags for every tool: the value must be a finite number (no nan, no
// inf) within [lo, hi] (lo excluded when `lo_open`). Errors print the bounds readably ("at most
// 1024", "greater than 0"), never 300 digits of DBL_MAX; an infinite bound is not mentioned.
CLI::Validator number_in(double lo, double hi, bool lo_open = false);
// Finite and > 0 (seconds, intervals, rates).
CLI::Validator positive_number();
// Finite and >= 0.
CLI::Validator non_negative_number();
// A number as messages print it: whole numbers below 2^53 in full, others "%g" with 6 significant digits.
std::string format_number(double v);

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
