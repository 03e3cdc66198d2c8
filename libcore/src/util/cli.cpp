#include "mds/util/cli.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "mds/util/tool.h"

namespace mds {

namespace {

// Last value wins for single-value options of `app` and its subcommands (CLI11 refuses a repeat).
void take_last_values(CLI::App& app) {
    for (CLI::Option* o : app.get_options())
        if (o->get_expected_max() == 1 && o->get_multi_option_policy() == CLI::MultiOptionPolicy::Throw)
            o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) take_last_values(*sub);
}

}  // namespace

std::string format_number(double v) {
    char buf[64];
    // Whole numbers that a double holds exactly print in full ("4294967295", not "4.29497e+09").
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9007199254740992.0)
        std::snprintf(buf, sizeof buf, "%.0f", v);
    else
        std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

CLI::Validator number_in(double lo, double hi, bool lo_open) {
    const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
    std::string bounds;
    if (has_lo && has_hi && !lo_open) bounds = "between " + format_number(lo) + " and " + format_number(hi);
    else if (has_lo && has_hi) bounds = "greater than " + format_number(lo) + " and at most " + format_number(hi);
    else if (has_lo) bounds = (lo_open ? "greater than " : "at least ") + format_number(lo);
    else if (has_hi) bounds = "at most " + format_number(hi);
    const std::string expect = "a finite number" + (bounds.empty() ? std::string() : " " + bounds);
    auto check = [=](std::string& input) -> std::string {
        const char* s = input.c_str();
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(s, &end);
        while (end && *end == ' ') ++end;
        if (end == s || *end != '\0') return "'" + input + "' is not a number; expected " + expect;
        if (!std::isfinite(v)) return "'" + input + "' is not finite; expected " + expect;
        if ((has_lo && (lo_open ? v <= lo : v < lo)) || (has_hi && v > hi))
            return "'" + input + "' is out of range; expected " + expect;
        return {};
    };
    return CLI::Validator(check, expect, "NUMBER");
}

CLI::Validator positive_number() { return number_in(0, std::numeric_limits<double>::infinity(), true); }
CLI::Validator non_negative_number() { return number_in(0, std::numeric_limits<double>::infinity()); }

std::optional<int> parse_cli(CLI::App& app, int argc, char** argv) {
    take_last_values(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
        std::fputs(app.help().c_str(), stdout);
        return kExitOk;
    } catch (const CLI::CallForAllHelp&) {
        std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
        return kExitOk;
    } catch (const CLI::CallForVersion&) {
        std::fputs((app.version() + "\n").c_str(), stdout);
        return kExitOk;
    } catch (const CLI::ParseError& e) {
        print_error(e.what());
        std::fprintf(stderr, "Run with --help for more information.\n");
        return kExitUsage;
    }
    return std::nullopt;
}

void add_quiet_flag(CLI::App& app, bool& quiet) {
    app.add_flag("-q,--quiet", quiet, "No progress and no summary on stderr (errors are still printed)");
}

void add_json_flag(CLI::App& app, bool& json) {
    app.add_flag("--json", json, "Print the summary as one JSON object on stdout");
}

void add_version_flag(CLI::App& app, std::string_view tool) {
    app.set_version_flag("--version", std::string(tool) + " " + mds_version());
}

void add_skip_bad_lines_flag(CLI::App& app, bool& skip) {
    app.add_flag("--skip-bad-lines", skip, "Skip and count malformed lines (bad JSON, invalid UTF-8, missing or "
                                           "non-string key) instead of stopping");
}

Progress::Mode ProgressFlags::resolved() const {
    if (quiet || mode == "off") return Progress::Mode::Off;
    if (mode == "bar") return Progress::Mode::Bar;
    if (mode == "lines") return Progress::Mode::Lines;
    return Progress::Mode::Auto;
}

void add_progress_flags(CLI::App& app, ProgressFlags& flags) {
    app.add_option("--progress", flags.mode, "Progress display: auto (bar on a terminal, lines otherwise), bar, lines, off")
        ->check(CLI::IsMember({"auto", "bar", "lines", "off"}))
        ->default_str("auto");
    app.add_option("--progress-interval", flags.interval_s, "Seconds between plain progress lines")
        ->default_str("30")
        ->check(positive_number());
    add_quiet_flag(app, flags.quiet);
}

const char* mds_version() { return MDS_VERSION; }

}  // namespace mds
