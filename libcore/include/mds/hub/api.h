// The Hugging Face Hub's HTTP API as mds-hub-sync uses it (specs/ops.md §2.2): repository
// creation, the branch head, the file tree, preupload (LFS or regular), the Git LFS batch API with
// basic and multipart transfers and verify, and the NDJSON commit. Errors are mds::Error saying
// which call failed and what the Hub answered (an HttpError, carrying the status, when the Hub
// refused the call); the token never appears in them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mds/hub/http.h"
#include "mds/util/error.h"

namespace mds::hub {

struct RepoRef {
    std::string id;                // "bigscience/tr11-176B-logs"
    std::string type = "model";    // model | dataset | space
    std::string revision = "main";
};

// "models" / "datasets" / "spaces" in API paths; "" / "datasets/" / "spaces/" in git and LFS URLs.
std::string api_collection(const std::string& type);
std::string web_prefix(const std::string& type);
// Percent-encodes everything but unreserved characters ("refs/pr/1" → "refs%2Fpr%2F1"): s3.h's uri_encode.
std::string url_quote(const std::string& s, bool keep_slash = false);

struct RemoteEntry {
    std::string path;
    bool directory = false;
    std::uint64_t size = 0;
    std::string oid;                      // git blob sha1 (tree sha1 for directories)
    std::optional<std::string> lfs_sha256;
};

struct PreuploadFile {
    std::string path;     // path in the repository
    std::uint64_t size = 0;
    std::string sample;   // the first 512 bytes
};

struct PreuploadAnswer {
    std::string path;
    bool lfs = false;
    bool ignore = false;
    std::optional<std::string> remote_oid;  // sha256 (LFS) or git sha1 (regular) of the remote file
};

struct LfsTransfer {
    std::string oid;          // sha256
    std::uint64_t size = 0;
    bool needed = false;      // false: the Hub has the object already
    std::string upload_href;
    std::vector<std::pair<std::string, std::string>> upload_header;
    std::string verify_href;
    std::vector<std::pair<std::string, std::string>> verify_header;
    std::string error;        // the object's own error from the batch answer
};

struct CommitFile {
    enum class Kind { regular, lfs, deleted } kind = Kind::regular;
    std::string path;         // in the repository
    std::string local_path;   // regular: its first `size` bytes go inline (base64)
    std::string sha256;       // lfs
    std::uint64_t size = 0;   // the bytes hashed (a growing file is sent as that prefix)
};

class HubApi {
public:
    HubApi(HttpClient& http, std::string endpoint);

    std::string whoami();  // the user name the token belongs to
    // Creates the repository; an existing one is fine. Returns true when it was created.
    bool create_repo(const RepoRef& repo, bool private_repo);
    // The head commit of repo.revision; none when the repository or the revision does not exist.
    std::optional<std::string> head(const RepoRef& repo);
    // Every file under `path_in_repo` (recursive; all pages).
    std::vector<RemoteEntry> list_tree(const RepoRef& repo, const std::string& path_in_repo = "");
    std::vector<PreuploadAnswer> preupload(const RepoRef& repo, const std::vector<PreuploadFile>& files);
    std::vector<LfsTransfer> lfs_batch(const RepoRef& repo, const std::vector<std::pair<std::string, std::uint64_t>>& objects);
    // Uploads the first transfer.size bytes of `local_path` (which must still hash to the object's
    // sha256; a file appended to since is fine) as the transfer says: one PUT, or the parts of a multipart transfer and their completion; then verify.
    // `progress(bytes)` is called with the bytes of this object sent so far.
    void upload_lfs(const LfsTransfer& transfer, const std::string& local_path,
                    const std::function<void(std::uint64_t)>& progress = {});
    // One commit; returns its oid. Not retried (a lost answer to an applied commit would make a
    // blind retry commit twice): HTTP failures throw, with `CommitUncertain` when the Hub may have
    // applied it.
    std::string commit(const RepoRef& repo, const std::string& summary, const std::vector<CommitFile>& files,
                       const std::optional<std::string>& parent = std::nullopt);

    const std::string& endpoint() const { return endpoint_; }

private:
    HttpResponse call(HttpRequest request, const std::string& what);
    std::string api(const RepoRef& repo) const;
    HttpClient& http_;
    std::string endpoint_;
};

// A commit whose outcome is unknown (no answer, or a 5xx after sending it): check the branch head
// before trying again.
class CommitUncertain : public Error {
public:
    explicit CommitUncertain(const std::string& what) : Error(what) {}
};

}  // namespace mds::hub
