// mds-slurm-status's run: ask SLURM about the training's jobs, read the log and the disks, print
// timestamped PULSE / NOTE / ALERT / UNKNOWN lines, send the alerts that are due, keep state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mds/slurm/notify.h"
#include "mds/slurm/watch.h"

namespace mds::slurm {

// Exit statuses of mds-slurm-status (besides mds's 1 = error and 2 = usage).
constexpr int kExitAlert = 3;        // at least one ALERT
constexpr int kExitCannotCheck = 4;  // no ALERT, but something could not be checked (UNKNOWN)

// The longest --timeout: a scheduler call allowed more than a day is a typo (or 1e300), and the
// watchdog, run hourly, must come back.
constexpr double kMaxTimeoutSeconds = 86400;
// Throws mds::UsageError naming --timeout unless 0 < timeout_s <= kMaxTimeoutSeconds (nan and inf
// refused): the library's own check, whatever the command line checked before.
void check_timeout(double timeout_s);

struct StatusOptions {
    WatchConfig watch;
    std::vector<std::string> users;       // squeue -u; empty: every user
    std::vector<std::string> groups;      // their members are added to users
    std::vector<std::string> partitions;  // empty: every partition
    std::vector<DiskWatch> disks;
    std::string squeue = "squeue";
    std::string sacct = "sacct";
    std::string format = "auto";          // auto | json | text
    double timeout_s = 30;                // per squeue / sacct call; see check_timeout
    bool use_sacct = true;
    MailConfig mail;                      // mail.to empty: no e-mail
    std::string alert_command;
    std::string state_file;               // empty with stateless false: the default path
    NotifyPolicy policy;
    std::string append_to;                // the "log of logs": every line is appended here too
    bool verbose = false;
};

// The default state file: $XDG_STATE_HOME/mds/slurm-status-<name>.json (~/.local/state/...).
std::string default_state_file(const std::string& job_name);
// Members of a Unix group (getent group NAME, last field). Throws mds::Error when unknown.
std::vector<std::string> group_members(const std::string& group);

// Queries squeue (and sacct) as the options say; never throws for a scheduler failure (it is a
// QueueView with reachable = false).
QueueView query_queue(const StatusOptions& options);

// The whole run; returns the exit status.
int run_status(const StatusOptions& options);

}  // namespace mds::slurm
