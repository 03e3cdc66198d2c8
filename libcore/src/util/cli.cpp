#include "mds/util/cli.h"

#include <cstdio>

#include "mds/util/tool.h"

namespace mds {

std::optional<int> parse_cli(CLI::App& app, int argc, char** argv) {
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
        ->check(CLI::PositiveNumber);
    add_quiet_flag(app, flags.quiet);
}

const char* mds_version() { return MDS_VERSION; }

}  // namespace mds
