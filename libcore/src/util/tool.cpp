#include "mds/util/tool.h"

#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>
#include <system_error>

#include "mds/util/error.h"
#include "mds/util/files.h"  // install_cleanup_signal_handlers
#include "mds/util/safe_paths.h"

namespace mds {

namespace {
std::string g_tool_name = "mds";


void print_line(std::string_view kind, std::string_view message) {
    std::string line = g_tool_name;
    line += ": ";
    line += kind;
    line += message;
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
}
}  // namespace

const std::string& tool_name() { return g_tool_name; }

void print_error(std::string_view message) { print_line("error: ", message); }
void print_warning(std::string_view message) { print_line("warning: ", message); }
void print_info(std::string_view message) { print_line("", message); }

int run_tool(std::string_view name, const std::function<int()>& body) {
    g_tool_name = std::string(name);
    install_cleanup_signal_handlers();
    try {
        return body();
    } catch (const UsageError& e) {
        print_error(e.what());
        std::fprintf(stderr, "Run with --help for more information.\n");
        return kExitUsage;
    } catch (const Error& e) {
        print_error(e.what());
        return kExitError;
    } catch (const std::bad_alloc&) {
        print_error("out of memory");
        return kExitError;
    } catch (const std::filesystem::filesystem_error& e) {
        print_error(filesystem_error_message(e));
        return kExitError;
    } catch (const std::system_error& e) {
        print_error(e.what());
        return kExitError;
    } catch (const std::exception& e) {
        print_error(std::string("internal error: ") + e.what());
        return kExitError;
    }
}

}  // namespace mds
