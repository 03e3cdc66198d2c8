// Parsers of squeue / sacct outputs (squeue.h).
#include "mds/slurm/squeue.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <ctime>

#include "mds/util/json_limits.h"
#include "mds/util/error.h"
#include "mds/util/int_range.h"
#include "mds/util/safe_paths.h"  // printable

namespace mds::slurm {

const char* const kSqueueTextFormat = "%A|%i|%F|%K|%T|%r|%V|%S|%e|%M|%u|%P|%N|%j";
const char* const kSacctFields = "JobID,JobName,State,Start,End,Elapsed,ExitCode,NodeList,User";

namespace {

using nlohmann::json;

constexpr std::array kBaseStates = {
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
    "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"};

bool in(std::string_view s, std::initializer_list<std::string_view> set) {
    return std::find(set.begin(), set.end(), s) != set.end();
}

std::vector<std::string_view> split(std::string_view s, char sep, std::size_t max_fields) {
    std::vector<std::string_view> out;
    while (out.size() + 1 < max_fields) {
        const auto p = s.find(sep);
        if (p == std::string_view::npos) break;
        out.push_back(s.substr(0, p));
        s.remove_prefix(p + 1);
    }
    out.push_back(s);
    return out;
}

std::optional<std::int64_t> to_int(std::string_view s) {
    std::int64_t v = 0;
    const auto* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data(), end, v);
    if (ec != std::errc() || p != end || s.empty()) return std::nullopt;
    return v;
}

// "1234", "1234_7", "1234_[8-10%1]", "1234+0" (heterogeneous) → 1234 and the array part.
void split_job_id(std::string_view id, std::int64_t& job_id, std::string& array_task) {
    const auto us = id.find('_');
    std::string_view head = id.substr(0, std::min(us, id.find('+')));
    job_id = to_int(head).value_or(0);
    if (us != std::string_view::npos) {
        std::string_view task = id.substr(us + 1);
        if (!task.empty() && task.front() == '[' && task.back() == ']') task = task.substr(1, task.size() - 2);
        array_task = std::string(task);
    }
}

// Normalises a state word: "CANCELLED by 123" → "CANCELLED"; flags reported as a state by older
// clients (COMPLETING, CONFIGURING, ...) stay as they are.
std::string state_word(std::string_view s) {
    const auto sp = s.find(' ');
    if (sp != std::string_view::npos) s = s.substr(0, sp);
    std::string out(s);
    if (!out.empty() && out.back() == '+') out.pop_back();  // sacct's truncation mark
    return out;
}

// Calls f(line, "SOURCE line N") for each non-empty line (CR of CRLF dropped).
template <class F>
void for_each_line(std::string_view text, std::string_view source, F&& f) {
    std::size_t line_no = 0;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (!line.empty()) f(line, std::string(source) + " line " + std::to_string(line_no));
    }
}

// --- JSON -------------------------------------------------------------------------------------

std::string path_of(std::string_view source, std::size_t index, std::string_view key) {
    return std::string(source) + ": jobs[" + std::to_string(index) + "]." + std::string(key);
}

// An integer field: a plain number (22.05) or {"set": bool, "infinite": bool, "number": n}
// (23.02+). Unset, infinite, null or absent → `fallback`.
std::int64_t json_int(const json& job, const char* key, std::int64_t fallback, std::string_view source,
                      std::size_t index) {
    const auto it = job.find(key);
    if (it == job.end() || it->is_null()) return fallback;
    const json& v = *it;
    if (v.is_number_integer()) return v.get<std::int64_t>();
    // A float (22.05 writes some fields as 5.0): truncated, and refused past int64's range.
    auto from_float = [&](double d) {
        const auto i = truncate_to_int64(d);
        if (!i) throw Error(path_of(source, index, key) + ": " + json(d).dump() + " is not a whole number within int64's range");
        return *i;
    };
    if (v.is_number_float()) return from_float(v.get<double>());
    if (v.is_object()) {
        const auto set = v.find("set");
        const auto inf = v.find("infinite");
        if (set != v.end() && set->is_boolean() && !set->get<bool>()) return fallback;
        if (inf != v.end() && inf->is_boolean() && inf->get<bool>()) return fallback;
        const auto num = v.find("number");
        if (num != v.end() && num->is_number())
            return num->is_number_integer() ? num->get<std::int64_t>() : from_float(num->get<double>());
        return fallback;
    }
    throw Error(path_of(source, index, key) + ": expected a number or a {set, number} object, found " +
                std::string(v.type_name()));
}

std::string json_string(const json& job, const char* key, std::string_view source, std::size_t index) {
    const auto it = job.find(key);
    if (it == job.end() || it->is_null()) return {};
    if (it->is_string()) return it->get<std::string>();
    if (it->is_number_integer()) return std::to_string(it->get<std::int64_t>());
    throw Error(path_of(source, index, key) + ": expected a string, found " + std::string(it->type_name()));
}

void json_state(const json& job, Job& out, std::string_view source, std::size_t index) {
    const auto it = job.find("job_state");
    if (it == job.end()) throw Error(path_of(source, index, "job_state") + ": missing");
    std::vector<std::string> words;
    if (it->is_string()) {
        words.push_back(it->get<std::string>());
    } else if (it->is_array()) {
        for (const auto& w : *it) {
            if (!w.is_string())
                throw Error(path_of(source, index, "job_state") + ": expected a list of strings");
            words.push_back(w.get<std::string>());
        }
    } else {
        throw Error(path_of(source, index, "job_state") + ": expected a string or a list of strings, found " +
                    std::string(it->type_name()));
    }
    for (auto& w : words) {
        w = state_word(w);
        const bool base = std::find(kBaseStates.begin(), kBaseStates.end(), w) != kBaseStates.end();
        if (base && out.state.empty())
            out.state = w;
        else
            out.state_flags.push_back(w);
    }
    if (out.state.empty() && !out.state_flags.empty()) {  // only a flag-like word: keep it as the state
        out.state = out.state_flags.front();
        out.state_flags.erase(out.state_flags.begin());
    }
    if (out.state.empty()) throw Error(path_of(source, index, "job_state") + ": empty");
}

std::string json_exit_code(const json& job) {
    const auto it = job.find("exit_code");
    if (it == job.end() || it->is_null()) return {};
    auto from_raw = [](std::int64_t raw) -> std::string {  // a wait status: exit << 8 | signal
        if (raw < 0 || raw > 0xffff) return {};
        return std::to_string((raw >> 8) & 0xff) + ":" + std::to_string(raw & 0x7f);
    };
    if (it->is_number_integer()) return from_raw(it->get<std::int64_t>());  // 22.05 .. 23.02.3
    if (it->is_object() && !it->contains("return_code") && it->contains("number")) {  // 23.02.4 ..: {set, number}
        if (!it->value("set", true) || it->value("infinite", false) || !(*it)["number"].is_number_integer()) return {};
        return from_raw((*it)["number"].get<std::int64_t>());
    }
    if (it->is_object()) {  // 23.11+: {status: [...], return_code: {...}, signal: {id: {...}, name}}
        std::int64_t rc = 0, sig = 0;
        bool any = false;
        if (auto r = it->find("return_code"); r != it->end()) {
            if (r->is_number_integer()) { rc = r->get<std::int64_t>(); any = true; }
            else if (r->is_object() && r->value("set", true) && r->contains("number") && (*r)["number"].is_number_integer()) {
                rc = (*r)["number"].get<std::int64_t>();
                any = true;
            }
        }
        if (auto s = it->find("signal"); s != it->end() && s->is_object()) {
            if (auto id = s->find("id"); id != s->end()) {
                if (id->is_number_integer()) sig = id->get<std::int64_t>();
                else if (id->is_object() && id->value("set", false) && id->contains("number") &&
                         (*id)["number"].is_number_integer())
                    sig = (*id)["number"].get<std::int64_t>();
            }
        }
        if (!any && sig == 0) return {};
        return std::to_string(rc) + ":" + std::to_string(sig);
    }
    return {};
}

std::string describe_json_error(const json& e) {
    if (!e.is_object()) return e.dump();
    std::string out;
    auto add = [&](const char* key) {
        const auto it = e.find(key);
        if (it == e.end() || !it->is_string() || it->get<std::string>().empty()) return;
        if (!out.empty()) out += ": ";
        out += it->get<std::string>();
    };
    add("source");
    add("description");
    add("error");
    return out.empty() ? e.dump() : out;
}

}  // namespace

QueryResult parse_squeue_json(std::string_view text, std::string_view source) {
    json doc;
    try {
        check_json_depth(text, std::string(source));
        doc = json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
        throw Error(std::string(source) + ": not JSON at byte " + std::to_string(e.byte) + ": " + printable(e.what(), 300));
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        throw Error(std::string(source) + ": not JSON: " + printable(e.what(), 300));
    }
    if (!doc.is_object()) throw Error(std::string(source) + ": expected a JSON object at the top");
    QueryResult result;
    if (auto m = doc.find("meta"); m != doc.end() && m->is_object()) {
        // 22.05: meta.Slurm.release; 23.02+: meta.slurm.release.
        for (const char* k : {"Slurm", "slurm"}) {
            auto s = m->find(k);
            if (s != m->end() && s->is_object() && s->contains("release") && (*s)["release"].is_string())
                result.slurm_version = (*s)["release"].get<std::string>();
        }
    }
    if (auto e = doc.find("errors"); e != doc.end() && e->is_array())
        for (const auto& err : *e) result.errors.push_back(describe_json_error(err));
    const auto jobs = doc.find("jobs");
    if (jobs == doc.end() || !jobs->is_array())
        throw Error(std::string(source) + ": expected a \"jobs\" list at the top");
    std::size_t index = 0;
    for (const auto& j : *jobs) {
        if (!j.is_object()) throw Error(std::string(source) + ": jobs[" + std::to_string(index) + "]: expected an object");
        Job job;
        job.job_id = json_int(j, "job_id", 0, source, index);
        job.array_job_id = json_int(j, "array_job_id", 0, source, index);
        job.name = json_string(j, "name", source, index);
        json_state(j, job, source, index);
        job.reason = json_string(j, "state_reason", source, index);
        job.user = json_string(j, "user_name", source, index);
        job.partition = json_string(j, "partition", source, index);
        job.nodes = json_string(j, "nodes", source, index);
        job.submit_time = json_int(j, "submit_time", 0, source, index);
        job.start_time = json_int(j, "start_time", 0, source, index);
        job.end_time = json_int(j, "end_time", 0, source, index);
        job.exit_code = json_exit_code(j);
        const std::int64_t task = json_int(j, "array_task_id", -1, source, index);
        const std::string task_string = json_string(j, "array_task_string", source, index);
        if (job.array_job_id != 0) {
            job.array_task = task >= 0 ? std::to_string(task) : task_string;
            job.id = std::to_string(job.array_job_id) + "_" +
                     (task >= 0 ? job.array_task : "[" + job.array_task + "]");
        } else {
            job.id = std::to_string(job.job_id);
        }
        result.jobs.push_back(std::move(job));
        ++index;
    }
    return result;
}

std::vector<Job> parse_squeue_text(std::string_view text, std::string_view source) {
    std::vector<Job> jobs;
    for_each_line(text, source, [&](std::string_view line, const std::string& where) {
        const auto f = split(line, '|', 14);
        if (f.size() != 14)
            throw Error(where + ": expected 14 '|'-separated fields (" + kSqueueTextFormat + "), found " +
                        std::to_string(f.size()));
        Job job;
        job.id = std::string(f[1]);
        std::string array_from_id;
        std::int64_t id_number = 0;
        split_job_id(f[1], id_number, array_from_id);
        job.job_id = to_int(f[0]).value_or(id_number);
        if (job.job_id == 0) throw Error(where + ": job id '" + printable(f[0]) + "' is not a number");
        const auto array_id = to_int(f[2]);
        const bool is_array = !array_from_id.empty() || (f[3] != "N/A" && !f[3].empty());
        job.array_job_id = is_array ? array_id.value_or(id_number) : 0;
        job.array_task = is_array ? (f[3] != "N/A" && !f[3].empty() ? std::string(f[3]) : array_from_id) : "";
        job.state = state_word(f[4]);
        job.reason = std::string(f[5]);
        try {
            job.submit_time = parse_slurm_time(f[6]);
            job.start_time = parse_slurm_time(f[7]);
            job.end_time = parse_slurm_time(f[8]);
        } catch (const Error& e) {
            throw Error(where + ": " + e.what());
        }
        job.elapsed_s = parse_slurm_duration(f[9]);
        job.user = std::string(f[10]);
        job.partition = std::string(f[11]);
        job.nodes = f[12] == "(null)" ? "" : std::string(f[12]);
        job.name = std::string(f[13]);
        jobs.push_back(std::move(job));
    });
    return jobs;
}

std::vector<Job> parse_sacct(std::string_view text, std::string_view source) {
    std::vector<Job> jobs;
    for_each_line(text, source, [&](std::string_view line, const std::string& where) {
        // JobName may hold '|': it is the second field, so split the fixed ones off both ends.
        const auto head = split(line, '|', 2);
        if (head.size() != 2) throw Error(where + ": expected 9 '|'-separated fields (" + kSacctFields + ")");
        std::vector<std::string_view> tail;
        std::string_view rest = head[1];
        for (int i = 0; i < 7; ++i) {
            const auto p = rest.rfind('|');
            if (p == std::string_view::npos)
                throw Error(where + ": expected 9 '|'-separated fields (" + kSacctFields + ")");
            tail.insert(tail.begin(), rest.substr(p + 1));
            rest = rest.substr(0, p);
        }
        Job job;
        job.id = std::string(head[0]);
        split_job_id(head[0], job.job_id, job.array_task);
        if (job.job_id == 0) throw Error(where + ": job id '" + printable(job.id) + "' is not a number");
        if (!job.array_task.empty()) job.array_job_id = job.job_id;
        job.name = std::string(rest);
        job.state = state_word(tail[0]);
        try {
            job.start_time = parse_slurm_time(tail[1]);
            job.end_time = parse_slurm_time(tail[2]);
        } catch (const Error& e) {
            throw Error(where + ": " + e.what());
        }
        job.elapsed_s = parse_slurm_duration(tail[3]);
        job.exit_code = std::string(tail[4]);
        job.nodes = (tail[5] == "None assigned" || tail[5] == "(null)") ? "" : std::string(tail[5]);
        job.user = std::string(tail[6]);
        jobs.push_back(std::move(job));
    });
    return jobs;
}

std::int64_t parse_slurm_time(std::string_view text) {
    if (text.empty() || in(text, {"N/A", "NONE", "None", "Unknown", "UNLIMITED", "0"})) return 0;
    int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
    char extra = 0;
    const std::string t(text);
    const int n = std::sscanf(t.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &y, &mo, &d, &h, &mi, &s, &extra);
    if (n != 6 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60)
        throw Error("expected a time like 2026-11-22T12:32:34 or N/A, found '" + printable(t) + "'");
    std::tm tm{};
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = s;
    tm.tm_isdst = -1;
    return static_cast<std::int64_t>(std::mktime(&tm));
}

std::optional<std::int64_t> parse_slurm_duration(std::string_view text) {
    if (text.empty()) return std::nullopt;
    std::int64_t days = 0;
    if (const auto dash = text.find('-'); dash != std::string_view::npos) {
        const auto d = to_int(text.substr(0, dash));
        // Slurm's longest limit is a year or so; anything past ~27,000 years is corrupt input (and would overflow).
        if (!d || *d < 0 || *d > 10'000'000) return std::nullopt;
        days = *d;
        text.remove_prefix(dash + 1);
    }
    const auto parts = split(text, ':', 4);
    if (parts.size() < 2 || parts.size() > 3) return std::nullopt;
    std::int64_t total = 0;
    for (auto p : parts) {
        // sacct prints fractional seconds for short steps ("00:00.123"): drop them.
        if (const auto dot = p.find('.'); dot != std::string_view::npos) p = p.substr(0, dot);
        const auto v = to_int(p);
        if (!v || *v < 0 || *v > 1'000'000'000) return std::nullopt;
        total = total * 60 + *v;
    }
    return days * 86400 + total;
}

std::string format_duration(std::int64_t seconds) {
    if (seconds < 0) seconds = 0;
    char buf[64];
    if (seconds < 60) std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(seconds));
    else if (seconds < 3600)
        std::snprintf(buf, sizeof buf, "%lldm %02llds", static_cast<long long>(seconds / 60), static_cast<long long>(seconds % 60));
    else if (seconds < 86400)
        std::snprintf(buf, sizeof buf, "%lldh %02lldm", static_cast<long long>(seconds / 3600),
                      static_cast<long long>(seconds % 3600 / 60));
    else
        std::snprintf(buf, sizeof buf, "%lldd %02lldh", static_cast<long long>(seconds / 86400),
                      static_cast<long long>(seconds % 86400 / 3600));
    return buf;
}

std::string format_local_time(std::int64_t epoch, const char* format) {
    const std::time_t t = static_cast<std::time_t>(epoch);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[64];
    std::strftime(buf, sizeof buf, format, &tm);
    return buf;
}

std::string format_slurm_time(std::int64_t epoch) { return format_local_time(epoch, "%Y-%m-%dT%H:%M:%S"); }

bool is_active_state(const Job& job) {
    return in(job.state, {"RUNNING", "CONFIGURING", "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT", "SUSPENDED",
                          "STOPPED"});
}

bool is_pending_state(const Job& job) {
    return in(job.state, {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"});
}

bool is_finished_state(const Job& job) {
    return in(job.state, {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                          "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"});
}

bool is_failure_state(const Job& job) {
    return in(job.state, {"FAILED", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "DEADLINE"});
}

bool is_stuck_reason(std::string_view reason) {
    // Reasons from squeue(1) "JOB REASON CODES" that need a person: holds, dependencies that can
    // never be met, and requests outside what the partition / account / QOS allows.
    return in(reason, {"JobHeldUser", "JobHeldAdmin", "DependencyNeverSatisfied", "PartitionConfig",
                       "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints", "InvalidAccount",
                       "InvalidQOS", "AccountNotAllowed", "QOSNotAllowed"});
}

}  // namespace mds::slurm
