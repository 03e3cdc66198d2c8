// The watchdog's judgement (watch.h).
#include "mds/slurm/watch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "mds/util/json_limits.h"
#include "mds/util/error.h"
#include "mds/util/files.h"
#include "mds/util/text.h"  // format_bytes_iec

namespace mds::slurm {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The job's id as a user types it, with its state and reason: "job 1234_[2-3%1]".
std::string job_ref(const Job& job) { return "job " + job.id; }

std::string where(const Job& job) {
    std::string s = job_ref(job);
    if (!job.partition.empty()) s += " on '" + job.partition + "' partition";
    if (!job.user.empty()) s += ", user " + job.user;
    return s;
}

std::int64_t elapsed_of(const Job& job, std::int64_t now) {
    if (job.elapsed_s) return *job.elapsed_s;
    return job.start_time > 0 && now > job.start_time ? now - job.start_time : 0;
}

}  // namespace

// --- log --------------------------------------------------------------------------------------

std::optional<std::pair<std::int64_t, std::int64_t>> parse_iteration_line(const std::string& line) {
    // Megatron: " iteration     1200/  292968 | consumed samples: ..." (possibly after a rank
    // prefix such as "[default7]:" or a timestamp).
    std::size_t pos = 0;
    while ((pos = line.find("iteration", pos)) != std::string::npos) {
        std::size_t i = pos + 9;
        pos = i;
        if (i >= line.size() || !is_space(line[i])) continue;
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
        std::int64_t it = 0, total = 0;
        auto r1 = std::from_chars(line.data() + i, line.data() + line.size(), it);
        if (r1.ec != std::errc() || r1.ptr == line.data() + i) continue;
        std::size_t j = static_cast<std::size_t>(r1.ptr - line.data());
        if (j >= line.size() || line[j] != '/') continue;
        ++j;
        while (j < line.size() && (line[j] == ' ' || line[j] == '\t')) ++j;
        auto r2 = std::from_chars(line.data() + j, line.data() + line.size(), total);
        if (r2.ec != std::errc() || r2.ptr == line.data() + j) continue;
        std::size_t k = static_cast<std::size_t>(r2.ptr - line.data());
        while (k < line.size() && (line[k] == ' ' || line[k] == '\t')) ++k;
        if (k >= line.size() || line[k] != '|') continue;
        return std::make_pair(it, total);
    }
    return std::nullopt;
}

LogScan scan_log(const std::string& path, std::uint64_t max_scan_bytes) {
    LogScan scan;
    scan.path = path;
    // O_NONBLOCK: a FIFO given as the log must not block the watchdog (it is refused below).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        scan.error = errno_message("cannot read " + path, errno);
        return scan;
    }
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
        scan.error = errno_message("cannot stat " + path, errno);
        ::close(fd);
        return scan;
    }
    if (!S_ISREG(st.st_mode)) {
        scan.error = S_ISDIR(st.st_mode) ? path + " is a directory" : path + " is not a regular file";
        ::close(fd);
        return scan;
    }
    scan.mtime = static_cast<std::int64_t>(st.st_mtim.tv_sec);
    scan.size = static_cast<std::uint64_t>(st.st_size);

    // Backwards in blocks; `tail` holds the bytes after the last newline seen so far (a partial
    // line that continues into the next block read).
    constexpr std::uint64_t kBlock = 1 << 20;
    constexpr std::size_t kMaxLineBytes = 1 << 20;
    std::uint64_t end = scan.size;
    std::string carry;  // bytes of the line that spans the block boundary (starts mid-line)
    bool only_space_after = true;
    std::uint64_t scanned = 0;
    std::string block;
    while (end > 0 && (max_scan_bytes == 0 || scanned < max_scan_bytes)) {
        const std::uint64_t begin = end > kBlock ? end - kBlock : 0;
        block.resize(static_cast<std::size_t>(end - begin));
        std::size_t got = 0;
        while (got < block.size()) {
            const ssize_t r = ::pread(fd, block.data() + got, block.size() - got, static_cast<off_t>(begin + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += static_cast<std::size_t>(r);
        }
        if (got < block.size()) {
            scan.error = "cannot read " + path + ": short read at byte " + std::to_string(begin + got);
            break;
        }
        scanned += block.size();
        std::string text = block + carry;
        // Lines from the end of `text`; the first (partial unless begin == 0) line becomes carry.
        std::size_t line_end = text.size();
        while (true) {
            const std::size_t nl = line_end == 0 ? std::string::npos : text.rfind('\n', line_end - 1);
            const std::size_t line_begin = nl == std::string::npos ? 0 : nl + 1;
            if (nl == std::string::npos && begin > 0) {
                // A line longer than kMaxLineBytes (binary junk, a log without newlines) is no
                // iteration line: keep only its tail, so that memory stays bounded.
                carry = text.substr(0, line_end);
                if (carry.size() > kMaxLineBytes) {
                    carry.erase(0, carry.size() - kMaxLineBytes);
                    only_space_after = false;
                }
                break;
            }
            const std::string line = text.substr(line_begin, line_end - line_begin);
            if (auto parsed = parse_iteration_line(line)) {
                scan.last = IterationLine{parsed->first, parsed->second, begin + line_begin, only_space_after};
                ::close(fd);
                return scan;
            }
            if (!std::all_of(line.begin(), line.end(), is_space)) only_space_after = false;
            if (nl == std::string::npos) {
                carry.clear();
                break;
            }
            line_end = nl;
        }
        end = begin;
    }
    ::close(fd);
    return scan;
}

// --- disks ------------------------------------------------------------------------------------

DiskWatch parse_disk_watch(const std::string& spec) {
    auto bad = [&](const std::string& why) {
        return UsageError("--watch-disk '" + spec + "': " + why + " (expected PATH:PERCENT or PATH:PERCENT:INODE_PERCENT)");
    };
    auto number = [&](const std::string& s) {
        double v = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || p != s.data() + s.size() || s.empty() || !(v > 0) || v > 100)
            throw bad("'" + s + "' is not a percentage in (0, 100]");
        return v;
    };
    DiskWatch w;
    // The path may contain ':' itself; the numbers are the last one or two fields.
    const auto c1 = spec.rfind(':');
    if (c1 == std::string::npos || c1 == 0) throw bad("no threshold");
    const auto c0 = spec.rfind(':', c1 - 1);
    bool two = false;
    if (c0 != std::string::npos && c0 > 0) {
        const std::string mid = spec.substr(c0 + 1, c1 - c0 - 1);
        double v = 0;
        auto [p, ec] = std::from_chars(mid.data(), mid.data() + mid.size(), v);
        two = ec == std::errc() && p == mid.data() + mid.size() && !mid.empty();
    }
    if (two) {
        w.path = spec.substr(0, c0);
        w.max_percent = number(spec.substr(c0 + 1, c1 - c0 - 1));
        w.max_inode_percent = number(spec.substr(c1 + 1));
    } else {
        w.path = spec.substr(0, c1);
        w.max_percent = number(spec.substr(c1 + 1));
        w.max_inode_percent = w.max_percent;
    }
    if (w.path.empty()) throw bad("empty path");
    return w;
}

double DiskUsage::percent() const {
    const double denom = static_cast<double>(used_bytes) + static_cast<double>(avail_bytes);
    return denom > 0 ? 100.0 * static_cast<double>(used_bytes) / denom : 0.0;
}

double DiskUsage::inode_percent() const {
    return total_inodes > 0 ? 100.0 * static_cast<double>(used_inodes) / static_cast<double>(total_inodes) : 0.0;
}

DiskUsage disk_usage(const std::string& path) {
    DiskUsage u;
    struct statvfs sv{};
    if (::statvfs(path.c_str(), &sv) != 0) {
        u.error = errno_message("cannot check disk " + path, errno);
        return u;
    }
    const std::uint64_t frsize = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
    u.total_bytes = static_cast<std::uint64_t>(sv.f_blocks) * frsize;
    u.used_bytes = static_cast<std::uint64_t>(sv.f_blocks - sv.f_bfree) * frsize;
    u.avail_bytes = static_cast<std::uint64_t>(sv.f_bavail) * frsize;
    u.total_inodes = static_cast<std::uint64_t>(sv.f_files);
    u.used_inodes = sv.f_files >= sv.f_ffree ? static_cast<std::uint64_t>(sv.f_files - sv.f_ffree) : 0;
    return u;
}

std::vector<Finding> assess_disks(const std::vector<DiskWatch>& watches, const std::vector<DiskUsage>& usages) {
    std::vector<Finding> out;
    for (std::size_t i = 0; i < watches.size() && i < usages.size(); ++i) {
        const DiskWatch& w = watches[i];
        const DiskUsage& u = usages[i];
        if (!u.error.empty()) {
            out.push_back({Level::unknown, "disk:" + w.path, u.error, "[UNKNOWN] cannot check disk " + w.path});
            continue;
        }
        const double pct = u.percent(), ipct = u.inode_percent();
        const std::string space = format_fixed(pct, 1) + "% used (" + format_bytes_iec(u.used_bytes) + " of " +
                                  format_bytes_iec(u.used_bytes + u.avail_bytes) + ", " + format_bytes_iec(u.avail_bytes) + " free)";
        const std::string inodes = u.total_inodes ? "inodes " + format_fixed(ipct, 1) + "% used (" + std::to_string(u.used_inodes) +
                                                        " of " + std::to_string(u.total_inodes) + ")"
                                                  : "inodes not counted by this filesystem";
        bool alerted = false;
        if (pct >= w.max_percent) {
            out.push_back({Level::alert, "disk:" + w.path,
                           "disk " + w.path + " is " + space + ", at or above the " + format_fixed(w.max_percent, 0) +
                               "% threshold: free space before the next checkpoint save fails",
                           "[ALERT] disk " + w.path + " is " + format_fixed(pct, 0) + "% full"});
            alerted = true;
        }
        if (u.total_inodes && ipct >= w.max_inode_percent) {
            out.push_back({Level::alert, "inodes:" + w.path,
                           "disk " + w.path + " has " + inodes + ", at or above the " + format_fixed(w.max_inode_percent, 0) +
                               "% threshold: remove small files before new files cannot be created",
                           "[ALERT] disk " + w.path + " is out of inodes (" + format_fixed(ipct, 0) + "% used)"});
            alerted = true;
        }
        if (!alerted)
            out.push_back({Level::pulse, "disk:" + w.path,
                           "disk " + w.path + ": " + space + ", " + inodes + " (thresholds " + format_fixed(w.max_percent, 0) +
                               "% / " + format_fixed(w.max_inode_percent, 0) + "%)",
                           {}});
    }
    return out;
}

// --- jobs ---------------------------------------------------------------------------------------

const char* level_label(Level level) {
    switch (level) {
        case Level::pulse: return "PULSE";
        case Level::note: return "NOTE";
        case Level::alert: return "ALERT";
        case Level::unknown: return "UNKNOWN";
    }
    return "?";
}

namespace {

// One line per job of the training that is in the queue.
Finding describe_pending(const Job& job, const WatchConfig& config, std::int64_t now, bool& scheduled) {
    const std::string& name = config.job_name;
    const std::string ref = where(job) + ", reason " + (job.reason.empty() ? "none" : job.reason);
    if (job.state != "PENDING" && job.state != "REQUEUED") {  // REQUEUE_HOLD, RESV_DEL_HOLD, ...
        scheduled = false;
        return {Level::note, "stuck:" + job.id,
                name + " is " + job.state + " and will not start until someone releases it (" + ref + ")", {}};
    }
    if (is_stuck_reason(job.reason)) {
        scheduled = false;
        return {Level::note, "stuck:" + job.id,
                name + " is PENDING but will never start by itself (" + ref + ")", {}};
    }
    const std::int64_t waited = job.submit_time > 0 && now > job.submit_time ? now - job.submit_time : 0;
    if (config.max_pending_hours > 0 && static_cast<double>(waited) > config.max_pending_hours * 3600.0) {
        scheduled = false;
        return {Level::note, "stuck:" + job.id,
                name + " has been PENDING for " + format_duration(waited) + ", longer than the " +
                    format_fixed(config.max_pending_hours, 1) + " h allowed (" + ref + ")",
                {}};
    }
    scheduled = true;
    std::string what;
    if (job.start_time > 0 && job.start_time > now)
        what = "is scheduled to start in " + format_duration(job.start_time - now) + " (at " +
               format_slurm_time(job.start_time) + ")";
    else if (job.reason == "JobArrayTaskLimit")
        what = "is waiting for the previous job of its array to finish before the next starts";
    else if (job.reason == "Dependency")
        what = "is waiting for the job it depends on to finish";
    else if (job.reason == "BeginTime")
        what = "is waiting for its begin time";
    else
        what = "is waiting to be scheduled";
    return {Level::pulse, "pending:" + job.id, name + " " + what + " (" + ref + ")", {}};
}

}  // namespace

std::vector<Finding> assess_jobs(const WatchConfig& config, const QueueView& queue, const LogScan* log,
                                 WatchState& state, std::int64_t now) {
    std::vector<Finding> out;
    const std::string& name = config.job_name;
    if (!queue.reachable) {
        out.push_back({Level::unknown, "unreachable",
                       "cannot query the SLURM scheduler (" + queue.error + "); the state of " + name +
                           " is unknown. This is not a job alert: it says nothing about the training",
                       "[UNKNOWN] cannot reach SLURM to check " + name});
        return out;
    }

    std::vector<const Job*> mine, finished;
    for (const Job& j : queue.jobs)
        if (j.name == name) (is_finished_state(j) ? finished : mine).push_back(&j);
    for (const Job& j : queue.history)
        if (j.name == name && is_finished_state(j)) finished.push_back(&j);

    const Job* running = nullptr;
    bool any_scheduled = false;
    std::vector<Finding> waiting, stuck;  // reported after the running jobs, in that order
    for (const Job* j : mine) {
        if (is_active_state(*j) && j->state != "SUSPENDED" && j->state != "STOPPED") {
            const std::int64_t el = elapsed_of(*j, now);
            std::string what = j->state == "RUNNING" ? "is running" : "is " + j->state;
            out.push_back({Level::pulse, "running:" + j->id,
                           name + " " + what + " for " + format_duration(el) +
                               (j->start_time > 0 ? " since " + format_slurm_time(j->start_time) : "") + " (" +
                               where(*j) + ", nodes " + (j->nodes.empty() ? "?" : j->nodes) + ")",
                           {}});
            if (!running || j->start_time > running->start_time) running = j;
        } else if (is_pending_state(*j)) {
            bool scheduled = false;
            Finding f = describe_pending(*j, config, now, scheduled);
            if (scheduled) {
                any_scheduled = true;
                waiting.push_back(std::move(f));
            } else {
                stuck.push_back(std::move(f));
            }
        } else {  // SUSPENDED, STOPPED, or a state this version does not know
            stuck.push_back({Level::note, "stuck:" + j->id,
                             name + " is " + j->state + " (" + where(*j) + ", reason " + j->reason + ")", {}});
        }
    }
    for (auto& f : waiting) out.push_back(std::move(f));
    for (auto& f : stuck) out.push_back(std::move(f));

    // The most recent finished job of the chain: name its nodes when it failed.
    const Job* last = nullptr;
    for (const Job* j : finished)
        if (!last || j->end_time > last->end_time || (j->end_time == last->end_time && j->job_id > last->job_id)) last = j;
    if (last && is_failure_state(*last)) {
        std::string text = "the last finished job of " + name + ", " + job_ref(*last) + ", ended " + last->state;
        if (!last->exit_code.empty()) text += " (exit code " + last->exit_code + ")";
        if (last->end_time > 0) text += " at " + format_slurm_time(last->end_time);
        if (!last->nodes.empty())
            text += " on nodes " + last->nodes + "; if a node is at fault, resubmit with: sbatch --exclude=" + last->nodes;
        out.push_back({Level::note, "failed:" + last->id, text, {}});
    }

    if (!running && !any_scheduled) {
        std::string why = mine.empty() ? "no job of that name is in the queue"
                                       : std::to_string(mine.size()) + " job(s) of that name are in the queue but none "
                                                                       "will run by itself (see the NOTE lines)";
        out.push_back({Level::alert, "not-scheduled", name + " is neither RUNNING nor SCHEDULED: " + why,
                       "[ALERT] " + name + " is neither running nor scheduled to run"});
    }

    // Stall: the running job must add iteration lines to the log.
    if (running && log && config.stall_minutes > 0) {
        // Capped so that no value the library is given can overflow llround (the flag allows a year).
        const std::int64_t limit = static_cast<std::int64_t>(std::llround(std::min(config.stall_minutes * 60.0, 1e15)));
        const std::int64_t job_start = running->start_time > 0 ? running->start_time : now - elapsed_of(*running, now);
        if (!log->error.empty()) {
            if (now - job_start >= limit)
                out.push_back({Level::unknown, "log", log->error + ": cannot tell whether " + name + " still makes progress",
                               "[UNKNOWN] cannot read the log of " + name});
        } else {
            // When was the last iteration line written? Never after the file's mtime; when other
            // lines (the watchdog's own pulses, warnings) followed it, also never after the run
            // that first saw it.
            std::int64_t written = log->mtime;
            if (log->last) {
                const bool same = state.log_path == log->path && state.log_iteration == log->last->iteration &&
                                  state.log_offset == log->last->offset;
                if (same && state.log_seen_at > 0) written = std::min(written, state.log_seen_at);
                if (!same) {
                    state.log_path = log->path;
                    state.log_iteration = log->last->iteration;
                    state.log_offset = log->last->offset;
                    state.log_seen_at = now;
                }
            }
            const std::int64_t since = std::max(written, job_start);
            const std::int64_t age = now - since;
            const std::string last_text =
                log->last ? "last iteration " + std::to_string(log->last->iteration) + "/" + std::to_string(log->last->total)
                          : "no iteration line yet";
            if (age >= limit) {
                std::string text = name + " is RUNNING but " + log->path + " has had no new iteration line for " +
                                   format_duration(age) + " (" + last_text;
                if (log->last && written >= job_start) text += ", written by " + format_slurm_time(written);
                text += "; threshold " + format_fixed(config.stall_minutes, config.stall_minutes < 1 ? 2 : 0) +
                        " min): the training may be hung";
                out.push_back({Level::alert, "stalled", text, "[ALERT] " + name + " is running but stalled"});
            } else {
                out.push_back({Level::pulse, "progress",
                               name + " progresses: " + last_text + " in " + log->path +
                                   (log->last && written >= job_start ? " (written by " + format_slurm_time(written) + ")" : ""),
                               {}});
            }
        }
    }
    return out;
}

// --- notifications --------------------------------------------------------------------------

std::vector<Finding> select_notifications(std::vector<Finding>& findings, WatchState& state, const NotifyPolicy& policy,
                                          std::int64_t now) {
    std::vector<Finding> send;
    bool unreachable = false;
    std::map<std::string, AlertRecord> current;
    for (const Finding& f : findings) {
        if (f.level != Level::alert && f.level != Level::unknown) continue;
        if (f.key == "unreachable") unreachable = true;
        AlertRecord rec;
        if (auto it = state.alerts.find(f.key); it != state.alerts.end()) rec = it->second;
        if (rec.first_seen == 0) rec.first_seen = now;
        rec.text = f.text;
        current[f.key] = rec;
    }
    state.unreachable_runs = unreachable ? state.unreachable_runs + 1 : 0;

    for (const Finding& f : findings) {
        if (f.level != Level::alert && f.level != Level::unknown) continue;
        AlertRecord& rec = current[f.key];
        if (f.key == "unreachable" && state.unreachable_runs < policy.unreachable_after) continue;
        const bool due = policy.stateless || rec.last_notified == 0 ||
                         policy.renotify_hours <= 0 ||
                         static_cast<double>(now - rec.last_notified) >= policy.renotify_hours * 3600.0;
        if (!due) continue;
        rec.last_notified = now;
        send.push_back(f);
    }
    // Alerts of the previous run that are gone: say so, once, if they were sent.
    if (!policy.stateless) {
        for (const auto& [key, rec] : state.alerts) {
            if (current.count(key) || rec.last_notified == 0) continue;
            // While the scheduler cannot be reached the job alerts cannot be judged: keep them
            // (disk alerts are judged without SLURM, and may recover).
            const bool job_alert = key.rfind("disk:", 0) != 0 && key.rfind("inodes:", 0) != 0;
            if (unreachable && job_alert && key != "unreachable") {
                current[key] = rec;
                continue;
            }
            Finding f{Level::pulse, "recovered:" + key, "RECOVERED: no longer true: " + rec.text,
                      "[RECOVERED] " + rec.text.substr(0, std::min<std::size_t>(rec.text.size(), 80))};
            findings.push_back(f);
            send.push_back(f);
        }
    }
    state.alerts = std::move(current);
    return send;
}

// --- state file ---------------------------------------------------------------------------------

namespace {
constexpr std::uint64_t kMaxStateFileBytes = std::uint64_t{16} << 20;
}  // namespace

WatchState load_state(const std::string& path) {
    WatchState s;
    if (!file_exists(path)) return s;
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
        throw Error(path + ": not a regular file; --state-file names the file where alerts already sent are kept");
    // A few KiB in practice (one record per open alert); the cap keeps a wrong --state-file (a
    // checkpoint, a log) from being read whole.
    const std::string text = read_file(path, kMaxStateFileBytes, "mds-slurm-status state file");
    // An integer field, or `fallback` when absent; anything else (a float such as 1e56, a string) is a
    // corrupt file, not a value to convert (nlohmann's get<int64_t> of a huge float is undefined).
    const auto integer = [&](const nlohmann::json& obj, const char* key, auto fallback) -> decltype(fallback) {
        const auto it = obj.find(key);
        if (it == obj.end()) return fallback;
        if (!it->is_number_integer() || (std::is_unsigned_v<decltype(fallback)> && !it->is_number_unsigned()))
            throw Error(path + ": corrupt state file (" + key + " is not an integer); remove it to start afresh");
        return it->template get<decltype(fallback)>();
    };
    try {
        check_json_depth(text, path);
        const auto j = nlohmann::json::parse(text);
        if (!j.is_object() || j.value("format", std::string()) != "mds-slurm-status-state/1")
            throw Error(path + ": not an mds-slurm-status state file (format mds-slurm-status-state/1 expected)");
        s.unreachable_runs = integer(j, "unreachable_runs", std::int64_t{0});
        if (auto l = j.find("log"); l != j.end() && l->is_object()) {
            s.log_path = l->value("path", std::string());
            s.log_iteration = integer(*l, "iteration", std::int64_t{-1});
            s.log_offset = integer(*l, "offset", std::uint64_t{0});
            s.log_seen_at = integer(*l, "seen_at", std::int64_t{0});
        }
        if (auto a = j.find("alerts"); a != j.end() && a->is_object())
            for (const auto& [key, v] : a->items())
                s.alerts[key] = {integer(v, "first_seen", std::int64_t{0}), integer(v, "last_notified", std::int64_t{0}),
                                 v.value("text", std::string())};
    } catch (const nlohmann::json::exception& e) {
        throw Error(path + ": corrupt state file (" + e.what() + "); remove it to start afresh");
    }
    return s;
}

void save_state(const std::string& path, const WatchState& s) {
    nlohmann::json j;
    j["format"] = "mds-slurm-status-state/1";
    j["unreachable_runs"] = s.unreachable_runs;
    j["log"] = {{"path", s.log_path}, {"iteration", s.log_iteration}, {"offset", s.log_offset}, {"seen_at", s.log_seen_at}};
    nlohmann::json alerts = nlohmann::json::object();
    for (const auto& [key, rec] : s.alerts)
        alerts[key] = {{"first_seen", rec.first_seen}, {"last_notified", rec.last_notified}, {"text", rec.text}};
    j["alerts"] = alerts;
    write_file_atomic(path, j.dump(2) + "\n");
}

}  // namespace mds::slurm
