// The run ledger (mds/trainer/run_ledger.h): the line's JSON, the reader, and the writer's
// locked whole-file rewrite. The part of the Trainer that fills the line (hosts gathered over the
// ranks, layout, resume point) is at the end.
#include "mds/trainer/run_ledger.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "mds/util/cli.h"         // mds_version
#include "mds/util/error.h"
#include "mds/util/files.h"       // write_file_atomic, sync_directory, read_file, file_exists
#include "mds/util/safe_paths.h"  // check_output_dir, system_error_message
#include "mds/util/tool.h"        // print_warning
#include "trainer_loop.h"

namespace mds::trainer {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// ---- the line ----

bool LedgerEntry::trained(std::int64_t it) const {
    if (it <= resumed_iteration) return false;
    return it <= iteration || status == "running";
}

namespace {

Json nullable(const std::optional<std::string>& s) { return s ? Json(*s) : Json(nullptr); }

}  // namespace

std::string to_json_line(const LedgerEntry& e) {
    Json j;
    j["run_id"] = e.run_id;
    j["status"] = e.status;
    j["start_time"] = e.start_time.empty() ? Json(nullptr) : Json(e.start_time);
    j["end_time"] = nullable(e.end_time);
    j["job_id"] = nullable(e.job_id);
    j["hosts"] = e.hosts;
    j["mds_version"] = e.mds_version;
    j["seed"] = e.seed;
    j["layout"] = Json{{"world_size", e.layout.world_size}, {"tp", e.layout.tp}, {"pp", e.layout.pp}, {"dp", e.layout.dp}};
    j["resumed_iteration"] = e.resumed_iteration;
    j["resumed_consumed_samples"] = e.resumed_consumed_samples;
    j["iteration"] = e.iteration;
    j["consumed_samples"] = e.consumed_samples;
    j["loaded"] = nullable(e.loaded);
    Json saved = Json::array();
    for (const auto& s : e.saved) saved.push_back(Json{{"iteration", s.iteration}, {"path", s.path}});
    j["saved"] = std::move(saved);
    j["stop"] = nullable(e.stop);
    j["command_line"] = e.command_line;
    j["cwd"] = e.cwd;
    // Replace invalid UTF-8 (a command-line argument in another encoding) rather than fail the run.
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// Field readers: each names the field and what it expected.
struct LineReader {
    const nlohmann::json& j;
    const std::string& where;

    [[noreturn]] void fail(const std::string& key, const std::string& expected) const {
        throw Error(where + ": field \"" + key + "\": expected " + expected);
    }
    const nlohmann::json& field(const std::string& key) const {
        auto it = j.find(key);
        if (it == j.end()) throw Error(where + ": missing field \"" + key + "\"");
        return *it;
    }
    std::string str(const std::string& key) const {
        const auto& v = field(key);
        if (!v.is_string()) fail(key, "a string");
        return v.get<std::string>();
    }
    std::optional<std::string> opt_str(const std::string& key) const {
        const auto& v = field(key);
        if (v.is_null()) return std::nullopt;
        if (!v.is_string()) fail(key, "a string or null");
        return v.get<std::string>();
    }
    static bool integer(const nlohmann::json& v) { return v.is_number_integer(); }
    std::int64_t num(const std::string& key) const {
        const auto& v = field(key);
        if (!integer(v)) fail(key, "an integer");
        return v.get<std::int64_t>();
    }
    std::vector<std::string> strings(const std::string& key) const {
        const auto& v = field(key);
        if (!v.is_array()) fail(key, "an array of strings");
        std::vector<std::string> out;
        for (const auto& s : v) {
            if (!s.is_string()) fail(key, "an array of strings");
            out.push_back(s.get<std::string>());
        }
        return out;
    }
};

}  // namespace

LedgerEntry parse_ledger_line(const std::string& line, const std::string& where) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
        throw Error(where + ": not a JSON line (" + std::string(e.what()) + ")");
    }
    if (!j.is_object()) throw Error(where + ": expected a JSON object");
    const LineReader r{j, where};
    LedgerEntry e;
    e.run_id = r.str("run_id");
    e.status = r.str("status");
    if (e.status != "running" && e.status != "stopped") r.fail("status", "\"running\" or \"stopped\"");
    e.start_time = r.opt_str("start_time").value_or("");
    e.end_time = r.opt_str("end_time");
    e.job_id = r.opt_str("job_id");
    e.hosts = r.strings("hosts");
    e.mds_version = r.str("mds_version");
    e.seed = r.num("seed");
    const auto& layout = r.field("layout");
    if (!layout.is_object()) r.fail("layout", "an object");
    const LineReader lr{layout, where};
    try {
        e.layout = {lr.num("world_size"), lr.num("tp"), lr.num("pp"), lr.num("dp")};
    } catch (const Error& err) {
        throw Error(std::string(err.what()) + " (in \"layout\")");
    }
    e.resumed_iteration = r.num("resumed_iteration");
    e.resumed_consumed_samples = r.num("resumed_consumed_samples");
    e.iteration = r.num("iteration");
    e.consumed_samples = r.num("consumed_samples");
    e.loaded = r.opt_str("loaded");
    const auto& saved = r.field("saved");
    if (!saved.is_array()) r.fail("saved", "an array of {\"iteration\", \"path\"}");
    for (const auto& s : saved) {
        if (!s.is_object() || !s.contains("iteration") || !s.contains("path") || !LineReader::integer(s["iteration"]) ||
            !s["path"].is_string())
            r.fail("saved", "an array of {\"iteration\": int, \"path\": str}");
        e.saved.push_back({s["iteration"].get<std::int64_t>(), s["path"].get<std::string>()});
    }
    e.stop = r.opt_str("stop");
    e.command_line = r.strings("command_line");
    e.cwd = r.str("cwd");
    return e;
}

namespace {

// The file's lines, without their newlines; a last line without one counts too.
std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> lines;
    std::size_t begin = 0;
    while (begin < text.size()) {
        std::size_t end = text.find('\n', begin);
        if (end == std::string::npos) end = text.size();
        lines.push_back(text.substr(begin, end - begin));
        begin = end + 1;
    }
    return lines;
}

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r") == std::string_view::npos; }

// A ledger is small (a line per launch); this bounds what a wrong path could make us read.
constexpr std::uint64_t kMaxLedgerBytes = 256ull << 20;

}  // namespace

std::vector<LedgerEntry> read_ledger(const std::string& path) {
    if (!file_exists(path)) throw Error(path + ": no such run ledger");
    const auto lines = split_lines(read_file(path, kMaxLedgerBytes, "run ledger"));
    std::vector<LedgerEntry> out;
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (blank(lines[i])) continue;
        out.push_back(parse_ledger_line(lines[i], path + ":" + std::to_string(i + 1)));
        out.back().line = i + 1;
    }
    return out;
}

const LedgerEntry* find_ledger_entry(const std::vector<LedgerEntry>& entries, std::int64_t iteration) {
    for (auto it = entries.rbegin(); it != entries.rend(); ++it)
        if (it->trained(iteration)) return &*it;
    return nullptr;
}

std::string resolve_ledger_path(const std::string& run_ledger_flag, const std::string& save) {
    if (run_ledger_flag == "none") return "";
    if (!run_ledger_flag.empty()) return run_ledger_flag;
    if (save.empty()) return "";
    return (fs::path(save) / "runs.jsonl").string();
}

void check_ledger_path(const std::string& path, const std::string& flag) {
    if (path.empty()) return;
    const fs::path p(path);
    std::error_code ec;
    if (fs::is_directory(p, ec)) throw UsageError(flag + " " + path + ": is a folder; expected a file");
    try {
        check_output_dir(p.has_parent_path() ? p.parent_path().string() : ".", flag + " folder");
    } catch (const UsageError&) {
        throw;
    } catch (const Error& e) {
        throw UsageError(e.what());
    }
    if (fs::exists(p, ec) && ::access(path.c_str(), R_OK | W_OK) != 0)
        throw UsageError(system_error_message("cannot write the " + flag + " file", path, errno));
}

std::string iso8601_utc_now() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    ::gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// ---- the writer ----

namespace {

std::string new_run_id() {
    std::random_device rd;
    const std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
                            static_cast<std::uint64_t>(std::time(nullptr)) * 0x9e3779b97f4a7c15ull ^
                            static_cast<std::uint64_t>(::getpid());
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

// An exclusive flock on PATH.lock for the length of one rewrite: writers on other nodes of a shared
// file system (and other jobs on the same ledger) take turns.
class LedgerLock {
public:
    explicit LedgerLock(const std::string& ledger) : path_(ledger + ".lock") {
        fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd_ < 0) throw Error(system_error_message("cannot open the run ledger's lock file", path_, errno));
        while (::flock(fd_, LOCK_EX) != 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd_);
            throw Error(system_error_message("cannot lock", path_, err));
        }
    }
    ~LedgerLock() {
        ::flock(fd_, LOCK_UN);
        ::close(fd_);
    }
    LedgerLock(const LedgerLock&) = delete;
    LedgerLock& operator=(const LedgerLock&) = delete;

private:
    std::string path_;
    int fd_ = -1;
};

// The run_id of a ledger line, without parsing the rest: our lines start {"run_id":"<16 hex>".
std::string_view line_run_id(std::string_view line) {
    constexpr std::string_view prefix = "{\"run_id\":\"";
    if (line.substr(0, prefix.size()) != prefix || line.size() < prefix.size() + 17) return {};
    return line.substr(prefix.size(), 16);
}

// Rewrites `path` with the line of `entry` replaced (appended when absent). Every other line is
// kept byte for byte; malformed ones get a warning (once per line number and process).
void rewrite_ledger(const std::string& path, const LedgerEntry& entry, std::set<std::size_t>& warned) {
    const fs::path p(path);
    const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
    fs::create_directories(dir);
    LedgerLock lock(path);
    std::vector<std::string> lines;
    if (file_exists(path)) lines = split_lines(read_file(path, kMaxLedgerBytes, "run ledger"));
    const std::string mine = to_json_line(entry);
    bool replaced = false;
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (blank(lines[i])) continue;
        if (line_run_id(lines[i]) == entry.run_id) {
            lines[i] = mine;
            replaced = true;
            continue;
        }
        try {
            (void)parse_ledger_line(lines[i], path + ":" + std::to_string(i + 1));
        } catch (const Error& e) {
            if (warned.insert(i + 1).second) print_warning("run ledger " + std::string(e.what()) + "; the line is kept as it is");
        }
    }
    if (!replaced) lines.push_back(mine);
    std::string text;
    for (const auto& l : lines) {
        text += l;
        text += '\n';
    }
    write_file_atomic(path, text);
    sync_directory(dir);
}

}  // namespace

RunLedger::RunLedger(std::string path, LedgerEntry entry) : path_(std::move(path)), entry_(std::move(entry)) {
    entry_.run_id = new_run_id();
    entry_.status = "running";
    entry_.start_time = iso8601_utc_now();
    entry_.end_time.reset();
    entry_.stop.reset();
    try {
        rewrite_ledger(path_, entry_, warned_);
    } catch (const fs::filesystem_error& e) {
        throw Error("cannot write the run ledger " + path_ + ": " + e.code().message());
    }
}

void RunLedger::record_progress(std::int64_t iteration, std::int64_t consumed_samples) {
    entry_.iteration = iteration;
    entry_.consumed_samples = consumed_samples;
}

void RunLedger::record_save(std::int64_t iteration, const std::string& folder, std::int64_t consumed_samples) {
    if (finished_) return;
    record_progress(iteration, consumed_samples);
    std::error_code ec;
    auto abs = fs::absolute(folder, ec);
    const std::string where = ec ? folder : abs.lexically_normal().string();
    bool known = false;
    for (auto& s : entry_.saved)
        if (s.iteration == iteration) {
            s.path = where;
            known = true;
        }
    if (!known) entry_.saved.push_back({iteration, where});
    write();
}

void RunLedger::finish(const std::string& reason) {
    if (finished_) return;
    finished_ = true;
    entry_.status = "stopped";
    entry_.end_time = iso8601_utc_now();
    entry_.stop = reason;
    write();
}

void RunLedger::write() {
    try {
        rewrite_ledger(path_, entry_, warned_);
    } catch (const std::exception& e) {
        print_warning("run ledger " + path_ + " not updated: " + e.what());
    }
}

// ---- the Trainer's part ----

namespace {

// This node's name, as `hostname` prints it.
std::string this_host() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
    return buf;
}

}  // namespace

// Every rank's host name, unique and sorted: a collective over the world (each rank sends its name
// in a fixed-size byte tensor).
std::vector<std::string> Trainer::ledger_hosts() {
    constexpr std::int64_t kLen = 256;
    const std::string mine = this_host().substr(0, kLen - 1);
    at::Tensor t = at::zeros({kLen}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(t.data_ptr<std::uint8_t>(), mine.data(), mine.size());
    std::set<std::string> hosts;
    for (const auto& g : comm_->all_gather(t, Group::World)) {
        const at::Tensor c = g.to(at::kCPU).contiguous();
        const auto* p = reinterpret_cast<const char*>(c.data_ptr<std::uint8_t>());
        hosts.insert(std::string(p, ::strnlen(p, kLen)));
    }
    return {hosts.begin(), hosts.end()};
}

void Trainer::start_ledger() {
    const std::string path = resolve_ledger_path(options_.run_ledger, args_.checkpoint.save);
    if (path.empty()) return;
    // Every rank joins the gather; rank 0 writes.
    auto hosts = ledger_hosts();
    if (comm_->rank() != 0) return;
    LedgerEntry e;
    if (const char* job = std::getenv("SLURM_JOB_ID"); job && *job) e.job_id = job;
    e.hosts = std::move(hosts);
    e.mds_version = mds_version();
    e.seed = args_.seed;
    e.layout = {world_, tp_size_, pp_size_, dp_};
    e.resumed_iteration = resumed_.iteration;
    e.resumed_consumed_samples = resumed_.consumed_train_samples;
    e.iteration = iteration_;
    e.consumed_samples = consumed_;
    if (!loaded_dir_.empty()) {
        std::error_code ec;
        auto abs = fs::absolute(loaded_dir_, ec);
        e.loaded = ec ? loaded_dir_ : abs.lexically_normal().string();
    }
    e.command_line = options_.command_line;
    std::error_code ec;
    e.cwd = fs::current_path(ec).string();
    ledger_.emplace(path, std::move(e));
}

void Trainer::record_error(const std::string& message) {
    if (ledger_) {
        ledger_->record_progress(iteration_, consumed_);
        ledger_->finish("error: " + message);
    }
}

}  // namespace mds::trainer
