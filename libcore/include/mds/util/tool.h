// The boundary between a tool's main() and libcore: one place that formats `mds-<tool>: error:`
// and `mds-<tool>: warning:` and maps exceptions to exit statuses (0 ok, 1 error, 2 usage).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace mds {

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// The name used in messages ("mds-preprocess"); set once by run_tool.
const std::string& tool_name();

void print_error(std::string_view message);
void print_warning(std::string_view message);
void print_info(std::string_view message);  // "mds-<tool>: ..." on stderr, for logs

// Runs body() and turns exceptions into messages and exit codes: mds::UsageError and CLI11 parse
// errors exit 2, mds::Error and other std::exceptions exit 1. Also installs the signal handlers
// that remove temporary outputs on SIGINT/SIGTERM (files.h).
int run_tool(std::string_view name, const std::function<int()>& body);

}  // namespace mds
