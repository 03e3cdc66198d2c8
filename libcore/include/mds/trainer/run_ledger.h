// The run ledger (docs/run-ledger.md): one JSON line per mds-train process in `{--save}/runs.jsonl`
// (or --run-ledger PATH), saying what the process trained — start and end time, hosts and job id,
// mds version, seed, parallel layout, the iteration and consumed-samples range, the checkpoint it
// loaded and the ones it saved, why it stopped — so that any iteration's data can be reproduced
// later (mds-sample-text --ledger). The job of a line trained iterations
// resumed_iteration+1 … iteration.
//
// Write protocol: the line is appended when training starts ("status": "running") and rewritten in
// place after each checkpoint save and at the end ("status": "stopped"). Every write rewrites the
// whole file under an exclusive lock on PATH.lock (flock) through a temporary + fsync + rename +
// fsync of the folder, so a crash at any point leaves either the old or the new file, never a
// torn one. Lines of other processes, including malformed ones, are kept byte for byte.
//
// The header needs no LibTorch, but its implementation is part of the trainer area (mds::trainer),
// which readers such as mds-sample-text link.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mds::trainer {

struct LedgerLayout {
    std::int64_t world_size = 1, tp = 1, pp = 1, dp = 1;
};

struct LedgerSave {
    std::int64_t iteration = 0;
    std::string path;  // the checkpoint folder (e.g. {save}/global_step100)
};

// One line of the ledger (the shared contract; docs/run-ledger.md lists the fields).
struct LedgerEntry {
    std::string run_id;                     // 16 hex characters
    std::string status = "running";         // "running" | "stopped"
    std::string start_time;                 // ISO-8601 UTC, "2026-11-26T09:30:00Z"
    std::optional<std::string> end_time;    // null while running
    std::optional<std::string> job_id;      // $SLURM_JOB_ID
    std::vector<std::string> hosts;         // every rank's node name, unique, sorted
    std::string mds_version;
    std::int64_t seed = 0;
    LedgerLayout layout;
    std::int64_t resumed_iteration = 0;         // iteration of the loaded checkpoint (0: none)
    std::int64_t resumed_consumed_samples = 0;
    std::int64_t iteration = 0;                 // last trained iteration so far
    std::int64_t consumed_samples = 0;          // consumed samples so far
    std::optional<std::string> loaded;          // checkpoint folder loaded
    std::vector<LedgerSave> saved;
    std::optional<std::string> stop;            // null while running: "finished", "exit interval", "SIGTERM", "error: ..."
    std::vector<std::string> command_line;      // mds-train's argv[1..] as given
    std::string cwd;                            // relative paths in command_line are relative to it
    std::size_t line = 0;                       // 1-based line in the ledger file (read_ledger; not stored)

    // True when this line's job trained `iteration`: resumed_iteration < iteration <= this->iteration,
    // or (status "running") resumed_iteration < iteration.
    bool trained(std::int64_t it) const;
};

// The line as the ledger holds it (one JSON object, no newline).
std::string to_json_line(const LedgerEntry& e);
// Parses one line; throws mds::Error naming `where` (e.g. "runs.jsonl:3") and what was expected.
LedgerEntry parse_ledger_line(const std::string& line, const std::string& where);
// Every line of a ledger, in file order (blank lines skipped). Throws mds::Error "<path>:<line>: ..."
// for a malformed line or a missing file.
std::vector<LedgerEntry> read_ledger(const std::string& path);
// The line whose job trained `iteration`: the last such line in the file (mds-sample-text --ledger),
// or nullptr.
const LedgerEntry* find_ledger_entry(const std::vector<LedgerEntry>& entries, std::int64_t iteration);

// The path --run-ledger names: "" when disabled ("none", or no --save and no --run-ledger), the
// value itself when given, else {save}/runs.jsonl.
std::string resolve_ledger_path(const std::string& run_ledger_flag, const std::string& save);
// The start-up check of a resolved ledger path (nothing created): not a folder, its folder writable
// or creatable, the file itself writable when it exists. Throws mds::UsageError naming `flag`.
void check_ledger_path(const std::string& path, const std::string& flag = "--run-ledger");

// Current time as ISO-8601 UTC with a trailing Z (second precision).
std::string iso8601_utc_now();

// The writer kept by mds-train's rank 0: begin() appends the running line; update() rewrites it.
// Write failures after begin() are printed as warnings (the ledger must not stop a training run).
class RunLedger {
public:
    // Appends `entry` (its run_id, start_time and status filled in here) to `path`; throws mds::Error
    // when the file cannot be written.
    RunLedger(std::string path, LedgerEntry entry);

    const std::string& path() const { return path_; }
    LedgerEntry& entry() { return entry_; }
    const LedgerEntry& entry() const { return entry_; }

    // A checkpoint of `iteration` committed at `folder` (after `latest` moved).
    void record_save(std::int64_t iteration, const std::string& folder, std::int64_t consumed_samples);
    // Progress so far (not written until the next record_save / finish).
    void record_progress(std::int64_t iteration, std::int64_t consumed_samples);
    // The final line: status "stopped", end_time now, stop = `reason`. Idempotent: the first call wins.
    void finish(const std::string& reason);
    bool finished() const { return finished_; }

private:
    void write();  // rewrites the file with this run's line replaced; warns on failure

    std::string path_;
    LedgerEntry entry_;
    bool finished_ = false;
    std::set<std::size_t> warned_;  // malformed lines (1-based) already warned about
};

}  // namespace mds::trainer
