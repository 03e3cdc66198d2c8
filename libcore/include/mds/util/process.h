// Running a helper program (squeue, sacct, an alert command) and collecting what it printed, with
// a deadline: the watchdog must never hang on a scheduler that does not answer.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace mds {

struct ProcessOptions {
    // Wall-clock limit. At the deadline the child's process group gets SIGTERM, then SIGKILL
    // 2 s later. Zero: no limit.
    std::chrono::milliseconds timeout{0};
    // Written to the child's standard input, which is then closed (empty: /dev/null).
    std::string stdin_data;
    // Added to (or replacing in) the inherited environment.
    std::map<std::string, std::string> env;
    // Output kept per stream; beyond it the rest is read and dropped (`truncated` says so).
    std::size_t max_output_bytes = std::size_t{1} << 30;
};

struct ProcessResult {
    bool started = false;       // false: exec failed (`start_error` says why)
    std::string start_error;
    bool timed_out = false;     // killed at the deadline
    int exit_code = -1;         // exit status when the child exited, else -1
    int signal = 0;             // the signal that ended it, else 0
    std::string out, err;       // what it wrote (up to max_output_bytes each)
    bool truncated = false;
    std::chrono::milliseconds elapsed{0};

    bool ok() const { return started && !timed_out && exit_code == 0; }
    // "exit status 1", "killed by signal 9 (Killed)", "timed out after 30 s", "could not start: ..."
    std::string describe() const;
};

// Runs argv[0] (searched in PATH) with argv, in its own process group, stdout and stderr captured,
// no other inherited descriptors. Never throws for the child's failures; only for an empty argv.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

}  // namespace mds
