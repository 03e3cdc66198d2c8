// mds-hub-sync's work: make a Hub repository hold the current version of every file of a local
// folder (new and changed files only), never deleting a remote file unless asked to (BigScience's
// git-based hub-sync.py pushed the deletions a SCRATCH purge made). Resumable: file digests are
// cached in a state file (size + mtime), LFS objects the Hub already has are not sent again, and
// committed files are recognised by their content ids, so a re-run after a kill, a crash or a
// successful run sends only what is still missing.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mds/hub/api.h"
#include "mds/hub/s3.h"
#include "mds/util/progress.h"

namespace mds::hub {

struct SyncOptions {
    std::string local_dir;
    RepoRef repo;
    std::string path_in_repo;             // prefix in the repository ("" = its root)
    std::vector<std::string> include;     // fnmatch globs on paths relative to local_dir; empty: all
    std::vector<std::string> exclude;
    bool create_repo = false;
    bool private_repo = false;
    bool dry_run = false;
    bool delete_remote = false;           // delete remote files (under path_in_repo, matching the globs) missing locally
    int jobs = 4;                         // LFS uploads at once
    std::size_t max_files_per_commit = 100;
    std::uint64_t part_size = 64ull << 20;  // S3: files larger than this go up in parts of this size
    std::string state_file;               // empty: <local_dir>/.cache/mds-hub-sync/<repo>.json
    std::string commit_message;           // empty: "mds-hub-sync: N files"
    Progress::Mode progress = Progress::Mode::Auto;
    double progress_interval_s = 30.0;    // between progress lines (not on a terminal)
    HttpOptions http;                     // token, retries; one client per upload thread
    std::function<void(const std::string&)> log;  // one line per action (verbose); may be empty
    std::function<void(const std::string&)> warn;
};

struct SyncReport {
    std::size_t local_files = 0;
    std::size_t unchanged = 0;
    std::vector<std::string> uploaded;     // paths in the repository
    std::uint64_t uploaded_bytes = 0;
    std::vector<std::pair<std::string, std::string>> failed;  // path, why
    std::vector<std::string> commits;
    std::vector<std::string> remote_only;  // remote files missing locally (kept unless delete_remote)
    std::vector<std::string> deleted;
    bool dry_run = false;
};

// Whether `path` (relative, '/'-separated) passes the include / exclude globs, as huggingface_hub's
// allow_patterns / ignore_patterns: fnmatch where '*' also matches '/', and "dir/" means "dir/*".
bool path_selected(const std::string& path, const std::vector<std::string>& include, const std::vector<std::string>& exclude);

// The token: HF_TOKEN, else the file $HF_TOKEN_PATH, $HF_HOME/token or ~/.cache/huggingface/token.
// Empty when none is found.
std::string find_token();

SyncReport sync_folder(const std::string& endpoint, const SyncOptions& options);

// The same for an S3 bucket: objects bucket/prefix/<relative path> carrying x-amz-meta-sha256; skip
// when an object of that size has the same sha256 (or, without the metadata, a single-part ETag
// equal to the file's MD5); multipart uploads for files over part_size, found again after a kill
// through the state file; remote objects missing locally kept unless delete_remote. Uses
// local_dir, include, exclude, create_repo (creates the bucket), dry_run, delete_remote, jobs,
// part_size, state_file, progress and http (its token is unused) of the options; a report without
// commits.
SyncReport sync_folder_s3(const S3Settings& settings, const S3Url& destination, const SyncOptions& options);

}  // namespace mds::hub
