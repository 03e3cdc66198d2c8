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

}  // namespace mds
