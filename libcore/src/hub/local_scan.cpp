// The local side of mds-hub-sync (local_scan.h).
#include "hub/local_scan.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <map>

#include "mds/util/json_limits.h"
#include "mds/util/error.h"
#include "mds/util/files.h"
#include "mds/util/progress.h"
#include "mds/util/safe_paths.h"  // prepare_output_dir, system_error_message, printable
#include "mds/util/text.h"

namespace mds::hub::detail {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kStateFormat = "mds-hub-sync-state/1";
// About 200 bytes per file: room for some 300,000 files. A larger file is not our state (a wrong
// --state-file) and is not read whole.
constexpr std::uint64_t kMaxStateFileBytes = std::uint64_t{64} << 20;

struct State {
    std::map<std::string, json> files;
    json extra = json::object();
};

// A cache entry as save_state writes it; anything else is ignored (hashed again).
bool usable_entry(const json& v) {
    return v.is_object() && v.contains("size") && v["size"].is_number_unsigned() && v.contains("mtime_ns") &&
           v["mtime_ns"].is_number_integer() && v.contains("sha256") && v["sha256"].is_string() && v.contains("git_sha1") &&
           v["git_sha1"].is_string();
}

State load_state(const std::string& path, const std::function<void(const std::string&)>& warn) {
    State st;
    if (!file_exists(path)) return st;
    try {
        const std::string text = read_file(path, kMaxStateFileBytes, "mds-hub-sync state file");
        check_json_depth(text, path);
        const json j = json::parse(text);
        if (!j.is_object() || !j.contains("format") || j["format"] != kStateFormat) {
            if (warn) warn(printable(path, 200) + " is not an mds-hub-sync state file; every file is hashed again");
            return st;
        }
        if (j.contains("files") && j["files"].is_object())
            for (const auto& [k, v] : j["files"].items())
                if (usable_entry(v)) st.files[k] = v;
        if (j.contains("destination") && j["destination"].is_object()) st.extra = j["destination"];
    } catch (const std::exception& e) {
        // A damaged state only costs hashing again (and, for S3, re-sending unfinished multipart uploads).
        if (warn) warn(std::string("ignoring the state file: ") + e.what() + "; every file is hashed again");
    }
    return st;
}

}  // namespace

void check_local_dir(const std::string& dir) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) throw Error(system_error_message("cannot read LOCAL_DIR", dir, errno));
    if (!S_ISDIR(st.st_mode)) throw Error("LOCAL_DIR '" + printable(dir, 200) + "' is not a folder");
    if (::access(dir.c_str(), R_OK | X_OK) != 0) throw Error(system_error_message("cannot read LOCAL_DIR", dir, errno));
}

std::string prepare_state(const std::string& state_path, bool dry_run) {
    if (state_path.empty()) throw UsageError("--state-file: empty path");
    struct stat st {};
    if (::stat(state_path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
        throw UsageError("--state-file '" + printable(state_path, 200) + "' exists and is not a regular file");
    // A bare name is a file of the current folder.
    std::string folder = fs::path(state_path).parent_path().string();
    if (folder.empty()) folder = ".";
    if (dry_run) {
        // A dry run changes nothing: without a writable state folder it runs unlocked.
        if (::stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || ::access(folder.c_str(), W_OK | X_OK) != 0) return {};
        return state_path + ".lock";
    }
    try {
        (void)prepare_output_dir(folder, "state folder");  // also removes temporaries of killed runs
    } catch (const Error& e) {
        throw Error(std::string(e.what()) + " (the digest cache and lock of mds-hub-sync live there; " +
                    "--state-file PATH puts them in a writable folder)");
    }
    return state_path + ".lock";
}

RunLock::RunLock(const std::string& path) {
    if (path.empty()) return;  // a dry run without a writable state folder
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(system_error_message("cannot open the lock file", path, errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        std::string holder(64, '\0');
        const ssize_t n = ::pread(fd_, holder.data(), holder.size(), 0);
        holder.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
        ::close(fd_);
        throw Error("another mds-hub-sync is running on this folder and destination (lock " + path +
                    (holder.empty() ? "" : ", pid " + trim(holder)) + ")");
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) == 0) (void)::pwrite(fd_, pid.data(), pid.size(), 0);
}

RunLock::~RunLock() {
    if (fd_ >= 0) ::close(fd_);
}

std::string default_state_file(const std::string& local_dir, const std::string& destination) {
    std::string safe;
    for (char c : destination)
        safe += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
    return local_dir + "/.cache/mds-hub-sync/" + safe + ".json";
}

std::string join_remote_path(const std::string& prefix, const std::string& rel) {
    std::string p = prefix;
    while (!p.empty() && p.back() == '/') p.pop_back();
    return p.empty() ? rel : p + "/" + rel;
}

void save_state(const std::string& path, const std::vector<LocalFile>& files, const json& extra) {
    json f = json::object();
    for (const auto& lf : files)
        if (lf.hashed)
            f[lf.rel] = {{"size", lf.size}, {"mtime_ns", lf.mtime_ns}, {"sha256", lf.digests.sha256}, {"git_sha1", lf.digests.git_sha1}};
    json j = {{"format", kStateFormat}, {"files", f}};
    if (extra.is_object() && !extra.empty()) j["destination"] = extra;
    write_file_atomic(path, j.dump() + "\n");
}

void report_dry_run(const std::vector<LocalFile*>& todo, const SyncOptions& o, SyncReport& report) {
    for (const auto* lf : todo) {
        if (o.log) o.log("would upload " + lf->remote_path + " (" + format_bytes(static_cast<double>(lf->size)) + ")");
        report.uploaded.push_back(lf->remote_path);
        report.uploaded_bytes += lf->size;
    }
    if (o.log)
        for (const auto& p : report.remote_only) o.log((o.delete_remote ? "would delete " : "would keep (missing locally) ") + p);
    if (o.delete_remote) report.deleted = report.remote_only;
}

LocalScan scan_local(const SyncOptions& o, const std::string& state_path, const std::string& remote_prefix, SyncReport& report) {
    std::vector<LocalFile> files;
    const fs::path root(o.local_dir);
    const std::string state_dir_rel = ".cache/mds-hub-sync/";
    for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied);
         it != fs::recursive_directory_iterator(); ++it) {
        const std::string rel = fs::relative(it->path(), root).generic_string();
        if (it->is_directory() && (rel == ".git" || rel == ".cache/mds-hub-sync")) {
            it.disable_recursion_pending();
            continue;
        }
        if (!it->is_regular_file() || it->is_symlink()) continue;
        if (rel.rfind(state_dir_rel, 0) == 0 || !path_selected(rel, o.include, o.exclude)) continue;
        LocalFile lf;
        lf.rel = rel;
        lf.remote_path = join_remote_path(remote_prefix, rel);
        lf.abs = it->path().string();
        files.push_back(std::move(lf));
    }
    std::sort(files.begin(), files.end(), [](const LocalFile& a, const LocalFile& b) { return a.rel < b.rel; });
    report.local_files = files.size();
    State cache = load_state(state_path, o.warn);
    LocalScan scan;
    scan.extra = std::move(cache.extra);
    std::uint64_t scan_bytes = 0;
    for (const auto& lf : files) {
        std::error_code ec;
        const auto n = fs::file_size(lf.abs, ec);
        if (!ec) scan_bytes += n;
    }
    Progress hashing("files checked", scan_bytes, o.progress, o.progress_interval_s);
    std::uint64_t checked_bytes = 0;
    for (auto& lf : files) {
        struct stat st{};
        if (::stat(lf.abs.c_str(), &st) != 0) {
            report.failed.emplace_back(lf.remote_path, errno_message("cannot stat " + lf.abs, errno));
            continue;
        }
        lf.size = static_cast<std::uint64_t>(st.st_size);
        lf.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
        if (auto c = cache.files.find(lf.rel); c != cache.files.end() && c->second.value("size", std::uint64_t{0}) == lf.size &&
                                               c->second.value("mtime_ns", std::int64_t{0}) == lf.mtime_ns) {
            lf.digests = {lf.size, c->second.value("sha256", std::string()), c->second.value("git_sha1", std::string())};
            lf.hashed = !lf.digests.sha256.empty() && !lf.digests.git_sha1.empty();
        }
        if (!lf.hashed) {
            try {
                lf.digests = digest_file_prefix(lf.abs, lf.size);  // a snapshot of a growing file
                lf.hashed = true;
                lf.size = lf.digests.size;
            } catch (const Error& e) {
                report.failed.emplace_back(lf.remote_path, e.what());
                continue;
            }
        }
        checked_bytes += lf.size;
        hashing.update(scan.files.size() + 1, checked_bytes, checked_bytes);
        scan.files.push_back(lf);
    }
    hashing.finish();
    if (!o.dry_run) {
        try {
            save_state(state_path, scan.files, scan.extra);
        } catch (const std::exception& e) {
            if (o.warn) o.warn(std::string("cannot save the state file: ") + e.what());
        }
    }
    return scan;
}

}  // namespace mds::hub::detail
