// What mds-hub-sync's two destinations (the Hub, sync.cpp; S3, sync_s3.cpp) share: the run lock,
// the state file (a digest cache by size + mtime, plus a destination's own section) and the scan
// of the local folder with its digests. Internal to libcore's hub area.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mds/hub/hash.h"
#include "mds/hub/sync.h"

namespace mds::hub::detail {

struct LocalFile {
    std::string rel;          // relative to local_dir, '/'-separated
    std::string remote_path;  // in the repository, or the object key
    std::string abs;
    std::uint64_t size = 0;   // as hashed: a growing file is sent as this snapshot
    std::int64_t mtime_ns = 0;
    FileDigests digests;
    bool hashed = false;
};

// Throws mds::Error naming `dir` (and the errno text) unless it is a readable folder.
void check_local_dir(const std::string& dir);

// Makes sure, before anything is uploaded, that the state file can be kept: a path that exists and
// is not a file is refused, its folder (the current folder for a bare name) is created and probed
// for writing (mds::prepare_output_dir; errors name the folder, the errno text, and --state-file).
// Returns the lock file's path, or "" for a dry run whose state folder is missing or read-only
// (it changes nothing, so it runs unlocked).
std::string prepare_state(const std::string& state_path, bool dry_run);

// An exclusive lock beside the state file, held for the whole run: two cron runs must not overlap.
// An empty path: no lock.
class RunLock {
public:
    explicit RunLock(const std::string& path);
    ~RunLock();
    RunLock(const RunLock&) = delete;
    RunLock& operator=(const RunLock&) = delete;

private:
    int fd_ = -1;
};

// <local_dir>/.cache/mds-hub-sync/<destination, made file-name safe>.json
std::string default_state_file(const std::string& local_dir, const std::string& destination);

// prefix + "/" + rel (prefix "" → rel).
std::string join_remote_path(const std::string& prefix, const std::string& rel);

struct LocalScan {
    std::vector<LocalFile> files;  // selected, readable and hashed, sorted by rel
    nlohmann::json extra;          // the destination's own section of the state file (an object)
};

// Walks local_dir (skipping .git and the state folder), applies the globs, hashes what the cache does
// not know, and saves the cache (unless dry_run). Unreadable files go to report.failed.
LocalScan scan_local(const SyncOptions& options, const std::string& state_path, const std::string& remote_prefix,
                     SyncReport& report);

// What a dry run reports: `todo` as would-be uploads, the remote-only files as would-be deletions
// (with delete_remote) or kept; one log line each.
void report_dry_run(const std::vector<LocalFile*>& todo, const SyncOptions& options, SyncReport& report);

// Rewrites the state file atomically: the digests of `files` and the destination's section.
void save_state(const std::string& path, const std::vector<LocalFile>& files, const nlohmann::json& extra);

}  // namespace mds::hub::detail
