// One HTTP client for the Hub and S3 paths of mds-hub-sync, over libcurl: bodies from memory or
// from a byte range of a file (streamed, re-read from the start on each retry), the retry policy
// of retry.h, a bearer token that never appears in a message, and plain http refused except on
// loopback (a token must not cross a network in the clear).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mds/hub/retry.h"
#include "mds/util/error.h"

namespace mds::hub {

// Caps on what an answer may hold, so that a broken or hostile server (an endless body, a huge
// Content-Length, headers without end) cannot grow the process: the transfer stops at the cap and
// the response says so (not retried). Each request names its cap from these, by kind.
constexpr std::uint64_t kMaxSmallAnswerBytes = std::uint64_t{1} << 20;  // uploads, commits, errors, whoami
constexpr std::uint64_t kMaxApiAnswerBytes = std::uint64_t{16} << 20;   // JSON answers, tree and S3 listing pages
constexpr std::uint64_t kMaxLargeAnswerBytes = std::uint64_t{64} << 20; // an LFS batch (part URLs of 256 objects)
constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{256} << 10;     // all header lines of one answer

struct HttpRequest {
    std::string method = "GET";
    std::string url;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;                     // used when body_file is empty
    std::string body_file;                // stream bytes [body_offset, body_offset + body_length) of this file
    std::uint64_t body_offset = 0;
    std::uint64_t body_length = 0;
    bool authorize = true;                // send the client's bearer token (not to presigned URLs)
    bool retry = true;                    // false for requests that must not be repeated blindly (commits)
    std::string what;                     // for messages: "preupload", "part 3 of model.pt", ...
    std::uint64_t max_answer_bytes = kMaxApiAnswerBytes;  // the body of the answer (see above)
};

struct HttpResponse {
    long status = 0;                      // 0: no HTTP answer (`error` says why)
    std::map<std::string, std::string> headers;  // names in lower case
    std::string body;
    std::string error;                    // transport error (connection refused, reset, timeout)
    bool over_limit = false;              // the answer broke a cap above (status is then 0; not retried)
    int attempts = 0;

    bool ok() const { return status >= 200 && status < 300; }
    std::string header(const std::string& lower_name) const;
    // "HTTP 404: <start of the body>" (control bytes escaped; a redirect names its Location), or the
    // transport error.
    std::string describe() const;
};

struct HttpOptions {
    std::string token;                    // bearer token; empty: none
    std::string user_agent = "mds-hub-sync";
    RetryPolicy retry;
    std::chrono::seconds connect_timeout{30};
    // Abort a transfer slower than 1 byte/s for this long (a stalled connection).
    std::chrono::seconds stall_timeout{120};
    // The whole answer (headers and body) must have arrived this long after the request (its body
    // included) was sent: a server that drips bytes, or never ends its headers, is given up on.
    std::chrono::seconds answer_timeout{300};
    // Called before each wait (retry number, seconds, why); the default sleeps and says nothing.
    std::function<void(int, double, const std::string&)> on_retry;
    // Waits; tests replace it to count instead of sleeping.
    std::function<void(double)> sleep;
    // Called with the bytes sent so far of a request body (progress).
    std::function<void(std::uint64_t)> on_upload_progress;
};

// A request that failed (after its retries): the message names the call and the answer as before
// ("<call> failed: HTTP 412: ..."); `status` is the answer's HTTP status, for decisions that must
// not read the text (the Hub commit's retry on 412), or 0 when no HTTP answer came (a transport
// failure or an answer over a cap).
class HttpError : public Error {
public:
    HttpError(const std::string& what, long http_status) : Error(what), status(http_status) {}
    long status = 0;
};

// Throws mds::UsageError for a URL that is neither https nor http on loopback (127.0.0.0/8, ::1,
// localhost), or that has user:password@ in it.
void check_url_allowed(const std::string& url);

// The URL as messages show it: without its query (presigned URLs carry signatures there), control
// bytes escaped, cut to 200 characters.
std::string url_for_message(const std::string& url);

class HttpClient {
public:
    explicit HttpClient(HttpOptions options);
    ~HttpClient();
    HttpClient(const HttpClient&) = delete;
    HttpClient& operator=(const HttpClient&) = delete;

    // Sends the request, retrying as the policy says (when request.retry). Never throws for HTTP
    // or transport failures: the last response says what happened.
    HttpResponse send(const HttpRequest& request);

private:
    HttpResponse send_once(const HttpRequest& request);
    HttpOptions options_;
    void* curl_ = nullptr;  // CURL*, reused between requests (keep-alive)
};

}  // namespace mds::hub
