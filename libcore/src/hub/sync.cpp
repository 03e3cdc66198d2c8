// mds-hub-sync's work (sync.h). The Hub destination, in the order of a run: the local scan (shared
// with S3, local_scan.h), the repository and its tree, the plan (what differs), upload modes
// (preupload), the LFS objects (in parallel), then commits of at most max_files_per_commit files,
// each on top of the last (parentCommit), as huggingface_hub's create_commit does.
#include "mds/hub/sync.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "hub/local_scan.h"
#include "mds/hub/hash.h"
#include "mds/util/error.h"
#include "mds/util/files.h"
#include "mds/util/parallel.h"
#include "mds/util/text.h"

namespace mds::hub {
namespace {

using detail::LocalFile;
using mds::trim;

constexpr std::uint64_t kMaxTokenFileBytes = 64 << 10;
// Regular (non-LFS) files travel base64-encoded inside the commit: the Hub takes them up to 10 MB.
constexpr std::uint64_t kMaxInlineFileBytes = std::uint64_t{16} << 20;
constexpr std::uint64_t kMaxInlineCommitBytes = std::uint64_t{64} << 20;
// A commit is tried at most this often (a moved branch, an answer that was lost).
constexpr int kCommitAttempts = 3;

// One run against the Hub: its options, its report, and the API on the caller's client.
struct HubRun {
    const std::string& endpoint;
    const SyncOptions& o;
    SyncReport& report;
    HubApi& api;

    void log(const std::string& s) const {
        if (o.log) o.log(s);
    }
    void warn(const std::string& s) const {
        if (o.warn) o.warn(s);
    }
};

// --state-file, else one per repository type, id, revision and path in the repository.
std::string hub_state_path(const SyncOptions& o) {
    if (!o.state_file.empty()) return o.state_file;
    return detail::default_state_file(o.local_dir, o.repo.type + "-" + o.repo.id + "-" + o.repo.revision +
                                                       (o.path_in_repo.empty() ? "" : "-" + o.path_in_repo));
}

// The branch head, creating the repository first when asked to (a dry run only says it would).
std::optional<std::string> find_or_create_repo(const HubRun& r) {
    const RepoRef& repo = r.o.repo;
    std::optional<std::string> head = r.api.head(repo);
    if (head) return head;
    if (!r.o.create_repo)
        throw Error(repo.type + " repository " + repo.id + " (revision " + repo.revision +
                    ") not found, or the token cannot see it; --create-repo creates it");
    if (r.o.dry_run) {
        r.log("would create " + repo.type + " repository " + repo.id);
        return head;
    }
    r.api.create_repo(repo, r.o.private_repo);
    head = r.api.head(repo);
    if (!head) throw Error("repository " + repo.id + " created, but revision " + repo.revision + " is not there");
    return head;
}

// The remote files under path_in_repo, by path (none when the repository does not exist yet).
std::map<std::string, RemoteEntry> list_remote(const HubRun& r, const std::optional<std::string>& head) {
    std::map<std::string, RemoteEntry> remote;
    if (head)
        for (auto& e : r.api.list_tree(r.o.repo, r.o.path_in_repo))
            if (!e.directory) remote[e.path] = std::move(e);
    return remote;
}

// The local files whose content id differs from the remote one (or that are missing there); the
// remote files missing locally, under path_in_repo and passing the globs, go to report.remote_only.
std::vector<LocalFile*> plan_changes(const HubRun& r, std::vector<LocalFile>& local,
                                     const std::map<std::string, RemoteEntry>& remote) {
    auto same_as_remote = [&](const LocalFile& lf) {
        const auto it = remote.find(lf.remote_path);
        if (it == remote.end()) return false;
        if (it->second.lfs_sha256) return *it->second.lfs_sha256 == lf.digests.sha256;
        return it->second.oid == lf.digests.git_sha1;
    };
    std::vector<LocalFile*> todo;
    std::set<std::string> local_paths;
    for (auto& lf : local) {
        local_paths.insert(lf.remote_path);
        if (same_as_remote(lf)) ++r.report.unchanged;
        else todo.push_back(&lf);
    }
    for (const auto& [path, e] : remote) {
        if (local_paths.count(path) || path == ".gitattributes") continue;
        std::string rel = path;
        if (!r.o.path_in_repo.empty()) {
            const std::string prefix = detail::join_remote_path(r.o.path_in_repo, "");
            if (rel.rfind(prefix, 0) != 0) continue;
            rel = rel.substr(prefix.size());
        }
        if (path_selected(rel, r.o.include, r.o.exclude)) r.report.remote_only.push_back(path);
    }
    return todo;
}

// The first 512 bytes of a file (fewer, or none, when it cannot be read): preupload's sample.
std::string file_sample(const LocalFile& lf) {
    std::string sample(std::min<std::uint64_t>(512, lf.size), '\0');
    const int fd = ::open(lf.abs.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        const ssize_t n = ::pread(fd, sample.data(), sample.size(), 0);
        sample.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
        ::close(fd);
    }
    return sample;
}

struct UploadModes {
    std::vector<LocalFile*> lfs_files, regular_files;
};

// Asks the Hub how each file goes up (preupload: LFS, inline, or ignored by its .gitignore).
UploadModes ask_upload_modes(const HubRun& r, const std::vector<LocalFile*>& todo) {
    std::vector<PreuploadFile> pre;
    for (auto* lf : todo) pre.push_back({lf->remote_path, lf->size, file_sample(*lf)});
    const auto modes = pre.empty() ? std::vector<PreuploadAnswer>() : r.api.preupload(r.o.repo, pre);
    std::map<std::string, PreuploadAnswer> mode_of;
    for (const auto& m : modes) mode_of[m.path] = m;
    UploadModes out;
    for (auto* lf : todo) {
        const auto it = mode_of.find(lf->remote_path);
        if (it == mode_of.end()) {
            r.report.failed.emplace_back(lf->remote_path, "the Hub's preupload answer does not mention it");
            continue;
        }
        if (it->second.ignore) {
            r.log("ignored by the repository's .gitignore: " + lf->remote_path);
            continue;
        }
        if (!it->second.lfs && lf->size > kMaxInlineFileBytes) {
            // The Hub sends files over 10 MB through LFS; a server asking for more inline would make
            // the commit (built in memory, base64) as large as the file.
            r.report.failed.emplace_back(lf->remote_path, "the Hub asks for its " + std::to_string(lf->size) +
                                                              " bytes inline in the commit; mds-hub-sync sends at most " +
                                                              std::to_string(kMaxInlineFileBytes >> 20) + " MiB inline");
            continue;
        }
        (it->second.lfs ? out.lfs_files : out.regular_files).push_back(lf);
    }
    return out;
}

// An upload worker's own connection: a curl handle serves one thread, and is kept alive between
// its objects.
struct LfsWorker {
    HttpClient http;
    HubApi api;
    LfsWorker(const HttpOptions& options, const std::string& endpoint) : http(options), api(http, endpoint) {}
};

// Sends the LFS objects the Hub does not have, `jobs` at once, one object once even when several
// files share it. Returns the sha256 of the objects now on the Hub; a failed one goes to
// report.failed (its files are then left out of the commits).
std::set<std::string> upload_lfs_objects(const HubRun& r, const std::vector<LocalFile*>& lfs_files, Progress& progress) {
    std::set<std::string> lfs_ok;
    if (lfs_files.empty()) return lfs_ok;
    std::vector<std::pair<std::string, std::uint64_t>> objects;
    std::map<std::string, LocalFile*> by_oid;
    for (auto* lf : lfs_files)
        if (by_oid.emplace(lf->digests.sha256, lf).second) objects.emplace_back(lf->digests.sha256, lf->size);
    const auto transfers = r.api.lfs_batch(r.o.repo, objects);
    std::mutex mu;  // guards the tallies, lfs_ok, the report and the progress
    std::uint64_t done_bytes = 0;
    std::size_t done_files = 0;
    std::vector<std::unique_ptr<LfsWorker>> workers(parallel_workers(transfers.size(), r.o.jobs));
    parallel_for_with_worker(transfers.size(), r.o.jobs, [&](std::size_t i, std::size_t w) {
        if (!workers[w]) workers[w] = std::make_unique<LfsWorker>(r.o.http, r.endpoint);
        const LfsTransfer& t = transfers[i];
        const auto it = by_oid.find(t.oid);
        if (it == by_oid.end()) return;
        LocalFile* lf = it->second;
        std::uint64_t last = 0;
        try {
            workers[w]->api.upload_lfs(t, lf->abs, [&](std::uint64_t sent) {
                std::lock_guard<std::mutex> g(mu);
                done_bytes += sent - last;
                last = sent;
                progress.update(done_files, done_bytes, done_bytes);
            });
            std::lock_guard<std::mutex> g(mu);
            done_bytes += lf->size - last;
            ++done_files;
            lfs_ok.insert(t.oid);
            progress.update(done_files, done_bytes, done_bytes);
            r.log((t.needed ? "uploaded " : "already on the Hub: ") + lf->remote_path);
        } catch (const std::exception& e) {
            std::lock_guard<std::mutex> g(mu);
            r.report.failed.emplace_back(lf->remote_path, e.what());
        }
    });
    return lfs_ok;
}

// What the commits carry: the regular files, the LFS files whose object is on the Hub, and the
// deletions when asked for. `files` are the local files among them (for uploaded_bytes).
struct CommitPlan {
    std::vector<CommitFile> entries;
    std::vector<LocalFile*> files;
};

CommitPlan plan_commits(const HubRun& r, const UploadModes& modes, const std::set<std::string>& lfs_ok) {
    CommitPlan plan;
    for (auto* lf : modes.regular_files) {
        plan.entries.push_back({CommitFile::Kind::regular, lf->remote_path, lf->abs, "", lf->size});
        plan.files.push_back(lf);
    }
    for (auto* lf : modes.lfs_files)
        if (lfs_ok.count(lf->digests.sha256)) {
            plan.entries.push_back({CommitFile::Kind::lfs, lf->remote_path, "", lf->digests.sha256, lf->size});
            plan.files.push_back(lf);
        }
    if (r.o.delete_remote)
        for (const auto& p : r.report.remote_only) plan.entries.push_back({CommitFile::Kind::deleted, p, "", "", 0});
    return plan;
}

// The end of the batch that starts at `start`: at most `per` files and kMaxInlineCommitBytes of
// inline content (the commit body is built in memory), but always at least one file.
std::size_t batch_end(const std::vector<CommitFile>& entries, std::size_t start, std::size_t per) {
    std::uint64_t inline_bytes = 0;
    std::size_t end = start;
    for (; end < entries.size() && end - start < per; ++end) {
        const std::uint64_t add = entries[end].kind == CommitFile::Kind::regular ? entries[end].size : 0;
        if (end > start && inline_bytes + add > kMaxInlineCommitBytes) break;
        inline_bytes += add;
    }
    return end;
}

// Whether the branch already holds what the batch wanted (a commit whose answer was lost).
bool batch_landed(const HubRun& r, const std::vector<CommitFile>& batch) {
    std::map<std::string, RemoteEntry> now;
    for (auto& en : r.api.list_tree(r.o.repo, r.o.path_in_repo)) now[en.path] = en;
    return std::all_of(batch.begin(), batch.end(), [&](const CommitFile& f) {
        const auto it = now.find(f.path);
        if (f.kind == CommitFile::Kind::deleted) return it == now.end();
        if (it == now.end()) return false;
        if (f.kind == CommitFile::Kind::lfs) return it->second.lfs_sha256 && *it->second.lfs_sha256 == f.sha256;
        return it->second.oid == git_blob_sha1_hex(read_file_prefix(f.local_path, f.size));
    });
}

// One commit on top of `head`; returns its oid. Never retried blindly: an uncertain commit is
// looked for on the branch first, and a moved branch (HTTP 412: another writer) is retried on its
// new head. `head` follows what was learnt, even when this throws.
std::string commit_with_retry(const HubRun& r, const std::string& message, const std::vector<CommitFile>& batch,
                              std::optional<std::string>& head) {
    for (int attempt = 1;; ++attempt) {
        try {
            return r.api.commit(r.o.repo, message, batch, head);
        } catch (const CommitUncertain& e) {
            // Did it land? Compare the branch with what the batch wanted.
            r.warn(std::string(e.what()) + "; checking the branch");
            head = r.api.head(r.o.repo);
            if (batch_landed(r, batch)) return head.value_or("?");
            if (attempt >= kCommitAttempts) throw;
        } catch (const HttpError& e) {
            // The branch moved (another writer): take its new head and try once more.
            if (attempt < kCommitAttempts && e.status == 412) {
                head = r.api.head(r.o.repo);
                continue;
            }
            throw;
        }
    }
}

// The commits, each on top of the last; a batch that fails goes to report.failed, file by file,
// and the next batch is still tried.
void commit_all(const HubRun& r, const std::vector<CommitFile>& entries, std::optional<std::string> head) {
    const std::size_t per = std::max<std::size_t>(1, r.o.max_files_per_commit);
    for (std::size_t start = 0, end = 0; start < entries.size(); start = end) {
        end = batch_end(entries, start, per);
        const std::vector<CommitFile> batch(entries.begin() + static_cast<std::ptrdiff_t>(start),
                                            entries.begin() + static_cast<std::ptrdiff_t>(end));
        const std::string msg = r.o.commit_message.empty()
                                    ? "mds-hub-sync: " + std::to_string(batch.size()) + " file(s)"
                                    : r.o.commit_message;
        std::string oid;
        try {
            oid = commit_with_retry(r, msg, batch, head);
        } catch (const Error& e) {
            for (const auto& f : batch) r.report.failed.emplace_back(f.path, std::string("not committed: ") + e.what());
            continue;
        }
        head = oid;
        r.report.commits.push_back(oid);
        for (const auto& f : batch) (f.kind == CommitFile::Kind::deleted ? r.report.deleted : r.report.uploaded).push_back(f.path);
        r.log("commit " + oid.substr(0, 12) + ": " + std::to_string(batch.size()) + " file(s)");
    }
}

}  // namespace

bool path_selected(const std::string& path, const std::vector<std::string>& include, const std::vector<std::string>& exclude) {
    auto matches = [&](std::string pattern) {
        if (!pattern.empty() && pattern.back() == '/') pattern += "*";
        return ::fnmatch(pattern.c_str(), path.c_str(), 0) == 0;
    };
    if (!include.empty() && std::none_of(include.begin(), include.end(), matches)) return false;
    return std::none_of(exclude.begin(), exclude.end(), matches);
}

std::string find_token() {
    if (const char* t = std::getenv("HF_TOKEN"); t && *t) return trim(t);
    std::vector<std::string> files;
    if (const char* p = std::getenv("HF_TOKEN_PATH"); p && *p) files.emplace_back(p);
    if (const char* h = std::getenv("HF_HOME"); h && *h) files.push_back(std::string(h) + "/token");
    if (const char* home = std::getenv("HOME"); home && *home) files.push_back(std::string(home) + "/.cache/huggingface/token");
    // A token is about 40 bytes; a large file at a token path is not one (and is not read whole).
    for (const auto& f : files)
        if (file_exists(f)) return trim(read_file(f, kMaxTokenFileBytes, "Hugging Face token file"));
    return {};
}

SyncReport sync_folder(const std::string& endpoint, const SyncOptions& o) {
    SyncReport report;
    report.dry_run = o.dry_run;
    detail::check_local_dir(o.local_dir);
    const std::string state_path = hub_state_path(o);
    detail::RunLock lock(detail::prepare_state(state_path, o.dry_run));

    // 1. The local files, with digests (cached by size and mtime).
    std::vector<LocalFile> local = detail::scan_local(o, state_path, o.path_in_repo, report).files;

    // 2. The remote side, and what differs.
    HttpClient http(o.http);
    HubApi api(http, endpoint);
    const HubRun run{endpoint, o, report, api};
    const std::optional<std::string> head = find_or_create_repo(run);
    const std::vector<LocalFile*> todo = plan_changes(run, local, list_remote(run, head));
    if (o.dry_run) {
        detail::report_dry_run(todo, o, report);
        return report;
    }

    // 3. Upload modes, then the LFS objects (in parallel).
    const UploadModes modes = ask_upload_modes(run, todo);
    std::uint64_t total_bytes = 0;
    for (auto* lf : todo) total_bytes += lf->size;
    Progress progress("files", total_bytes, o.progress, o.progress_interval_s);
    const std::set<std::string> lfs_ok = upload_lfs_objects(run, modes.lfs_files, progress);

    // 4. Commits of at most max_files_per_commit files, each on top of the last (parentCommit).
    const CommitPlan plan = plan_commits(run, modes, lfs_ok);
    commit_all(run, plan.entries, head);
    const std::set<std::string> committed(report.uploaded.begin(), report.uploaded.end());
    for (auto* lf : plan.files)
        if (committed.count(lf->remote_path)) report.uploaded_bytes += lf->size;
    progress.finish();
    return report;
}

}  // namespace mds::hub
