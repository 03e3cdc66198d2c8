// mds-hub-sync's work (sync.h).
#include "mds/hub/sync.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "hub/local_scan.h"
#include "mds/hub/hash.h"
#include "mds/util/error.h"
#include "mds/util/files.h"

namespace mds::hub {
namespace {

using detail::LocalFile;
using detail::trim;

constexpr std::uint64_t kMaxTokenFileBytes = 64 << 10;
// Regular (non-LFS) files travel base64-encoded inside the commit: the Hub takes them up to 10 MB.
constexpr std::uint64_t kMaxInlineFileBytes = std::uint64_t{16} << 20;
constexpr std::uint64_t kMaxInlineCommitBytes = std::uint64_t{64} << 20;

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
    auto log = [&](const std::string& s) {
        if (o.log) o.log(s);
    };
    auto warn = [&](const std::string& s) {
        if (o.warn) o.warn(s);
    };
    SyncReport report;
    report.dry_run = o.dry_run;
    detail::check_local_dir(o.local_dir);
    const std::string state_path =
        o.state_file.empty()
            ? detail::default_state_file(o.local_dir, o.repo.type + "-" + o.repo.id + "-" + o.repo.revision +
                                                          (o.path_in_repo.empty() ? "" : "-" + o.path_in_repo))
            : o.state_file;
    detail::RunLock lock(detail::prepare_state(state_path, o.dry_run));

    // 1. The local files, with digests (cached by size and mtime).
    std::vector<LocalFile> usable = detail::scan_local(o, state_path, o.path_in_repo, report).files;

    // 2. The remote side.
    HttpClient http(o.http);
    HubApi api(http, endpoint);
    std::optional<std::string> head = api.head(o.repo);
    if (!head) {
        if (!o.create_repo)
            throw Error(o.repo.type + " repository " + o.repo.id + " (revision " + o.repo.revision +
                        ") not found, or the token cannot see it; --create-repo creates it");
        if (o.dry_run) {
            log("would create " + o.repo.type + " repository " + o.repo.id);
        } else {
            api.create_repo(o.repo, o.private_repo);
            head = api.head(o.repo);
            if (!head) throw Error("repository " + o.repo.id + " created, but revision " + o.repo.revision + " is not there");
        }
    }
    std::map<std::string, RemoteEntry> remote;
    if (head)
        for (auto& e : api.list_tree(o.repo, o.path_in_repo))
            if (!e.directory) remote[e.path] = std::move(e);

    auto same_as_remote = [&](const LocalFile& lf) {
        const auto it = remote.find(lf.remote_path);
        if (it == remote.end()) return false;
        if (it->second.lfs_sha256) return *it->second.lfs_sha256 == lf.digests.sha256;
        return it->second.oid == lf.digests.git_sha1;
    };
    std::vector<LocalFile*> todo;
    std::set<std::string> local_paths;
    for (auto& lf : usable) {
        local_paths.insert(lf.remote_path);
        if (same_as_remote(lf)) ++report.unchanged;
        else todo.push_back(&lf);
    }
    for (const auto& [path, e] : remote) {
        if (local_paths.count(path) || path == ".gitattributes") continue;
        std::string rel = path;
        if (!o.path_in_repo.empty()) {
            const std::string prefix = detail::join_remote_path(o.path_in_repo, "");
            if (rel.rfind(prefix, 0) != 0) continue;
            rel = rel.substr(prefix.size());
        }
        if (path_selected(rel, o.include, o.exclude)) report.remote_only.push_back(path);
    }

    if (o.dry_run) {
        detail::report_dry_run(todo, o, report);
        return report;
    }

    // 3. Upload modes, then the LFS objects (in parallel).
    std::vector<PreuploadFile> pre;
    for (auto* lf : todo) {
        std::string sample(std::min<std::uint64_t>(512, lf->size), '\0');
        const int fd = ::open(lf->abs.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            const ssize_t n = ::pread(fd, sample.data(), sample.size(), 0);
            sample.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
            ::close(fd);
        }
        pre.push_back({lf->remote_path, lf->size, sample});
    }
    const auto modes = pre.empty() ? std::vector<PreuploadAnswer>() : api.preupload(o.repo, pre);
    std::map<std::string, PreuploadAnswer> mode_of;
    for (const auto& m : modes) mode_of[m.path] = m;
    std::vector<LocalFile*> lfs_files, regular_files;
    for (auto* lf : todo) {
        const auto it = mode_of.find(lf->remote_path);
        if (it == mode_of.end()) {
            report.failed.emplace_back(lf->remote_path, "the Hub's preupload answer does not mention it");
            continue;
        }
        if (it->second.ignore) {
            log("ignored by the repository's .gitignore: " + lf->remote_path);
            continue;
        }
        if (!it->second.lfs && lf->size > kMaxInlineFileBytes) {
            // The Hub sends files over 10 MB through LFS; a server asking for more inline would make
            // the commit (built in memory, base64) as large as the file.
            report.failed.emplace_back(lf->remote_path, "the Hub asks for its " + std::to_string(lf->size) +
                                                            " bytes inline in the commit; mds-hub-sync sends at most " +
                                                            std::to_string(kMaxInlineFileBytes >> 20) + " MiB inline");
            continue;
        }
        (it->second.lfs ? lfs_files : regular_files).push_back(lf);
    }
    std::uint64_t total_bytes = 0;
    for (auto* lf : todo) total_bytes += lf->size;
    Progress progress("files", total_bytes, o.progress, o.progress_interval_s);
    std::mutex mu;
    std::uint64_t done_bytes = 0;
    std::size_t done_files = 0;
    std::set<std::string> lfs_ok;
    if (!lfs_files.empty()) {
        std::vector<std::pair<std::string, std::uint64_t>> objects;
        std::map<std::string, LocalFile*> by_oid;
        for (auto* lf : lfs_files)
            if (by_oid.emplace(lf->digests.sha256, lf).second) objects.emplace_back(lf->digests.sha256, lf->size);
        const auto transfers = api.lfs_batch(o.repo, objects);
        std::atomic<std::size_t> next{0};
        auto worker = [&]() {
            HttpClient client(o.http);
            HubApi wapi(client, endpoint);
            for (std::size_t i = next++; i < transfers.size(); i = next++) {
                const LfsTransfer& t = transfers[i];
                const auto it = by_oid.find(t.oid);
                if (it == by_oid.end()) continue;
                LocalFile* lf = it->second;
                std::uint64_t last = 0;
                try {
                    wapi.upload_lfs(t, lf->abs, [&](std::uint64_t sent) {
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
                    log((t.needed ? "uploaded " : "already on the Hub: ") + lf->remote_path);
                } catch (const std::exception& e) {
                    std::lock_guard<std::mutex> g(mu);
                    report.failed.emplace_back(lf->remote_path, e.what());
                }
            }
        };
        std::vector<std::thread> threads;
        const int n = std::max(1, std::min<int>(o.jobs, static_cast<int>(transfers.size())));
        for (int i = 0; i < n; ++i) threads.emplace_back(worker);
        for (auto& t : threads) t.join();
    }

    // 4. Commits of at most max_files_per_commit files, each on top of the last (parentCommit).
    std::vector<CommitFile> ready;
    std::vector<LocalFile*> ready_files;
    for (auto* lf : regular_files) {
        ready.push_back({CommitFile::Kind::regular, lf->remote_path, lf->abs, "", lf->size});
        ready_files.push_back(lf);
    }
    for (auto* lf : lfs_files)
        if (lfs_ok.count(lf->digests.sha256)) {
            ready.push_back({CommitFile::Kind::lfs, lf->remote_path, "", lf->digests.sha256, lf->size});
            ready_files.push_back(lf);
        }
    if (o.delete_remote)
        for (const auto& p : report.remote_only) ready.push_back({CommitFile::Kind::deleted, p, "", "", 0});
    // Batches of at most max_files_per_commit files and kMaxInlineCommitBytes of inline content
    // (the commit body is built in memory).
    const std::size_t per = std::max<std::size_t>(1, o.max_files_per_commit);
    for (std::size_t start = 0, end = 0; start < ready.size(); start = end) {
        std::uint64_t inline_bytes = 0;
        for (end = start; end < ready.size() && end - start < per; ++end) {
            const std::uint64_t add = ready[end].kind == CommitFile::Kind::regular ? ready[end].size : 0;
            if (end > start && inline_bytes + add > kMaxInlineCommitBytes) break;
            inline_bytes += add;
        }
        const std::vector<CommitFile> batch(ready.begin() + static_cast<std::ptrdiff_t>(start),
                                            ready.begin() + static_cast<std::ptrdiff_t>(end));
        const std::string msg = o.commit_message.empty()
                                    ? "mds-hub-sync: " + std::to_string(batch.size()) + " file(s)"
                                    : o.commit_message;
        std::string oid;
        try {
        for (int attempt = 1; oid.empty(); ++attempt) {
            try {
                oid = api.commit(o.repo, msg, batch, head);
            } catch (const CommitUncertain& e) {
                // Did it land? Compare the branch with what the batch wanted.
                warn(std::string(e.what()) + "; checking the branch");
                head = api.head(o.repo);
                std::map<std::string, RemoteEntry> now;
                for (auto& en : api.list_tree(o.repo, o.path_in_repo)) now[en.path] = en;
                const bool landed = std::all_of(batch.begin(), batch.end(), [&](const CommitFile& f) {
                    const auto it = now.find(f.path);
                    if (f.kind == CommitFile::Kind::deleted) return it == now.end();
                    if (it == now.end()) return false;
                    if (f.kind == CommitFile::Kind::lfs) return it->second.lfs_sha256 && *it->second.lfs_sha256 == f.sha256;
                    return it->second.oid == git_blob_sha1_hex(read_file_prefix(f.local_path, f.size));
                });
                if (landed) {
                    oid = head.value_or("?");
                    break;
                }
                if (attempt >= 3) throw;
            } catch (const Error& e) {
                // The branch moved (another writer): take its new head and try once more.
                if (attempt < 3 && std::string(e.what()).find("HTTP 412") != std::string::npos) {
                    head = api.head(o.repo);
                    continue;
                }
                throw;
            }
        }
        } catch (const Error& e) {
            for (const auto& f : batch) report.failed.emplace_back(f.path, std::string("not committed: ") + e.what());
            continue;
        }
        head = oid;
        report.commits.push_back(oid);
        for (const auto& f : batch) {
            if (f.kind == CommitFile::Kind::deleted) {
                report.deleted.push_back(f.path);
                continue;
            }
            report.uploaded.push_back(f.path);
        }
        log("commit " + oid.substr(0, 12) + ": " + std::to_string(batch.size()) + " file(s)");
    }
    const std::set<std::string> committed(report.uploaded.begin(), report.uploaded.end());
    for (auto* lf : ready_files)
        if (committed.count(lf->remote_path)) report.uploaded_bytes += lf->size;
    progress.finish();
    return report;
}

}  // namespace mds::hub
