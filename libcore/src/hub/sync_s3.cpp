// mds-hub-sync's S3 destination (sync.h: sync_folder_s3). A run, in order: the local scan (shared
// with the Hub, local_scan.h) and the destination's state (completed objects, unfinished multipart
// uploads), the bucket and its listing, the plan (what differs), multipart uploads started or found
// again, the transfers (`jobs` at once), the completions, the deletions when asked for, and the
// aborts of uploads nobody will finish; the state file is saved whenever an upload id is new.
#include <algorithm>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "hub/local_scan.h"
#include "mds/hub/hash.h"
#include "mds/hub/sync.h"
#include "mds/util/error.h"
#include "mds/util/parallel.h"
#include "mds/util/progress.h"

namespace mds::hub {
namespace {

using detail::LocalFile;
using nlohmann::json;

constexpr std::uint64_t kMinPartSize = 5ull << 20;  // S3's minimum for every part but the last
constexpr std::uint64_t kMaxParts = 10000;
constexpr int kCompleteAttempts = 3;

bool is_md5_etag(const std::string& etag) {
    return etag.size() == 32 && std::all_of(etag.begin(), etag.end(), [](char c) {
               return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
           });
}

// A file going up in parts.
struct Multipart {
    LocalFile* file = nullptr;
    std::uint64_t part_size = 0;
    std::string upload_id;
    std::vector<std::string> etags;  // by part number - 1; empty: not stored yet
    bool failed = false;

    int parts() const { return static_cast<int>(etags.size()); }
    std::uint64_t offset(int number) const { return static_cast<std::uint64_t>(number - 1) * part_size; }
    std::uint64_t length(int number) const { return std::min(part_size, file->size - offset(number)); }
};

struct Task {
    LocalFile* file = nullptr;
    Multipart* multipart = nullptr;  // none: one PUT of the whole file
    int part = 0;
};

// One run against a bucket: options, report, the client on the caller's connection, the local
// files and the destination's section of the state file.
struct S3Run {
    const S3Settings& settings;
    const S3Url& dest;
    const SyncOptions& o;
    SyncReport& report;
    S3Client& s3;
    const std::string& state_path;
    detail::LocalScan& scan;
    std::string list_prefix;     // dest.prefix + "/", or ""
    json* objects = nullptr;     // key → {etag, sha256} as last seen after our upload or check
    json* pending = nullptr;     // key → {upload_id, sha256, size, part_size}: multipart uploads not completed

    void log(const std::string& s) const {
        if (o.log) o.log(s);
    }
    void warn(const std::string& s) const {
        if (o.warn) o.warn(s);
    }
    // The state file now (not in a dry run); a failure only warns: the state saves work, not data.
    void save() const {
        if (o.dry_run) return;
        try {
            detail::save_state(state_path, scan.files, scan.extra);
        } catch (const std::exception& e) {
            warn(std::string("cannot save the state file: ") + e.what());
        }
    }
};

// The destination's section of the state: "objects" and "uploads", as objects. Entries of another
// shape (a damaged or hand-edited state file) are forgotten: they would only save a check or a
// re-sent part.
void tidy_state(json& state) {
    if (!state.is_object()) state = json::object();
    if (!state.contains("objects") || !state["objects"].is_object()) state["objects"] = json::object();
    if (!state.contains("uploads") || !state["uploads"].is_object()) state["uploads"] = json::object();
    json& objects = state["objects"];
    json& pending = state["uploads"];
    for (auto it = objects.begin(); it != objects.end();) {
        const bool good = it->is_object() && it->contains("etag") && (*it)["etag"].is_string() && it->contains("sha256") &&
                          (*it)["sha256"].is_string();
        it = good ? std::next(it) : objects.erase(it);
    }
    for (auto it = pending.begin(); it != pending.end();) {
        const bool good = it->is_object() && it->contains("upload_id") && (*it)["upload_id"].is_string() &&
                          it->contains("sha256") && (*it)["sha256"].is_string() && it->contains("size") &&
                          (*it)["size"].is_number_unsigned() && it->contains("part_size") && (*it)["part_size"].is_number_unsigned();
        it = good ? std::next(it) : pending.erase(it);
    }
}

// Whether the bucket exists, creating it first when asked to (a dry run only says it would).
bool find_or_create_bucket(const S3Run& r) {
    const bool exists = r.s3.bucket_exists(r.dest.bucket);
    if (exists) return true;
    if (!r.o.create_repo)
        throw Error("bucket " + r.dest.bucket + " not found at " + r.settings.endpoint + "; --create-repo creates it");
    if (r.o.dry_run) {
        r.log("would create bucket " + r.dest.bucket);
    } else {
        r.s3.create_bucket(r.dest.bucket);
        r.log("created bucket " + r.dest.bucket);
    }
    return false;
}

// Whether the object holds the file already: the same size and, from the state, the ETag we saw
// after sending this sha256; else its x-amz-meta-sha256, or a single-part ETag equal to the MD5.
bool unchanged(const S3Run& r, const std::map<std::string, S3Object>& remote, const LocalFile& lf) {
    const auto it = remote.find(lf.remote_path);
    if (it == remote.end() || it->second.size != lf.size) return false;
    const std::string& etag = it->second.etag;
    json& objects = *r.objects;
    if (auto c = objects.find(lf.remote_path); c != objects.end() && c->is_object() &&
                                               c->value("etag", std::string()) == etag && c->value("sha256", std::string()) == lf.digests.sha256)
        return true;
    const auto head = r.s3.head(r.dest.bucket, lf.remote_path);
    if (!head || head->size != lf.size) return false;
    const bool same = !head->sha256.empty() ? head->sha256 == lf.digests.sha256
                                            : is_md5_etag(head->etag) && md5_file_range(lf.abs, 0, lf.size) == head->etag;
    if (same) objects[lf.remote_path] = {{"etag", head->etag}, {"sha256", lf.digests.sha256}};
    return same;
}

struct S3Plan {
    std::vector<LocalFile*> todo;
    std::set<std::string> local_keys, unchanged_keys;
};

// The local files to send; the remote objects missing locally (passing the globs) go to
// report.remote_only. A file whose check fails goes to report.failed.
S3Plan plan_changes(const S3Run& r, const std::map<std::string, S3Object>& remote) {
    S3Plan plan;
    for (auto& lf : r.scan.files) {
        plan.local_keys.insert(lf.remote_path);
        try {
            if (unchanged(r, remote, lf)) {
                ++r.report.unchanged;
                plan.unchanged_keys.insert(lf.remote_path);
                continue;
            }
        } catch (const Error& e) {
            r.report.failed.emplace_back(lf.remote_path, e.what());
            continue;
        }
        plan.todo.push_back(&lf);
    }
    for (const auto& [key, obj] : remote) {
        if (plan.local_keys.count(key) || key.back() == '/') continue;  // a "folder" marker is not a file
        if (path_selected(key.substr(r.list_prefix.size()), r.o.include, r.o.exclude)) r.report.remote_only.push_back(key);
    }
    return plan;
}

// Byte and file counts behind the progress line, shared by the transfer workers.
struct Tally {
    explicit Tally(Progress& p) : progress(p) {}
    Progress& progress;
    std::mutex mu;
    std::uint64_t done_bytes = 0;
    std::size_t done_files = 0;
};

// Finds the upload of an earlier run again when it is for the same bytes (its parts whose MD5
// matches the local bytes are kept, and counted as done); aborts it when the file changed since.
void resume_multipart(const S3Run& r, Multipart& m, Tally& tally) {
    const LocalFile* lf = m.file;
    const std::string& key = lf->remote_path;
    json& pending = *r.pending;
    const auto p = pending.find(key);
    if (p == pending.end() || !p->is_object()) return;
    const std::string id = p->value("upload_id", std::string());
    const bool same = p->value("sha256", std::string()) == lf->digests.sha256 && p->value("size", std::uint64_t{0}) == lf->size &&
                      p->value("part_size", std::uint64_t{0}) == m.part_size;
    if (same && !id.empty()) {
        if (auto stored = r.s3.list_parts(r.dest.bucket, key, id)) {
            m.upload_id = id;
            int kept = 0;
            for (const S3Part& sp : *stored) {
                if (sp.number < 1 || sp.number > m.parts() || sp.size != m.length(sp.number)) continue;
                if (md5_file_range(lf->abs, m.offset(sp.number), sp.size) != sp.etag) continue;
                m.etags[static_cast<std::size_t>(sp.number - 1)] = sp.etag;
                tally.done_bytes += sp.size;
                ++kept;
            }
            r.log("resuming " + key + ": " + std::to_string(kept) + " of " + std::to_string(m.parts()) + " parts already stored");
        }
    } else if (!id.empty()) {
        try {  // the file changed since: its old parts are of no use
            r.s3.abort_multipart(r.dest.bucket, key, id);
        } catch (const Error& e) {
            r.warn(std::string("could not abort an old multipart upload: ") + e.what());
        }
    }
}

// A multipart upload for `lf`, resumed or started (and recorded in the state file at once, so that
// a kill leaves it findable); its parts still to send go to `tasks`.
void plan_multipart(const S3Run& r, LocalFile* lf, std::deque<Multipart>& multiparts, std::vector<Task>& tasks,
                    Tally& tally) {
    Multipart& m = multiparts.emplace_back();
    m.file = lf;
    m.part_size = r.o.part_size;
    while ((lf->size + m.part_size - 1) / m.part_size > kMaxParts) m.part_size *= 2;
    m.etags.assign(static_cast<std::size_t>((lf->size + m.part_size - 1) / m.part_size), std::string());
    const std::string& key = lf->remote_path;
    try {
        resume_multipart(r, m, tally);
        if (m.upload_id.empty()) {
            m.upload_id = r.s3.create_multipart(r.dest.bucket, key, lf->digests.sha256);
            (*r.pending)[key] = {{"upload_id", m.upload_id}, {"sha256", lf->digests.sha256}, {"size", lf->size}, {"part_size", m.part_size}};
            r.save();
        }
    } catch (const Error& e) {
        r.report.failed.emplace_back(key, e.what());
        m.failed = true;
        return;
    }
    for (int n = 1; n <= m.parts(); ++n)
        if (m.etags[static_cast<std::size_t>(n - 1)].empty()) tasks.push_back({lf, &m, n});
}

// A transfer worker's own connection, and the client on it.
struct S3Worker {
    HttpClient http;
    S3Client s3;
    S3Worker(const HttpOptions& options, const S3Settings& settings) : http(options), s3(http, settings) {}
};

// The transfers, `jobs` at once: single PUTs and parts. A failed part marks its upload failed (its
// other parts wait for the next run; the stored ones are kept).
void run_transfers(const S3Run& r, const std::vector<Task>& tasks, Tally& tally) {
    std::vector<std::uint64_t> in_flight(static_cast<std::size_t>(std::max(1, r.o.jobs)), 0);  // bytes sent, by worker
    auto show = [&]() {
        std::uint64_t b = tally.done_bytes;
        for (auto f : in_flight) b += f;
        tally.progress.update(tally.done_files, b, b);
    };
    // One connection per worker (a curl handle serves one thread), made on its first task.
    std::vector<std::unique_ptr<S3Worker>> workers(parallel_workers(tasks.size(), r.o.jobs));
    parallel_for_with_worker(tasks.size(), r.o.jobs, [&](std::size_t i, std::size_t slot) {
        if (!workers[slot]) {
            HttpOptions ho = r.o.http;
            ho.on_upload_progress = [&, slot](std::uint64_t sent) {
                std::lock_guard<std::mutex> g(tally.mu);
                in_flight[slot] = sent;
                show();
            };
            workers[slot] = std::make_unique<S3Worker>(ho, r.settings);
        }
        S3Client& ws3 = workers[slot]->s3;
        const Task& t = tasks[i];
        const std::string& key = t.file->remote_path;
        if (t.multipart) {
            std::lock_guard<std::mutex> g(tally.mu);
            if (t.multipart->failed) return;  // another part failed: the rest waits for the next run
        }
        try {
            std::string etag;
            std::uint64_t length = t.file->size;
            if (!t.multipart) {
                etag = ws3.put(r.dest.bucket, key, t.file->abs, t.file->size, t.file->digests.sha256);
            } else {
                length = t.multipart->length(t.part);
                etag = ws3.upload_part(r.dest.bucket, key, t.multipart->upload_id, t.part, t.file->abs, t.multipart->offset(t.part),
                                       length);
            }
            std::lock_guard<std::mutex> g(tally.mu);
            in_flight[slot] = 0;
            tally.done_bytes += length;
            if (!t.multipart) {
                (*r.objects)[key] = {{"etag", etag}, {"sha256", t.file->digests.sha256}};
                r.report.uploaded.push_back(key);
                r.report.uploaded_bytes += length;
                ++tally.done_files;
                r.log("uploaded " + key);
            } else {
                t.multipart->etags[static_cast<std::size_t>(t.part - 1)] = etag;
            }
            show();
        } catch (const Error& e) {
            std::lock_guard<std::mutex> g(tally.mu);
            in_flight[slot] = 0;
            if (!t.multipart) {
                r.report.failed.emplace_back(key, e.what());
            } else if (!t.multipart->failed) {
                t.multipart->failed = true;
                r.report.failed.emplace_back(key, std::string(e.what()) + " (the parts stored so far are kept for the next run)");
            }
        }
    });
}

// CompleteMultipartUpload; returns the object's ETag. A lost answer is checked against the object
// before trying again (and not tried again once the upload is gone).
std::string complete_with_check(const S3Run& r, const Multipart& m) {
    const std::string& key = m.file->remote_path;
    std::vector<S3Part> parts;
    for (int n = 1; n <= m.parts(); ++n) parts.push_back({n, m.length(n), m.etags[static_cast<std::size_t>(n - 1)]});
    for (int attempt = 1;; ++attempt) {
        try {
            return r.s3.complete_multipart(r.dest.bucket, key, m.upload_id, parts);
        } catch (const S3Uncertain& e) {
            r.warn(std::string(e.what()) + "; checking the object");
            const auto head = r.s3.head(r.dest.bucket, key);
            if (head && head->size == m.file->size && head->sha256 == m.file->digests.sha256) return head->etag;
            if (attempt >= kCompleteAttempts || !r.s3.list_parts(r.dest.bucket, key, m.upload_id)) throw;
        }
    }
}

// The completions of the multipart uploads whose parts all went up.
void complete_multiparts(const S3Run& r, std::deque<Multipart>& multiparts, Tally& tally) {
    for (Multipart& m : multiparts) {
        if (m.failed) continue;
        const std::string& key = m.file->remote_path;
        std::string etag;
        try {
            etag = complete_with_check(r, m);
        } catch (const Error& e) {
            r.report.failed.emplace_back(key, e.what());
            continue;
        }
        (*r.objects)[key] = {{"etag", etag}, {"sha256", m.file->digests.sha256}};
        r.pending->erase(key);
        r.report.uploaded.push_back(key);
        r.report.uploaded_bytes += m.file->size;
        ++tally.done_files;
        tally.progress.update(tally.done_files, tally.done_bytes, tally.done_bytes);
        r.log("uploaded " + key + " (" + std::to_string(m.parts()) + " parts)");
    }
}

// The remote objects missing locally, deleted (only called with delete_remote).
void delete_remote_only(const S3Run& r) {
    for (const auto& key : r.report.remote_only) {
        try {
            r.s3.delete_object(r.dest.bucket, key);
            r.report.deleted.push_back(key);
            r.objects->erase(key);
            r.pending->erase(key);
            r.log("deleted " + key);
        } catch (const Error& e) {
            r.report.failed.emplace_back(key, std::string("not deleted: ") + e.what());
        }
    }
}

// Unfinished uploads of files that are gone, or already stored (a run killed while completing),
// would wait for ever: abort them.
void abort_orphan_uploads(const S3Run& r, const S3Plan& plan) {
    json& pending = *r.pending;
    for (auto it = pending.begin(); it != pending.end();) {
        const std::string rel = it.key().substr(std::min(it.key().size(), r.list_prefix.size()));
        const bool stored = plan.unchanged_keys.count(it.key()) > 0;
        std::error_code ec;
        if (!stored && (plan.local_keys.count(it.key()) || std::filesystem::exists(std::filesystem::path(r.o.local_dir) / rel, ec))) {
            ++it;
            continue;
        }
        try {
            r.s3.abort_multipart(r.dest.bucket, it.key(), it->value("upload_id", std::string()));
            it = pending.erase(it);
        } catch (const Error& e) {
            r.warn(std::string("could not abort an old multipart upload: ") + e.what());
            ++it;
        }
    }
}

}  // namespace

SyncReport sync_folder_s3(const S3Settings& settings, const S3Url& dest, const SyncOptions& o) {
    SyncReport report;
    report.dry_run = o.dry_run;
    detail::check_local_dir(o.local_dir);
    if (o.part_size < kMinPartSize) throw UsageError("the S3 part size must be at least 5 MiB");
    const std::string state_path =
        o.state_file.empty() ? detail::default_state_file(o.local_dir, "s3-" + dest.bucket + (dest.prefix.empty() ? "" : "-" + dest.prefix))
                             : o.state_file;
    detail::RunLock lock(detail::prepare_state(state_path, o.dry_run));

    // 1. The local files, with digests, and the destination's state.
    detail::LocalScan scan = detail::scan_local(o, state_path, dest.prefix, report);
    tidy_state(scan.extra);

    // 2. The bucket's side, and what differs.
    HttpClient http(o.http);
    S3Client s3(http, settings);
    S3Run run{settings, dest, o, report, s3, state_path, scan, dest.prefix.empty() ? "" : dest.prefix + "/",
              &scan.extra["objects"], &scan.extra["uploads"]};
    std::map<std::string, S3Object> remote;
    if (find_or_create_bucket(run))
        for (auto& obj : s3.list(dest.bucket, run.list_prefix)) remote[obj.key] = std::move(obj);
    const S3Plan plan = plan_changes(run, remote);
    if (o.dry_run) {
        detail::report_dry_run(plan.todo, o, report);
        return report;
    }

    // 3. Plan: single PUTs, and multipart uploads started or found again (their stored parts are
    //    kept when their MD5 matches the local bytes).
    std::uint64_t total_bytes = 0;
    for (auto* lf : plan.todo) total_bytes += lf->size;
    Progress progress("files", total_bytes, o.progress, o.progress_interval_s);
    Tally tally{progress};
    std::deque<Multipart> multiparts;  // a deque: tasks point into it
    std::vector<Task> tasks;
    for (auto* lf : plan.todo) {
        if (lf->size <= o.part_size) tasks.push_back({lf, nullptr, 0});
        else plan_multipart(run, lf, multiparts, tasks, tally);
    }
    progress.update(0, tally.done_bytes, tally.done_bytes);

    // 4. The transfers, `jobs` at once; 5. the completions; 6. deletions, only when asked.
    run_transfers(run, tasks, tally);
    complete_multiparts(run, multiparts, tally);
    if (o.delete_remote) delete_remote_only(run);
    abort_orphan_uploads(run, plan);
    run.save();
    progress.finish();
    std::sort(report.uploaded.begin(), report.uploaded.end());
    return report;
}

}  // namespace mds::hub
