// mds-slurm-status: the on-call watchdog of a SLURM training (docs/mds-slurm-status.md).
#include <cstdlib>
#include <string>
#include <vector>

#include "mds/slurm/status.h"
#include "mds/util/cli.h"
#include "mds/util/error.h"
#include "mds/util/tool.h"

namespace {

// "a,b" and repeated flags → one list.
std::vector<std::string> split_commas(const std::vector<std::string>& in) {
    std::vector<std::string> out;
    for (const auto& s : in) {
        std::size_t start = 0;
        while (start <= s.size()) {
            auto end = s.find(',', start);
            if (end == std::string::npos) end = s.size();
            if (end > start) out.push_back(s.substr(start, end - start));
            start = end + 1;
        }
    }
    return out;
}

// Bounds of the hour / minute flags: beyond a year they are typos (1e300 would also overflow the
// arithmetic on seconds).
constexpr double kHoursInYear = 24 * 366;

}  // namespace

int main(int argc, char** argv) {
    return mds::run_tool("mds-slurm-status", [&]() -> int {
        mds::slurm::StatusOptions o;
        std::vector<std::string> users, groups, partitions, disks;
        bool no_state = false, no_sacct = false;
        CLI::App app{"Is the training RUNNING or SCHEDULED? Still writing iteration lines? Room left on the disks?\n"
                     "Prints timestamped PULSE / NOTE / ALERT / UNKNOWN lines (append them to the log of logs), sends\n"
                     "alerts by e-mail and --alert-command once per change, and exits 0 (all well), 3 (alert) or 4\n"
                     "(could not check, e.g. the scheduler did not answer; never reported as a job alert).",
                     "mds-slurm-status"};
        mds::add_version_flag(app, "mds-slurm-status");
        app.add_option("--job-name", o.watch.job_name, "The training's SLURM job name (exact, full-length match)")->required();
        app.add_option("--user", users, "Only jobs of these users (repeatable or comma-separated; default: any user)");
        app.add_option("--group", groups, "Add the members of this Unix group to --user (as `getent group`)");
        app.add_option("--partition", partitions, "Only jobs in these partitions (repeatable or comma-separated)");
        app.add_option("--max-pending-hours", o.watch.max_pending_hours,
                       "A job PENDING longer than this counts as not scheduled (for exclusive allocations; default: off)")
            ->check(mds::number_in(0, kHoursInYear));

        app.add_option("--log-file", o.watch.log_file, "The training's main log, for --stall-minutes")->group("Stall");
        app.add_option("--stall-minutes", o.watch.stall_minutes,
                       "Alert when the job runs but --log-file gets no new iteration line for this long")
            ->check(mds::number_in(0, kHoursInYear * 60, true))
            ->group("Stall");

        app.add_option("--watch-disk", disks,
                       "PATH:PERCENT[:INODE_PERCENT]: alert when space (or inodes) used reaches PERCENT (repeatable)")
            ->group("Disks");

        app.add_option("--mail-to", o.mail.to, "E-mail alerts to this address (repeatable)")->group("Alerts");
        app.add_option("--mail-from", o.mail.from, "Sender address (default: <user>@<host>)")->group("Alerts");
        app.add_option("--smtp", o.mail.smtp_url,
                       "SMTP server: smtp://host[:port] (STARTTLS when offered) or smtps://host[:port]; "
                       "credentials from MDS_SMTP_USER / MDS_SMTP_PASSWORD")
            ->capture_default_str()
            ->group("Alerts");
        app.add_option("--alert-command", o.alert_command,
                       "Run `sh -c CMD sh MESSAGE` per alert; $MDS_ALERT_MESSAGE, $MDS_ALERT_SUBJECT, $MDS_ALERT_LEVEL, "
                       "$MDS_JOB_NAME set, the report on stdin")
            ->group("Alerts");
        app.add_option("--state-file", o.state_file,
                       "Where alerts already sent are remembered (default: $XDG_STATE_HOME/mds/slurm-status-NAME.json)")
            ->group("Alerts");
        app.add_flag("--no-state", no_state, "Keep no state: send every alert on every run (as the original script)")
            ->group("Alerts");
        app.add_option("--renotify-hours", o.policy.renotify_hours,
                       "Send an alert that is still true again after this many hours (0: every run)")
            ->capture_default_str()
            ->check(mds::number_in(0, kHoursInYear))
            ->group("Alerts");
        app.add_option("--unreachable-after", o.policy.unreachable_after,
                       "Send 'cannot reach the scheduler' only after this many runs in a row failed")
            ->capture_default_str()
            ->check(mds::number_in(1, 1e6))
            ->group("Alerts");
        app.add_option("--append-to", o.append_to, "Also append every line to this file (the log of logs)")->group("Alerts");

        app.add_option("--squeue", o.squeue, "The squeue program")->capture_default_str()->group("SLURM");
        app.add_option("--sacct", o.sacct, "The sacct program (finished jobs, for the failed-node hint)")
            ->capture_default_str()
            ->group("SLURM");
        app.add_flag("--no-sacct", no_sacct, "Do not ask sacct (the hint then uses what squeue still shows)")->group("SLURM");
        app.add_option("--squeue-format", o.format,
                       "auto: squeue --json, the delimited text form where --json is missing; json; text")
            ->capture_default_str()
            ->check(CLI::IsMember({"auto", "json", "text"}))
            ->group("SLURM");
        app.add_option("--timeout", o.timeout_s, "Seconds a squeue / sacct call may take (at most a day)")
            ->capture_default_str()
            ->check(mds::number_in(0, mds::slurm::kMaxTimeoutSeconds, true))
            ->group("SLURM");
        app.add_flag("-v,--verbose", o.verbose, "Say on stderr which commands ran and how long they took");
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;

        if (o.watch.stall_minutes > 0 && o.watch.log_file.empty())
            throw mds::UsageError("--stall-minutes needs --log-file");
        if (!o.watch.log_file.empty() && o.watch.stall_minutes <= 0)
            throw mds::UsageError("--log-file needs --stall-minutes (how long without an iteration line is a stall)");
        if (no_state && !o.state_file.empty()) throw mds::UsageError("--no-state and --state-file exclude each other");
        if (o.mail.to.empty() && !o.mail.from.empty()) throw mds::UsageError("--mail-from needs --mail-to");
        o.policy.stateless = no_state;
        o.use_sacct = !no_sacct;
        o.users = split_commas(users);
        o.partitions = split_commas(partitions);
        for (const auto& g : split_commas(groups))
            for (auto& m : mds::slurm::group_members(g)) o.users.push_back(std::move(m));
        for (const auto& d : disks) o.disks.push_back(mds::slurm::parse_disk_watch(d));
        if (const char* u = std::getenv("MDS_SMTP_USER")) o.mail.user = u;
        if (const char* p = std::getenv("MDS_SMTP_PASSWORD")) o.mail.password = p;
        return mds::slurm::run_status(o);
    });
}
