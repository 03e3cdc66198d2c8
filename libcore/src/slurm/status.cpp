// mds-slurm-status's run (status.h).
#include "mds/slurm/status.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <set>

#include "mds/util/cli.h"         // format_number
#include "mds/util/error.h"
#include "mds/util/process.h"
#include "mds/util/safe_paths.h"  // printable, prepare_output_dir
#include "mds/util/tool.h"

namespace mds::slurm {
namespace {

std::string first_line(const std::string& s) {
    std::string t = s;
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
    // squeue prefixes its errors with "squeue: error: "; keep the last line, the most specific.
    const auto nl = t.rfind('\n');
    if (nl != std::string::npos) t = t.substr(nl + 1);
    return printable(t, 300);
}

std::string joined(const std::vector<std::string>& v, const char* sep) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
    return s;
}

std::string timestamp(std::int64_t now) { return format_local_time(now, "%Y-%m-%d %H:%M:%S"); }

// What squeue / sacct may print before the answer is refused (and the program stopped): the
// JSON form lists every job of the cluster before SLURM 24.05.1 (about 5 KiB each), the text and
// sacct forms only the training's jobs. Endless or junk output costs at most this much memory.
constexpr std::size_t kMaxSqueueJsonBytes = std::size_t{32} << 20;
constexpr std::size_t kMaxSqueueTextBytes = std::size_t{8} << 20;
constexpr std::size_t kMaxSacctBytes = std::size_t{8} << 20;

// A deadline for each squeue / sacct call; --timeout was checked (check_timeout), so the
// milliseconds neither overflow nor round down to 0, which run_process reads as "no limit".
ProcessOptions process_options(const StatusOptions& o, std::size_t max_output_bytes) {
    check_timeout(o.timeout_s);
    ProcessOptions p;
    p.timeout = std::chrono::milliseconds(std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(o.timeout_s * 1000))));
    p.max_output_bytes = max_output_bytes;
    p.stop_on_overflow = true;
    return p;
}

std::string seconds_text(double s) { return format_number(s) + " s"; }

std::string command_text(const std::vector<std::string>& argv) { return joined(argv, " "); }

// Jobs of other users / partitions dropped (the JSON form ignores squeue's own filters).
void filter_jobs(std::vector<Job>& jobs, const std::vector<std::string>& users, const std::vector<std::string>& partitions) {
    const std::set<std::string> u(users.begin(), users.end());
    jobs.erase(std::remove_if(jobs.begin(), jobs.end(),
                              [&](const Job& j) {
                                  if (!u.empty() && !u.count(j.user)) return true;
                                  if (partitions.empty()) return false;
                                  // A pending job may list several partitions: "p1,p2".
                                  for (const auto& p : partitions) {
                                      std::size_t start = 0;
                                      while (start <= j.partition.size()) {
                                          auto end = j.partition.find(',', start);
                                          if (end == std::string::npos) end = j.partition.size();
                                          if (j.partition.compare(start, end - start, p) == 0) return false;
                                          start = end + 1;
                                      }
                                  }
                                  return true;
                              }),
               jobs.end());
}

void verbose(const StatusOptions& o, const std::string& what) {
    if (o.verbose) print_info(what);
}

}  // namespace

void check_timeout(double timeout_s) {
    if (!std::isfinite(timeout_s) || !(timeout_s > 0) || timeout_s > kMaxTimeoutSeconds)
        throw UsageError("--timeout " + format_number(timeout_s) + ": expected a finite number of seconds greater than 0 and at most " +
                         format_number(kMaxTimeoutSeconds) + " (a day)");
}

std::string default_state_file(const std::string& job_name) {
    std::string dir;
    if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x)
        dir = std::string(x) + "/mds";
    else if (const char* h = std::getenv("HOME"); h && *h)
        dir = std::string(h) + "/.local/state/mds";
    else
        throw UsageError("no HOME or XDG_STATE_HOME to keep the state in: give --state-file PATH or --no-state");
    std::string safe;
    for (char c : job_name) safe += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
    return dir + "/slurm-status-" + safe + ".json";
}

std::vector<std::string> group_members(const std::string& group) {
    std::vector<char> buf(1 << 16);
    struct group gr{};
    struct group* res = nullptr;
    int rc = 0;
    while ((rc = ::getgrnam_r(group.c_str(), &gr, buf.data(), buf.size(), &res)) == ERANGE &&
           buf.size() < (std::size_t{1} << 26))
        buf.resize(buf.size() * 4);
    if (rc != 0) throw Error(errno_message("cannot look up group '" + group + "'", rc));
    if (!res) throw Error("unknown group '" + group + "' (getent group " + group + " finds nothing)");
    std::vector<std::string> members;
    for (char** m = gr.gr_mem; m && *m; ++m) members.emplace_back(*m);
    if (members.empty())
        throw Error("group '" + group + "' lists no members (getent group " + group +
                    "); name the users with --user instead");
    return members;
}

QueueView query_queue(const StatusOptions& o) {
    QueueView view;
    const ProcessOptions json_opts = process_options(o, kMaxSqueueJsonBytes);
    const ProcessOptions text_opts = process_options(o, kMaxSqueueTextBytes);
    const ProcessOptions sacct_opts = process_options(o, kMaxSacctBytes);
    const std::string& name = o.watch.job_name;

    auto unreachable = [&](std::string why) {
        view.reachable = false;
        view.error = std::move(why);
        view.jobs.clear();
        return view;
    };

    bool have = false;
    if (o.format == "auto" || o.format == "json") {
        // Before 24.05.1 squeue --json ignores --name / -t / -p (22.05 lists finished jobs
        // anyway); later versions apply them and list finished jobs only with -t all. The jobs
        // are filtered here again either way.
        std::vector<std::string> argv = {o.squeue, "--json", "-t", "all", "--name=" + name};
        if (!o.users.empty()) argv.push_back("--user=" + joined(o.users, ","));
        if (!o.partitions.empty()) argv.push_back("--partition=" + joined(o.partitions, ","));
        verbose(o, "running: " + command_text(argv));
        const ProcessResult r = run_process(argv, json_opts);
        verbose(o, "squeue --json: " + r.describe() + " in " + std::to_string(r.elapsed.count()) + " ms, " +
                       std::to_string(r.out.size()) + " bytes");
        if (!r.started) return unreachable(o.squeue + " " + r.describe());
        if (r.timed_out) return unreachable(o.squeue + " --json did not answer within " + seconds_text(o.timeout_s));
        if (r.overflowed && o.format == "json")
            return unreachable(o.squeue + " --json " + r.describe() + " (the text form, --squeue-format text, lists only this job)");
        const bool contact = r.err.find("Unable to contact") != std::string::npos ||
                             r.err.find("Socket timed out") != std::string::npos ||
                             r.err.find("Zero Bytes were transmitted") != std::string::npos;
        if (r.overflowed) {
            verbose(o, "squeue --json " + r.describe() + "; trying the text form");
        } else if (r.exit_code == 0 || contact) {
            try {
                if (r.exit_code != 0) throw Error(first_line(r.err));
                QueryResult q = parse_squeue_json(r.out);
                if (q.jobs.empty() && !q.errors.empty())
                    return unreachable("squeue --json answered with errors: " + printable(joined(q.errors, "; "), 500));
                view.jobs = std::move(q.jobs);
                have = true;
            } catch (const Error& e) {
                if (contact) return unreachable(o.squeue + " --json: " + r.describe() + ": " + first_line(r.err));
                if (o.format == "json") return unreachable(e.what());
                verbose(o, std::string("squeue --json unusable (") + e.what() + "), trying the text form");
            }
        } else if (o.format == "json") {
            return unreachable(o.squeue + " --json: " + r.describe() + ": " + first_line(r.err));
        } else {
            verbose(o, "squeue --json: " + r.describe() + ": " + first_line(r.err) + "; trying the text form");
        }
    }
    if (!have) {
        std::vector<std::string> argv = {o.squeue, "-h", "-t", "all", "-o", kSqueueTextFormat, "--name=" + name};
        if (!o.users.empty()) argv.push_back("--user=" + joined(o.users, ","));
        if (!o.partitions.empty()) argv.push_back("--partition=" + joined(o.partitions, ","));
        verbose(o, "running: " + command_text(argv));
        const ProcessResult r = run_process(argv, text_opts);
        if (!r.started) return unreachable(o.squeue + " " + r.describe());
        if (r.timed_out) return unreachable(o.squeue + " did not answer within " + seconds_text(o.timeout_s));
        if (r.overflowed) return unreachable(o.squeue + " " + r.describe() + ", far more than the jobs of one name");
        if (r.exit_code != 0) return unreachable(o.squeue + ": " + r.describe() + ": " + first_line(r.err));
        try {
            view.jobs = parse_squeue_text(r.out);
        } catch (const Error& e) {
            return unreachable(std::string("cannot read squeue's output: ") + e.what());
        }
    }
    filter_jobs(view.jobs, o.users, o.partitions);

    if (o.use_sacct) {
        std::vector<std::string> argv = {o.sacct, "-X", "-n", "-P", "--name=" + name, "-S", "now-7days", "-o", kSacctFields};
        if (o.users.empty()) argv.push_back("--allusers");
        else argv.push_back("--user=" + joined(o.users, ","));
        verbose(o, "running: " + command_text(argv));
        const ProcessResult r = run_process(argv, sacct_opts);
        const bool disabled = r.out.find("accounting storage is disabled") != std::string::npos ||
                              r.err.find("accounting storage is disabled") != std::string::npos;
        if (r.ok() && !disabled) {
            try {
                view.history = parse_sacct(r.out);
                filter_jobs(view.history, o.users, {});
            } catch (const Error& e) {
                verbose(o, std::string("ignoring sacct's answer: ") + e.what());
            }
        } else {
            verbose(o, "sacct unavailable (" + (disabled ? std::string("accounting storage is disabled") : r.describe() + ": " + first_line(r.err)) +
                           "); the failed-job hint uses what squeue still shows");
        }
    }
    return view;
}

int run_status(const StatusOptions& o) {
    check_timeout(o.timeout_s);
    const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
    const bool stateless = o.policy.stateless;
    const std::string state_path = stateless ? std::string() : (o.state_file.empty() ? default_state_file(o.watch.job_name) : o.state_file);
    WatchState state;
    if (!stateless) state = load_state(state_path);

    const QueueView queue = query_queue(o);
    LogScan log;
    const bool want_log = !o.watch.log_file.empty();
    if (want_log) log = scan_log(o.watch.log_file);
    std::vector<Finding> findings = assess_jobs(o.watch, queue, want_log ? &log : nullptr, state, now);
    std::vector<DiskUsage> usages;
    for (const auto& d : o.disks) usages.push_back(disk_usage(d.path));
    for (auto& f : assess_disks(o.disks, usages)) findings.push_back(std::move(f));

    NotifyPolicy policy = o.policy;
    const std::vector<Finding> to_send = select_notifications(findings, state, policy, now);

    // The report: stdout (and the log of logs); alerts also on stderr unless it is the same file.
    const std::string stamp = "[" + timestamp(now) + "] ";
    std::string report, alerts_text;
    for (const Finding& f : findings) {
        const std::string line = stamp + level_label(f.level) + ": " + f.text + "\n";
        report += line;
        if (f.level == Level::alert || f.level == Level::unknown) alerts_text += line;
    }
    std::fwrite(report.data(), 1, report.size(), stdout);
    std::fflush(stdout);
    struct stat so{}, se{};
    const bool same = ::fstat(1, &so) == 0 && ::fstat(2, &se) == 0 && so.st_dev == se.st_dev && so.st_ino == se.st_ino;
    if (!same && !alerts_text.empty()) {
        std::fwrite(alerts_text.data(), 1, alerts_text.size(), stderr);
        std::fflush(stderr);
    }
    std::vector<std::string> problems;
    auto append = [&](const std::string& text) {
        if (o.append_to.empty() || text.empty()) return;
        const int fd = ::open(o.append_to.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            problems.push_back(errno_message("cannot append to " + o.append_to, errno));
            return;
        }
        // One write: lines of concurrent writers (the training's tee) do not interleave inside it.
        const ssize_t w = ::write(fd, text.data(), text.size());
        if (w != static_cast<ssize_t>(text.size())) problems.push_back(errno_message("cannot append to " + o.append_to, errno));
        ::close(fd);
    };
    append(report);

    // Deliveries.
    for (const Finding& f : to_send) {
        const std::string level = f.key.starts_with("recovered:") ? "RECOVERED" : level_label(f.level);
        const std::string message = "***" + level + ": " + f.text + "***";
        const std::string subject = f.subject.empty() ? "[" + level + "] " + o.watch.job_name : f.subject;
        const std::string body = message + "\n\nThe whole report of mds-slurm-status at " + timestamp(now) + ":\n\n" + report;
        if (!o.mail.to.empty()) {
            const std::string err = send_mail(o.mail, subject, body);
            if (!err.empty()) problems.push_back(err);
            else verbose(o, "mailed '" + subject + "' to " + joined(o.mail.to, ", "));
        }
        if (!o.alert_command.empty()) {
            const std::string err = run_alert_command(o.alert_command, message, subject, level, o.watch.job_name, report);
            if (!err.empty()) problems.push_back(err);
        }
    }
    std::string problem_lines;
    for (const auto& p : problems) {
        print_warning(p);
        problem_lines += stamp + "WARNING: " + p + "\n";
    }
    if (!problems.empty()) append(problem_lines);
    if (!stateless) {
        // A bare --state-file name lives in the current folder. prepare_output_dir creates the
        // folder and removes temporaries of runs that were killed while saving.
        std::string folder = std::filesystem::path(state_path).parent_path().string();
        if (folder.empty()) folder = ".";
        try {
            (void)prepare_output_dir(folder, "state folder");
            save_state(state_path, state);
        } catch (const std::exception& e) {
            print_warning(std::string("cannot save the state (alerts may be sent again next run): ") + e.what());
        }
    }

    const bool any_alert = std::any_of(findings.begin(), findings.end(), [](const Finding& f) { return f.level == Level::alert; });
    const bool any_unknown = std::any_of(findings.begin(), findings.end(), [](const Finding& f) { return f.level == Level::unknown; });
    if (any_alert) return kExitAlert;
    if (any_unknown) return kExitCannotCheck;
    return 0;
}

}  // namespace mds::slurm
