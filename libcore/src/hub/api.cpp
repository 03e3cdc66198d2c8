// The Hub's HTTP API (api.h).
#include "mds/hub/api.h"
#include "mds/hub/s3.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <set>

#include "mds/hub/hash.h"
#include "mds/util/json_limits.h"
#include "mds/util/base64.h"
#include "mds/util/files.h"
#include "mds/util/safe_paths.h"  // printable

namespace mds::hub {
namespace {

using nlohmann::json;

const char* kLfsMime = "application/vnd.git-lfs+json";

json parse_json(const HttpResponse& r, const std::string& what) {
    try {
        check_json_depth(r.body, what + ": the Hub's answer");
        return json::parse(r.body);
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        throw Error(what + ": the Hub's answer is not JSON (" + printable(e.what(), 200) + "): " + r.describe());
    }
}

// "<what> failed: <answer> (after N attempts)[; check the token ...]", with the answer's status.
HttpError failure(const std::string& what, const HttpResponse& r) {
    std::string msg = what + " failed: " + r.describe();
    if (r.attempts > 1) msg += " (after " + std::to_string(r.attempts) + " attempts)";
    if (r.status == 401 || r.status == 403) msg += "; check the token (HF_TOKEN) and its write access";
    return HttpError(msg, r.status);
}

// A repository's listing stops here: the Hub allows far fewer files per repository (100,000 are
// advised), so more is a server that pages without end.
constexpr std::size_t kMaxTreeEntries = 10'000'000;

std::string str(const json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::uint64_t u64(const json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>()
           : it != j.end() && it->is_number_integer() && it->get<std::int64_t>() >= 0 ? static_cast<std::uint64_t>(it->get<std::int64_t>())
                                                                                    : 0;
}

std::vector<std::pair<std::string, std::string>> header_pairs(const json& h) {
    std::vector<std::pair<std::string, std::string>> out;
    if (!h.is_object()) return out;
    for (const auto& [k, v] : h.items())
        if (v.is_string()) out.emplace_back(k, v.get<std::string>());
    return out;
}

// Link: <https://...>; rel="next"
std::string next_link(const HttpResponse& r) {
    const std::string link = r.header("link");
    std::size_t pos = 0;
    while (pos < link.size()) {
        const auto lt = link.find('<', pos);
        const auto gt = link.find('>', lt);
        if (lt == std::string::npos || gt == std::string::npos) break;
        const auto end = link.find(',', gt);
        const std::string params = link.substr(gt + 1, end == std::string::npos ? std::string::npos : end - gt - 1);
        if (params.find("rel=\"next\"") != std::string::npos || params.find("rel=next") != std::string::npos)
            return link.substr(lt + 1, gt - lt - 1);
        if (end == std::string::npos) break;
        pos = end + 1;
    }
    return {};
}

}  // namespace

std::string api_collection(const std::string& type) {
    if (type == "model") return "models";
    if (type == "dataset") return "datasets";
    if (type == "space") return "spaces";
    throw UsageError("repository type '" + type + "': expected model, dataset or space");
}

std::string web_prefix(const std::string& type) { return type == "model" ? "" : api_collection(type) + "/"; }

std::string url_quote(const std::string& s, bool keep_slash) { return uri_encode(s, keep_slash); }

HubApi::HubApi(HttpClient& http, std::string endpoint) : http_(http), endpoint_(std::move(endpoint)) {
    while (!endpoint_.empty() && endpoint_.back() == '/') endpoint_.pop_back();
    check_url_allowed(endpoint_);
}

std::string HubApi::api(const RepoRef& repo) const {
    return endpoint_ + "/api/" + api_collection(repo.type) + "/" + repo.id;
}

HttpResponse HubApi::call(HttpRequest request, const std::string& what) {
    request.what = what;
    HttpResponse r = http_.send(request);
    if (!r.ok()) throw failure(what, r);
    return r;
}

std::string HubApi::whoami() {
    HttpRequest req;
    req.url = endpoint_ + "/api/whoami-v2";
    req.max_answer_bytes = kMaxSmallAnswerBytes;
    const auto j = parse_json(call(req, "whoami"), "whoami");
    return str(j, "name");
}

bool HubApi::create_repo(const RepoRef& repo, bool private_repo) {
    const auto slash = repo.id.find('/');
    json body = {{"name", slash == std::string::npos ? repo.id : repo.id.substr(slash + 1)},
                 {"organization", slash == std::string::npos ? json(nullptr) : json(repo.id.substr(0, slash))},
                 {"private", private_repo}};
    if (repo.type != "model") body["type"] = repo.type;
    HttpRequest req;
    req.method = "POST";
    req.url = endpoint_ + "/api/repos/create";
    req.headers = {{"Content-Type", "application/json"}};
    req.body = body.dump();
    req.what = "create repository " + repo.id;
    req.max_answer_bytes = kMaxSmallAnswerBytes;
    const HttpResponse r = http_.send(req);
    if (r.ok()) return true;
    if (r.status == 409 && r.body.find("conflicting operation") == std::string::npos) return false;  // exists
    throw failure("create repository " + repo.id, r);
}

std::optional<std::string> HubApi::head(const RepoRef& repo) {
    HttpRequest req;
    req.url = api(repo) + "/revision/" + url_quote(repo.revision);
    req.what = "revision " + repo.revision + " of " + repo.id;
    const HttpResponse r = http_.send(req);
    if (r.status == 404) return std::nullopt;
    if (!r.ok()) throw failure(req.what, r);
    const std::string sha = str(parse_json(r, req.what), "sha");
    if (sha.empty()) throw Error(req.what + ": the answer has no commit sha");
    return sha;
}

std::vector<RemoteEntry> HubApi::list_tree(const RepoRef& repo, const std::string& path_in_repo) {
    std::vector<RemoteEntry> out;
    std::string url = api(repo) + "/tree/" + url_quote(repo.revision) +
                      (path_in_repo.empty() ? "" : "/" + url_quote(path_in_repo, true)) + "?recursive=true&expand=false";
    const std::string what = "list files of " + repo.id;
    std::set<std::string> seen;  // pages already read: a "next" link back to one is a loop
    while (!url.empty()) {
        if (!seen.insert(url).second)
            throw Error(what + ": the Hub's pages loop (the next page is " + url_for_message(url) + ", already read)");
        HttpRequest req;
        req.url = url;
        req.what = what;
        req.max_answer_bytes = kMaxApiAnswerBytes;  // the Hub pages by 1,000 entries (~300 KB)
        const HttpResponse r = http_.send(req);
        if (r.status == 404 && out.empty()) return out;  // a folder not there yet
        if (!r.ok()) throw failure(what, r);
        const json j = parse_json(r, what);
        if (!j.is_array()) throw Error(what + ": expected a JSON list");
        for (const auto& e : j) {
            RemoteEntry re;
            re.path = str(e, "path");
            re.directory = str(e, "type") == "directory";
            re.size = u64(e, "size");
            re.oid = str(e, "oid");
            if (auto l = e.find("lfs"); l != e.end() && l->is_object()) re.lfs_sha256 = str(*l, "oid");
            out.push_back(std::move(re));
        }
        if (out.size() > kMaxTreeEntries)
            throw Error(what + ": more than " + std::to_string(kMaxTreeEntries) + " entries; the Hub's listing does not end");
        url = next_link(r);
        if (!url.empty()) check_url_allowed(url);
    }
    return out;
}

std::vector<PreuploadAnswer> HubApi::preupload(const RepoRef& repo, const std::vector<PreuploadFile>& files) {
    std::vector<PreuploadAnswer> out;
    for (std::size_t start = 0; start < files.size(); start += 256) {  // the client's chunk size
        json arr = json::array();
        for (std::size_t i = start; i < std::min(files.size(), start + 256); ++i)
            arr.push_back({{"path", files[i].path}, {"sample", base64_encode(files[i].sample)}, {"size", files[i].size}});
        HttpRequest req;
        req.method = "POST";
        req.url = api(repo) + "/preupload/" + url_quote(repo.revision);
        req.headers = {{"Content-Type", "application/json"}};
        req.body = json{{"files", arr}}.dump();
        const json j = parse_json(call(req, "preupload to " + repo.id), "preupload");
        const auto list = j.find("files");
        if (list == j.end() || !list->is_array()) throw Error("preupload to " + repo.id + ": no \"files\" in the answer");
        for (const auto& f : *list) {
            PreuploadAnswer a;
            a.path = str(f, "path");
            a.lfs = str(f, "uploadMode") == "lfs";
            if (auto ig = f.find("shouldIgnore"); ig != f.end() && ig->is_boolean()) a.ignore = ig->get<bool>();
            if (auto o = f.find("oid"); o != f.end() && o->is_string()) a.remote_oid = o->get<std::string>();
            out.push_back(std::move(a));
        }
    }
    return out;
}

std::vector<LfsTransfer> HubApi::lfs_batch(const RepoRef& repo,
                                           const std::vector<std::pair<std::string, std::uint64_t>>& objects) {
    std::vector<LfsTransfer> out;
    for (std::size_t start = 0; start < objects.size(); start += 256) {
        json objs = json::array();
        for (std::size_t i = start; i < std::min(objects.size(), start + 256); ++i)
            objs.push_back({{"oid", objects[i].first}, {"size", objects[i].second}});
        json body = {{"operation", "upload"},
                     {"transfers", {"basic", "multipart"}},
                     {"objects", objs},
                     {"hash_algo", "sha256"},
                     {"ref", {{"name", repo.revision}}}};
        HttpRequest req;
        req.method = "POST";
        req.url = endpoint_ + "/" + web_prefix(repo.type) + repo.id + ".git/info/lfs/objects/batch";
        req.headers = {{"Accept", kLfsMime}, {"Content-Type", kLfsMime}};
        req.body = body.dump();
        req.max_answer_bytes = kMaxLargeAnswerBytes;  // part URLs of up to 256 multipart objects
        const json j = parse_json(call(req, "LFS batch for " + repo.id), "LFS batch");
        const auto list = j.find("objects");
        if (list == j.end() || !list->is_array()) throw Error("LFS batch for " + repo.id + ": no \"objects\" in the answer");
        for (const auto& o : *list) {
            LfsTransfer t;
            t.oid = str(o, "oid");
            t.size = u64(o, "size");
            if (auto e = o.find("error"); e != o.end() && e->is_object())
                t.error = printable(str(*e, "message"), 300) + " (" + std::to_string(u64(*e, "code")) + ")";
            if (auto a = o.find("actions"); a != o.end() && a->is_object()) {
                if (auto up = a->find("upload"); up != a->end() && up->is_object()) {
                    t.needed = true;
                    t.upload_href = str(*up, "href");
                    if (auto h = up->find("header"); h != up->end()) t.upload_header = header_pairs(*h);
                }
                if (auto v = a->find("verify"); v != a->end() && v->is_object()) {
                    t.verify_href = str(*v, "href");
                    if (auto h = v->find("header"); h != v->end()) t.verify_header = header_pairs(*h);
                }
            }
            out.push_back(std::move(t));
        }
    }
    return out;
}

void HubApi::upload_lfs(const LfsTransfer& t, const std::string& local_path,
                        const std::function<void(std::uint64_t)>& progress) {
    if (!t.error.empty()) throw Error("LFS object " + t.oid + " of " + local_path + ": " + t.error);
    if (!t.needed) return;
    if (file_size(local_path) < t.size)
        throw Error(local_path + " is shorter than when it was hashed (" + std::to_string(t.size) +
                    " bytes): it was truncated or replaced");
    std::uint64_t chunk = 0;
    std::vector<std::pair<std::string, std::string>> parts;  // "00001" → URL
    for (const auto& [k, v] : t.upload_header) {
        if (k == "chunk_size") {
            chunk = std::strtoull(v.c_str(), nullptr, 10);
        } else if (!k.empty() && std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; })) {
            parts.emplace_back(k, v);
        }
    }
    if (chunk == 0) {  // basic transfer: one PUT of the whole file
        HttpRequest req;
        req.method = "PUT";
        req.url = t.upload_href;
        req.authorize = false;
        req.headers = t.upload_header;
        req.body_file = local_path;
        req.body_length = t.size;
        req.max_answer_bytes = kMaxSmallAnswerBytes;
        call(req, "upload of " + local_path);
        if (progress) progress(t.size);
    } else {
        std::sort(parts.begin(), parts.end());
        const std::uint64_t expected = (t.size + chunk - 1) / chunk;
        if (parts.size() != expected)
            throw Error("LFS multipart for " + local_path + ": " + std::to_string(parts.size()) + " part URLs for " +
                        std::to_string(expected) + " parts of " + std::to_string(chunk) + " bytes");
        json done = json::array();
        std::uint64_t sent = 0;
        for (std::size_t i = 0; i < parts.size(); ++i) {
            HttpRequest req;
            req.method = "PUT";
            req.url = parts[i].second;
            req.authorize = false;
            req.body_file = local_path;
            req.body_offset = i * chunk;
            req.body_length = std::min(chunk, t.size - req.body_offset);
            req.max_answer_bytes = kMaxSmallAnswerBytes;
            const HttpResponse r = call(req, "part " + std::to_string(i + 1) + "/" + std::to_string(parts.size()) + " of " + local_path);
            std::string etag = r.header("etag");
            if (etag.empty()) throw Error("part " + std::to_string(i + 1) + " of " + local_path + ": no ETag in the answer");
            done.push_back({{"partNumber", i + 1}, {"etag", etag}});
            sent += req.body_length;
            if (progress) progress(sent);
        }
        HttpRequest req;
        req.method = "POST";
        req.url = t.upload_href;
        req.authorize = false;
        req.headers = {{"Accept", kLfsMime}, {"Content-Type", kLfsMime}};
        req.body = json{{"oid", t.oid}, {"parts", done}}.dump();
        req.max_answer_bytes = kMaxSmallAnswerBytes;
        call(req, "completion of the multipart upload of " + local_path);
    }
    if (!t.verify_href.empty()) {
        HttpRequest req;
        req.method = "POST";
        req.url = t.verify_href;
        req.headers = t.verify_header;
        req.headers.emplace_back("Accept", kLfsMime);
        req.headers.emplace_back("Content-Type", kLfsMime);
        req.body = json{{"oid", t.oid}, {"size", t.size}}.dump();
        req.max_answer_bytes = kMaxSmallAnswerBytes;
        call(req, "verify of " + local_path);
    }
}

std::string HubApi::commit(const RepoRef& repo, const std::string& summary, const std::vector<CommitFile>& files,
                           const std::optional<std::string>& parent) {
    json header = {{"summary", summary}, {"description", ""}};
    if (parent) header["parentCommit"] = *parent;
    std::string ndjson = json{{"key", "header"}, {"value", header}}.dump() + "\n";
    for (const auto& f : files) {
        json line;
        switch (f.kind) {
            case CommitFile::Kind::regular:
                line = {{"key", "file"},
                        {"value", {{"content", base64_encode(read_file_prefix(f.local_path, f.size))}, {"path", f.path}, {"encoding", "base64"}}}};
                break;
            case CommitFile::Kind::lfs:
                line = {{"key", "lfsFile"}, {"value", {{"path", f.path}, {"algo", "sha256"}, {"oid", f.sha256}, {"size", f.size}}}};
                break;
            case CommitFile::Kind::deleted:
                line = {{"key", "deletedFile"}, {"value", {{"path", f.path}}}};
                break;
        }
        ndjson += line.dump() + "\n";
    }
    HttpRequest req;
    req.method = "POST";
    req.url = api(repo) + "/commit/" + url_quote(repo.revision);
    req.headers = {{"Content-Type", "application/x-ndjson"}};
    req.body = std::move(ndjson);
    req.retry = false;
    req.what = "commit to " + repo.id;
    req.max_answer_bytes = kMaxSmallAnswerBytes;
    const HttpResponse r = http_.send(req);
    if (r.status == 0 || r.status >= 500)
        throw CommitUncertain("commit to " + repo.id + " of " + std::to_string(files.size()) +
                              " file(s): no clear answer (" + r.describe() + "); the Hub may have applied it");
    if (!r.ok()) throw HttpError("commit to " + repo.id + " failed: " + r.describe(), r.status);  // 412: the branch moved
    const std::string oid = str(parse_json(r, "commit"), "commitOid");
    if (oid.empty()) throw Error("commit to " + repo.id + ": the answer has no commitOid");
    return oid;
}

}  // namespace mds::hub
