// The watchdog's judgement, kept free of I/O so that tests can feed it any situation: which jobs of
// the training are running or scheduled, whether the running one still writes iteration lines,
// whether the disks have room, and which alerts to send now (one notification per change, not one
// per hourly run as the original script did). status.h runs the commands and does the I/O.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mds/slurm/squeue.h"

namespace mds::slurm {

// --- the training log ------------------------------------------------------------------------

// The last Megatron iteration line of a log (" iteration     1200/  292968 | consumed samples: ...").
struct IterationLine {
    std::int64_t iteration = 0;
    std::int64_t total = 0;
    std::uint64_t offset = 0;  // byte offset of the line's start
    bool last_line = false;    // nothing but whitespace follows it in the file
};

struct LogScan {
    std::string path;
    std::string error;         // non-empty: the file could not be read (the message says why)
    std::int64_t mtime = 0;    // epoch seconds of the last write
    std::uint64_t size = 0;
    std::optional<IterationLine> last;
};

// Reads the log backwards in blocks until it finds an iteration line (or reads `max_scan_bytes`,
// 0 = the whole file). Never throws; errors land in LogScan::error.
LogScan scan_log(const std::string& path, std::uint64_t max_scan_bytes = 0);
// The iteration line parser, for one line: "iteration N/ M |" anywhere in it.
std::optional<std::pair<std::int64_t, std::int64_t>> parse_iteration_line(const std::string& line);

// --- disks ------------------------------------------------------------------------------------

struct DiskWatch {
    std::string path;
    double max_percent = 90.0;         // space used above this alerts
    double max_inode_percent = 90.0;   // inodes used above this alerts
};

// "PATH:PERCENT" or "PATH:PERCENT:INODE_PERCENT" (inodes default to PERCENT). Throws UsageError.
DiskWatch parse_disk_watch(const std::string& spec);

struct DiskUsage {
    std::string error;  // statvfs failed
    std::uint64_t total_bytes = 0, used_bytes = 0, avail_bytes = 0;
    std::uint64_t total_inodes = 0, used_inodes = 0;  // total 0: the filesystem does not count them
    double percent() const;        // as df computes Use%: used / (used + available)
    double inode_percent() const;
};
DiskUsage disk_usage(const std::string& path);

// --- the report -------------------------------------------------------------------------------

enum class Level { pulse, note, alert, unknown };
const char* level_label(Level level);  // "PULSE", "NOTE", "ALERT", "UNKNOWN"

struct Finding {
    Level level = Level::pulse;
    std::string key;      // stable identity for de-duplication: "not-scheduled", "stalled", "disk:/scratch", ...
    std::string text;     // one line, no timestamp
    std::string subject;  // for alerts: the e-mail subject
};

struct WatchConfig {
    std::string job_name;
    std::string log_file;            // empty: no stall check
    double stall_minutes = 0;        // > 0 with log_file
    double max_pending_hours = 0;    // > 0: a job pending longer than this is stuck
};

// What the scheduler said. `reachable` false: squeue failed (`error` says how); jobs are empty.
struct QueueView {
    bool reachable = true;
    std::string error;
    std::vector<Job> jobs;           // every job of any name from squeue (filtered here by name)
    std::vector<Job> history;        // finished jobs from sacct, when accounting answered
};

// The state kept between runs (--state-file).
struct AlertRecord {
    std::int64_t first_seen = 0;
    std::int64_t last_notified = 0;  // 0: never notified
    std::string text;
};
struct WatchState {
    std::map<std::string, AlertRecord> alerts;
    std::int64_t unreachable_runs = 0;    // consecutive runs that could not reach the scheduler
    std::string log_path;                 // the last iteration line seen, and when it was first seen
    std::int64_t log_iteration = -1;
    std::uint64_t log_offset = 0;
    std::int64_t log_seen_at = 0;
};
WatchState load_state(const std::string& path);  // missing file: empty state; corrupt: mds::Error
void save_state(const std::string& path, const WatchState& state);

// Judges the queue and the log at time `now`; updates the log-progress part of `state`.
std::vector<Finding> assess_jobs(const WatchConfig& config, const QueueView& queue, const LogScan* log,
                                 WatchState& state, std::int64_t now);
std::vector<Finding> assess_disks(const std::vector<DiskWatch>& watches, const std::vector<DiskUsage>& usages);

struct NotifyPolicy {
    double renotify_hours = 24;      // an alert still present is sent again after this long (0: every run)
    std::int64_t unreachable_after = 1;  // runs in a row without the scheduler before it is sent
    bool stateless = false;          // no state file: every alert is sent every run
};

// Which findings to send now (alerts and unknowns that are new, or due again), plus a pulse
// "RECOVERED" finding for each alert of the previous run that is gone; updates `state`.
std::vector<Finding> select_notifications(std::vector<Finding>& findings, WatchState& state, const NotifyPolicy& policy,
                                          std::int64_t now);

}  // namespace mds::slurm
