// mds-hub-sync's S3 destination (sync.h: sync_folder_s3).
#include <algorithm>
#include <atomic>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "hub/local_scan.h"
#include "mds/hub/hash.h"
#include "mds/hub/sync.h"
#include "mds/util/error.h"
#include "mds/util/progress.h"

namespace mds::hub {
namespace {

using detail::LocalFile;
using nlohmann::json;

constexpr std::uint64_t kMinPartSize = 5ull << 20;  // S3's minimum for every part but the last
constexpr std::uint64_t kMaxParts = 10000;

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

}  // namespace

SyncReport sync_folder_s3(const S3Settings& settings, const S3Url& dest, const SyncOptions& o) {
    auto log = [&](const std::string& s) {
        if (o.log) o.log(s);
    };
    auto warn = [&](const std::string& s) {
        if (o.warn) o.warn(s);
    };
    SyncReport report;
    report.dry_run = o.dry_run;
    detail::check_local_dir(o.local_dir);
    if (o.part_size < kMinPartSize) throw UsageError("the S3 part size must be at least 5 MiB");
    const std::string state_path =
        o.state_file.empty() ? detail::default_state_file(o.local_dir, "s3-" + dest.bucket + (dest.prefix.empty() ? "" : "-" + dest.prefix))
                             : o.state_file;
    detail::RunLock lock(detail::prepare_state(state_path, o.dry_run));

    // 1. The local files, with digests.
    detail::LocalScan scan = detail::scan_local(o, state_path, dest.prefix, report);
    json& state = scan.extra;
    if (!state.is_object()) state = json::object();
    if (!state.contains("objects") || !state["objects"].is_object()) state["objects"] = json::object();
    if (!state.contains("uploads") || !state["uploads"].is_object()) state["uploads"] = json::object();
    json& objects = state["objects"];  // key → {etag, sha256} as last seen after our upload or check
    json& pending = state["uploads"];  // key → {upload_id, sha256, size, part_size}: multipart uploads not completed
    // Entries of another shape (a damaged or hand-edited state file) are forgotten: they would only
    // save a check or a re-sent part.
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
    auto save = [&]() {
        if (o.dry_run) return;
        try {
            detail::save_state(state_path, scan.files, state);
        } catch (const std::exception& e) {
            warn(std::string("cannot save the state file: ") + e.what());
        }
    };

    // 2. The bucket's side.
    HttpClient http(o.http);
    S3Client s3(http, settings);
    const bool bucket_exists = s3.bucket_exists(dest.bucket);
    if (!bucket_exists) {
        if (!o.create_repo)
            throw Error("bucket " + dest.bucket + " not found at " + settings.endpoint + "; --create-repo creates it");
        if (o.dry_run) {
            log("would create bucket " + dest.bucket);
        } else {
            s3.create_bucket(dest.bucket);
            log("created bucket " + dest.bucket);
        }
    }
    const std::string list_prefix = dest.prefix.empty() ? "" : dest.prefix + "/";
    std::map<std::string, S3Object> remote;
    if (bucket_exists)
        for (auto& obj : s3.list(dest.bucket, list_prefix)) remote[obj.key] = std::move(obj);

    auto unchanged = [&](const LocalFile& lf) {
        const auto it = remote.find(lf.remote_path);
        if (it == remote.end() || it->second.size != lf.size) return false;
        const std::string& etag = it->second.etag;
        if (auto c = objects.find(lf.remote_path); c != objects.end() && c->is_object() &&
                                                   c->value("etag", std::string()) == etag && c->value("sha256", std::string()) == lf.digests.sha256)
            return true;
        const auto head = s3.head(dest.bucket, lf.remote_path);
        if (!head || head->size != lf.size) return false;
        const bool same = !head->sha256.empty() ? head->sha256 == lf.digests.sha256
                                                : is_md5_etag(head->etag) && md5_file_range(lf.abs, 0, lf.size) == head->etag;
        if (same) objects[lf.remote_path] = {{"etag", head->etag}, {"sha256", lf.digests.sha256}};
        return same;
    };
    std::vector<LocalFile*> todo;
    std::set<std::string> local_keys, unchanged_keys;
    for (auto& lf : scan.files) {
        local_keys.insert(lf.remote_path);
        try {
            if (unchanged(lf)) {
                ++report.unchanged;
                unchanged_keys.insert(lf.remote_path);
                continue;
            }
        } catch (const Error& e) {
            report.failed.emplace_back(lf.remote_path, e.what());
            continue;
        }
        todo.push_back(&lf);
    }
    for (const auto& [key, obj] : remote) {
        if (local_keys.count(key) || key.back() == '/') continue;  // a "folder" marker is not a file
        if (path_selected(key.substr(list_prefix.size()), o.include, o.exclude)) report.remote_only.push_back(key);
    }

    if (o.dry_run) {
        detail::report_dry_run(todo, o, report);
        return report;
    }

    // 3. Plan: single PUTs, and multipart uploads started or found again (their stored parts are
    //    kept when their MD5 matches the local bytes).
    std::uint64_t total_bytes = 0;
    for (auto* lf : todo) total_bytes += lf->size;
    Progress progress("files", total_bytes, o.progress, o.progress_interval_s);
    std::mutex mu;
    std::uint64_t done_bytes = 0;
    std::size_t done_files = 0;
    std::deque<Multipart> multiparts;
    std::vector<Task> tasks;
    for (auto* lf : todo) {
        if (lf->size <= o.part_size) {
            tasks.push_back({lf, nullptr, 0});
            continue;
        }
        Multipart& m = multiparts.emplace_back();
        m.file = lf;
        m.part_size = o.part_size;
        while ((lf->size + m.part_size - 1) / m.part_size > kMaxParts) m.part_size *= 2;
        m.etags.assign(static_cast<std::size_t>((lf->size + m.part_size - 1) / m.part_size), std::string());
        const std::string& key = lf->remote_path;
        try {
            if (auto p = pending.find(key); p != pending.end() && p->is_object()) {
                const std::string id = p->value("upload_id", std::string());
                const bool same = p->value("sha256", std::string()) == lf->digests.sha256 &&
                                  p->value("size", std::uint64_t{0}) == lf->size && p->value("part_size", std::uint64_t{0}) == m.part_size;
                if (same && !id.empty()) {
                    if (auto stored = s3.list_parts(dest.bucket, key, id)) {
                        m.upload_id = id;
                        int kept = 0;
                        for (const S3Part& sp : *stored) {
                            if (sp.number < 1 || sp.number > m.parts() || sp.size != m.length(sp.number)) continue;
                            if (md5_file_range(lf->abs, m.offset(sp.number), sp.size) != sp.etag) continue;
                            m.etags[static_cast<std::size_t>(sp.number - 1)] = sp.etag;
                            done_bytes += sp.size;
                            ++kept;
                        }
                        log("resuming " + key + ": " + std::to_string(kept) + " of " + std::to_string(m.parts()) + " parts already stored");
                    }
                } else if (!id.empty()) {
                    try {  // the file changed since: its old parts are of no use
                        s3.abort_multipart(dest.bucket, key, id);
                    } catch (const Error& e) {
                        warn(std::string("could not abort an old multipart upload: ") + e.what());
                    }
                }
            }
            if (m.upload_id.empty()) {
                m.upload_id = s3.create_multipart(dest.bucket, key, lf->digests.sha256);
                pending[key] = {{"upload_id", m.upload_id}, {"sha256", lf->digests.sha256}, {"size", lf->size}, {"part_size", m.part_size}};
                save();
            }
        } catch (const Error& e) {
            report.failed.emplace_back(key, e.what());
            m.failed = true;
            continue;
        }
        for (int n = 1; n <= m.parts(); ++n)
            if (m.etags[static_cast<std::size_t>(n - 1)].empty()) tasks.push_back({lf, &m, n});
    }
    progress.update(0, done_bytes, done_bytes);

    // 4. The transfers, `jobs` at once.
    std::atomic<std::size_t> next{0};
    std::vector<std::uint64_t> in_flight(static_cast<std::size_t>(std::max(1, o.jobs)), 0);
    auto show = [&]() {
        std::uint64_t b = done_bytes;
        for (auto f : in_flight) b += f;
        progress.update(done_files, b, b);
    };
    auto worker = [&](std::size_t slot) {
        HttpOptions ho = o.http;
        ho.on_upload_progress = [&, slot](std::uint64_t sent) {
            std::lock_guard<std::mutex> g(mu);
            in_flight[slot] = sent;
            show();
        };
        HttpClient client(ho);
        S3Client ws3(client, settings);
        for (std::size_t i = next++; i < tasks.size(); i = next++) {
            const Task& t = tasks[i];
            const std::string& key = t.file->remote_path;
            if (t.multipart) {
                std::lock_guard<std::mutex> g(mu);
                if (t.multipart->failed) continue;  // another part failed: the rest waits for the next run
            }
            try {
                std::string etag;
                std::uint64_t length = t.file->size;
                if (!t.multipart) {
                    etag = ws3.put(dest.bucket, key, t.file->abs, t.file->size, t.file->digests.sha256);
                } else {
                    length = t.multipart->length(t.part);
                    etag = ws3.upload_part(dest.bucket, key, t.multipart->upload_id, t.part, t.file->abs,
                                           t.multipart->offset(t.part), length);
                }
                std::lock_guard<std::mutex> g(mu);
                in_flight[slot] = 0;
                done_bytes += length;
                if (!t.multipart) {
                    objects[key] = {{"etag", etag}, {"sha256", t.file->digests.sha256}};
                    report.uploaded.push_back(key);
                    report.uploaded_bytes += length;
                    ++done_files;
                    log("uploaded " + key);
                } else {
                    t.multipart->etags[static_cast<std::size_t>(t.part - 1)] = etag;
                }
                show();
            } catch (const Error& e) {
                std::lock_guard<std::mutex> g(mu);
                in_flight[slot] = 0;
                if (!t.multipart) {
                    report.failed.emplace_back(key, e.what());
                } else if (!t.multipart->failed) {
                    t.multipart->failed = true;
                    report.failed.emplace_back(key, std::string(e.what()) + " (the parts stored so far are kept for the next run)");
                }
            }
        }
    };
    std::vector<std::thread> threads;
    const std::size_t n_threads = std::min<std::size_t>(in_flight.size(), std::max<std::size_t>(1, tasks.size()));
    for (std::size_t i = 0; i < n_threads; ++i) threads.emplace_back(worker, i);
    for (auto& t : threads) t.join();

    // 5. Completions. A lost answer is checked against the object before trying again.
    for (Multipart& m : multiparts) {
        if (m.failed) continue;
        const std::string& key = m.file->remote_path;
        std::vector<S3Part> parts;
        for (int n = 1; n <= m.parts(); ++n) parts.push_back({n, m.length(n), m.etags[static_cast<std::size_t>(n - 1)]});
        std::string etag;
        try {
            for (int attempt = 1;; ++attempt) {
                try {
                    etag = s3.complete_multipart(dest.bucket, key, m.upload_id, parts);
                    break;
                } catch (const S3Uncertain& e) {
                    warn(std::string(e.what()) + "; checking the object");
                    const auto head = s3.head(dest.bucket, key);
                    if (head && head->size == m.file->size && head->sha256 == m.file->digests.sha256) {
                        etag = head->etag;
                        break;
                    }
                    if (attempt >= 3 || !s3.list_parts(dest.bucket, key, m.upload_id)) throw;
                }
            }
        } catch (const Error& e) {
            report.failed.emplace_back(key, e.what());
            continue;
        }
        objects[key] = {{"etag", etag}, {"sha256", m.file->digests.sha256}};
        pending.erase(key);
        report.uploaded.push_back(key);
        report.uploaded_bytes += m.file->size;
        ++done_files;
        progress.update(done_files, done_bytes, done_bytes);
        log("uploaded " + key + " (" + std::to_string(m.parts()) + " parts)");
    }

    // 6. Deletions, only when asked.
    if (o.delete_remote) {
        for (const auto& key : report.remote_only) {
            try {
                s3.delete_object(dest.bucket, key);
                report.deleted.push_back(key);
                objects.erase(key);
                pending.erase(key);
                log("deleted " + key);
            } catch (const Error& e) {
                report.failed.emplace_back(key, std::string("not deleted: ") + e.what());
            }
        }
    }
    // Unfinished uploads of files that are gone, or already stored (a run killed while completing),
    // would wait for ever: abort them.
    for (auto it = pending.begin(); it != pending.end();) {
        const std::string rel = it.key().substr(std::min(it.key().size(), list_prefix.size()));
        const bool stored = unchanged_keys.count(it.key()) > 0;
        std::error_code ec;
        if (!stored && (local_keys.count(it.key()) || std::filesystem::exists(std::filesystem::path(o.local_dir) / rel, ec))) {
            ++it;
            continue;
        }
        try {
            s3.abort_multipart(dest.bucket, it.key(), it->value("upload_id", std::string()));
            it = pending.erase(it);
        } catch (const Error& e) {
            warn(std::string("could not abort an old multipart upload: ") + e.what());
            ++it;
        }
    }
    save();
    progress.finish();
    std::sort(report.uploaded.begin(), report.uploaded.end());
    return report;
}

}  // namespace mds::hub
