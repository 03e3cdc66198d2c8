// What SLURM says about jobs, parsed from the machine-readable outputs of its clients:
// `squeue --json` (22.05: job_state a string, times epoch integers, exit_code a wait status;
// 23.02: ids and exit_code {"set","infinite","number"}; 23.11 and later: job_state a list of base
// state and flags, times {"set","infinite","number"}, exit_code {status, return_code, signal}),
// the delimited text form `squeue -h -t all -o kSqueueTextFormat` (every SLURM version; the job
// name is the last field, so no character in it can break the split), and `sacct -X -n -P`
// (finished jobs, where accounting is enabled). specs/ops.md §3.2 and tests/data/slurm/README.md
// have the facts and their sources.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mds::slurm {

struct Job {
    std::string id;                  // as squeue shows it: "1234", "1234_7", "1234_[8-10%1]"
    std::int64_t job_id = 0;         // numeric id (an array's pending remainder: the array's id)
    std::int64_t array_job_id = 0;   // 0: not part of an array
    std::string array_task;          // "7", "8-10%1", or empty
    std::string name;
    std::string state;               // base state: PENDING, RUNNING, COMPLETED, FAILED, ...
    std::vector<std::string> state_flags;  // COMPLETING, CONFIGURING, REQUEUED, ... (list shapes)
    std::string reason;              // "None", "Dependency", "JobArrayTaskLimit", ...
    std::string user;
    std::string partition;
    std::string nodes;               // node list of a running / finished job ("jz[001-004]")
    std::int64_t submit_time = 0;    // epoch seconds; 0 = unknown
    std::int64_t start_time = 0;     // actual (running, finished) or expected (pending) start
    std::int64_t end_time = 0;
    std::optional<std::int64_t> elapsed_s;  // run time as SLURM counts it (text and sacct forms)
    std::string exit_code;           // "3:0" (status:signal) when known
};

struct QueryResult {
    std::vector<Job> jobs;
    // Errors SLURM reported inside a JSON answer (e.g. "slurm_load_jobs: Failed while looking
    // for jobs" when the controller cannot be reached); a non-empty list with no jobs means the
    // query failed, whatever the exit status.
    std::vector<std::string> errors;
    std::string slurm_version;       // from the JSON meta, when present
};

// The -o format of the text form: %A|%i|%F|%K|%T|%r|%V|%S|%e|%M|%u|%P|%N|%j.
extern const char* const kSqueueTextFormat;
// The -o fields of the sacct query: JobID,JobName,State,Start,End,Elapsed,ExitCode,NodeList,User.
extern const char* const kSacctFields;

// Parsers; errors (mds::Error) name the source ("squeue --json", "squeue output line 3") and what
// was expected.
QueryResult parse_squeue_json(std::string_view text, std::string_view source = "squeue --json");
std::vector<Job> parse_squeue_text(std::string_view text, std::string_view source = "squeue output");
std::vector<Job> parse_sacct(std::string_view text, std::string_view source = "sacct output");

// SLURM's text times: "2026-11-22T12:32:34" in local time → epoch; "N/A", "NONE", "Unknown",
// "None" and empty → 0. Throws mds::Error for anything else.
std::int64_t parse_slurm_time(std::string_view text);
// squeue's %M / sacct's Elapsed: "0:00", "12:34", "1:02:03", "2-01:02:03" → seconds; "INVALID",
// "N/A" → none.
std::optional<std::int64_t> parse_slurm_duration(std::string_view text);
// Seconds → "45s", "12m 03s", "3h 07m", "2d 04h".
std::string format_duration(std::int64_t seconds);
// Epoch → "2026-11-22T12:32:34" in local time (SLURM's own form).
std::string format_slurm_time(std::int64_t epoch);
// Epoch → local time in a strftime format.
std::string format_local_time(std::int64_t epoch, const char* format);

// States a job passes through while it holds or is about to hold nodes.
bool is_active_state(const Job& job);     // RUNNING, CONFIGURING, COMPLETING, SUSPENDED, ... (not PENDING)
bool is_pending_state(const Job& job);    // PENDING (and REQUEUE_HOLD / RESV_DEL_HOLD)
bool is_finished_state(const Job& job);   // COMPLETED, FAILED, TIMEOUT, CANCELLED, NODE_FAIL, ...
// A finished state that points at the job's nodes or its program rather than at a user's
// decision: FAILED, NODE_FAIL, BOOT_FAIL, OUT_OF_MEMORY, TIMEOUT, DEADLINE.
bool is_failure_state(const Job& job);
// PENDING reasons that SLURM will not resolve by itself (a hold, a dependency that can no longer
// be satisfied, a request the partition can never grant, a bad account or QOS).
bool is_stuck_reason(std::string_view reason);

}  // namespace mds::slurm
