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
    // 2 s later. Zero (or negative): no limit; longer than kMaxProcessTimeout: kMaxProcessTimeout.
    std::chrono::milliseconds timeout{0};
    // Written to the child's standard input, which is then closed (empty: /dev/null).
    std::string stdin_data;
    // Added to (or replacing in) the inherited environment.
    std::map<std::string, std::string> env;
    // Output kept per stream; beyond it the rest is read and dropped (`truncated` says so), so a
    // program printing without end costs no more memory than this.
    std::size_t max_output_bytes = std::size_t{64} << 20;
    // Stop the child (its process group: SIGTERM, SIGKILL 2 s later) as soon as a stream passes
    // max_output_bytes, instead of reading it to its end: for output that is useless once cut
    // (a document to parse). `overflowed` then says so.
    bool stop_on_overflow = false;
};

// The longest deadline run_process applies (30 days); longer ones are cut to it.
constexpr std::chrono::milliseconds kMaxProcessTimeout{30LL * 24 * 3600 * 1000};

struct ProcessResult {
    bool started = false;       // false: exec failed (`start_error` says why)
    std::string start_error;
    bool timed_out = false;     // killed at the deadline
    int exit_code = -1;         // exit status when the child exited, else -1
    int signal = 0;             // the signal that ended it, else 0
    std::string out, err;       // what it wrote (up to max_output_bytes each)
    bool truncated = false;
    std::size_t limit_bytes = 0;  // the max_output_bytes it ran with (for describe())
    bool overflowed = false;    // stopped because of stop_on_overflow (then also truncated)
    // The child did not end even after SIGKILL (a process stuck in the kernel, e.g. on a dead NFS
    // mount): given up on after a few seconds, left unreaped.
    bool abandoned = false;
    std::chrono::milliseconds elapsed{0};

    bool ok() const { return started && !timed_out && !overflowed && exit_code == 0; }
    // "exit status 1", "killed by signal 9 (Killed)", "timed out after 30 s", "could not start: ...",
    // "stopped after printing more than 8 MiB"
    std::string describe() const;
};

// Runs argv[0] (searched in PATH) with argv, in its own process group, stdout and stderr captured,
// no other inherited descriptors. Never throws for the child's failures; only for an empty argv.
// Always returns within about timeout + 5 s when a timeout is set: the group is killed at the
// deadline, pipes held open by escaped descendants are abandoned, and a child that survives
// SIGKILL is abandoned too. When the child exits but members of its group keep its pipes open, they
// are read for 2 s more, then killed.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

}  // namespace mds
