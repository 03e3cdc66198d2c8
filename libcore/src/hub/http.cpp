// The Hub client's HTTP over libcurl (http.h).
#include "mds/hub/http.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <thread>

#include "mds/util/error.h"
#include "mds/util/safe_paths.h"  // printable
#include "mds/util/text.h"

namespace mds::hub {
namespace {

void curl_init_once() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}


struct BodySource {
    const HttpRequest* req = nullptr;
    int fd = -1;
    std::uint64_t sent = 0;
    std::string error;
};

std::size_t read_body(char* buf, std::size_t size, std::size_t n, void* user) {
    auto* src = static_cast<BodySource*>(user);
    const HttpRequest& r = *src->req;
    const std::uint64_t total = r.body_file.empty() ? r.body.size() : r.body_length;
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(size * n, total - src->sent));
    if (want == 0) return 0;
    if (r.body_file.empty()) {
        std::memcpy(buf, r.body.data() + src->sent, want);
        src->sent += want;
        return want;
    }
    ssize_t got = 0;
    do {
        got = ::pread(src->fd, buf, want, static_cast<off_t>(r.body_offset + src->sent));
    } while (got < 0 && errno == EINTR);
    if (got <= 0) {
        src->error = got < 0 ? errno_message("cannot read " + r.body_file, errno)
                             : r.body_file + " is shorter than expected (it changed while being uploaded)";
        return CURL_READFUNC_ABORT;
    }
    src->sent += static_cast<std::uint64_t>(got);
    return static_cast<std::size_t>(got);
}

std::string byte_count(std::uint64_t n) {
    if (n >= (std::uint64_t{1} << 20) && n % (std::uint64_t{1} << 20) == 0) return std::to_string(n >> 20) + " MiB";
    if (n >= 1024 && n % 1024 == 0) return std::to_string(n >> 10) + " KiB";
    return std::to_string(n) + " bytes";
}

// One exchange as the callbacks see it: where the answer goes, its caps, and the clock of the
// answer timeout. `stop` is set (and the transfer aborted) when a limit is broken.
struct Exchange {
    const HttpRequest* req = nullptr;
    const HttpOptions* options = nullptr;
    HttpResponse* resp = nullptr;
    std::uint64_t body_size = 0;       // of the request
    bool has_body = false;
    std::uint64_t header_bytes = 0;
    std::chrono::steady_clock::time_point answer_clock{};  // started when the request was sent
    bool answer_clock_started = false;
    std::string stop;                  // why the transfer was stopped here
    bool over_limit = false;

    void refuse(std::string why) {
        if (stop.empty()) stop = std::move(why);
        over_limit = true;
    }
};

std::size_t write_body(char* p, std::size_t size, std::size_t n, void* user) {
    auto* x = static_cast<Exchange*>(user);
    const std::size_t bytes = size * n;
    if (x->resp->body.size() + bytes > x->req->max_answer_bytes) {
        x->refuse("the answer from " + url_for_message(x->req->url) + " is larger than " + byte_count(x->req->max_answer_bytes) +
                  ", the most accepted for this request; not read further");
        return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
    }
    x->resp->body.append(p, bytes);
    return bytes;
}

std::size_t write_header(char* p, std::size_t size, std::size_t n, void* user) {
    auto* x = static_cast<Exchange*>(user);
    const std::size_t bytes = size * n;
    x->header_bytes += bytes;
    if (x->header_bytes > kMaxHeaderBytes) {
        x->refuse("the headers of the answer from " + url_for_message(x->req->url) + " pass " + byte_count(kMaxHeaderBytes) +
                  "; not read further");
        return 0;
    }
    auto* headers = &x->resp->headers;
    std::string line(p, bytes);
    if (line.rfind("HTTP/", 0) == 0) {
        headers->clear();  // a new response (after 100-continue, redirects)
        x->header_bytes = bytes;
    }
    const auto colon = line.find(':');
    if (colon != std::string::npos) {
        std::string value = line.substr(colon + 1);
        while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.erase(value.begin());
        while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) value.pop_back();
        const std::string name = to_lower(line.substr(0, colon));
        // A body announced larger than the cap is refused before any of it is read (the answer
        // to a HEAD carries the size of the object instead, and no body).
        if (name == "content-length" && x->req->method != "HEAD") {
            char* end = nullptr;
            errno = 0;
            const unsigned long long announced = std::strtoull(value.c_str(), &end, 10);
            if (end != value.c_str() && (errno == ERANGE || announced > x->req->max_answer_bytes)) {
                x->refuse("the answer from " + url_for_message(x->req->url) + " announces " +
                          (errno == ERANGE ? printable(value, 40) : std::to_string(announced)) + " bytes (Content-Length); at most " +
                          byte_count(x->req->max_answer_bytes) + " are accepted for this request");
                return 0;
            }
        }
        (*headers)[name] = value;
    }
    return bytes;
}

// Progress of the exchange: the upload callback, and the answer timeout, whose clock starts once
// the request body is out (a large upload is judged by the stall limit alone while it goes).
int progress_cb(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t ulnow) {
    auto* x = static_cast<Exchange*>(user);
    if (x->has_body && x->options->on_upload_progress) x->options->on_upload_progress(static_cast<std::uint64_t>(ulnow));
    const auto now = std::chrono::steady_clock::now();
    if (!x->answer_clock_started && (!x->has_body || static_cast<std::uint64_t>(ulnow) >= x->body_size)) {
        x->answer_clock_started = true;
        x->answer_clock = now;
    }
    if (x->answer_clock_started && now - x->answer_clock > x->options->answer_timeout) {
        if (x->stop.empty())
            x->stop = "no complete answer from " + url_for_message(x->req->url) + " within " +
                      std::to_string(x->options->answer_timeout.count()) + " s";
        return 1;  // aborts the transfer (CURLE_ABORTED_BY_CALLBACK)
    }
    return 0;
}

// localhost, ::1, or a dotted IPv4 address in 127.0.0.0/8 (not a name that starts with "127.").
bool is_loopback_host(const std::string& host) {
    if (host == "localhost" || host == "::1" || host == "[::1]") return true;
    in_addr a{};
    return ::inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

}  // namespace

std::string HttpResponse::header(const std::string& lower_name) const {
    const auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
}

std::string HttpResponse::describe() const {
    if (status == 0) return error.empty() ? "no answer" : error;
    std::string snippet = body.substr(0, 200);
    for (char& c : snippet)
        if (c == '\n' || c == '\r') c = ' ';
    std::string s = "HTTP " + std::to_string(status);
    if (status >= 300 && status < 400 && !header("location").empty())
        s += " (a redirect to " + url_for_message(header("location")) + ", not followed)";
    if (!snippet.empty()) s += ": " + printable(snippet, 200);
    return s;
}

std::string url_for_message(const std::string& url) { return printable(url.substr(0, url.find('?')), 200); }

void check_url_allowed(const std::string& url) {
    const auto scheme_end = url.find("://");
    if (scheme_end == std::string::npos) throw UsageError("'" + url + "' is not a URL (expected https://...)");
    const std::string scheme = to_lower(url.substr(0, scheme_end));
    std::string rest = url.substr(scheme_end + 3);
    const std::string authority = rest.substr(0, rest.find_first_of("/?#"));
    if (authority.find('@') != std::string::npos)
        throw UsageError("a URL must not carry credentials (user:password@); use the token instead");
    std::string host = authority;
    if (!host.empty() && host.front() == '[') host = host.substr(0, host.find(']') + 1);
    else host = host.substr(0, host.find(':'));
    if (scheme == "https") return;
    if (scheme == "http" && is_loopback_host(to_lower(host))) return;
    if (scheme == "http")
        throw UsageError("plain http to " + host + " would send the token in the clear; use https (http is allowed on loopback only)");
    throw UsageError("unsupported URL scheme '" + scheme + "' (https, or http on loopback)");
}

HttpClient::HttpClient(HttpOptions options) : options_(std::move(options)) {
    curl_init_once();
    curl_ = curl_easy_init();
    if (!curl_) throw Error("libcurl could not start");
    if (!options_.sleep)
        options_.sleep = [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); };
}

HttpClient::~HttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

HttpResponse HttpClient::send_once(const HttpRequest& req) {
    CURL* c = static_cast<CURL*>(curl_);
    curl_easy_reset(c);
    HttpResponse resp;
    BodySource src;
    src.req = &req;
    struct FdCloser {
        int& fd;
        ~FdCloser() {
            if (fd >= 0) ::close(fd);
        }
    } closer{src.fd};
    if (!req.body_file.empty()) {
        src.fd = ::open(req.body_file.c_str(), O_RDONLY | O_CLOEXEC);
        if (src.fd < 0) {
            resp.error = errno_message("cannot read " + req.body_file, errno);
            return resp;
        }
    }
    const std::uint64_t body_size = req.body_file.empty() ? req.body.size() : req.body_length;
    const bool has_body = req.method != "GET" && req.method != "HEAD" && req.method != "DELETE";
    Exchange x;
    x.req = &req;
    x.options = &options_;
    x.resp = &resp;
    x.body_size = body_size;
    x.has_body = has_body;

    curl_slist* headers = nullptr;
    for (const auto& [k, v] : req.headers) headers = curl_slist_append(headers, (k + ": " + v).c_str());
    if (req.authorize && !options_.token.empty())
        headers = curl_slist_append(headers, ("authorization: Bearer " + options_.token).c_str());
    headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
    char errbuf[CURL_ERROR_SIZE] = {0};

    curl_easy_setopt(c, CURLOPT_URL, req.url.c_str());
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_USERAGENT, options_.user_agent.c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, static_cast<long>(options_.connect_timeout.count()));
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options_.stall_timeout.count()));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, write_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress_cb);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);  // redirects would carry the token elsewhere
    if (req.method == "HEAD") {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (has_body) {
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);  // PUT by default; the method is set below
        curl_easy_setopt(c, CURLOPT_READFUNCTION, read_body);
        curl_easy_setopt(c, CURLOPT_READDATA, &src);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body_size));
        if (req.method != "PUT") curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    } else if (req.method != "GET") {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    }
    const CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(headers);
    if (!x.stop.empty()) {  // a limit of ours stopped it: say which, whatever curl made of it
        resp.status = 0;
        resp.error = x.stop;
        resp.over_limit = x.over_limit;
        resp.body.clear();
        resp.body.shrink_to_fit();
    } else if (rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
    } else {
        resp.status = 0;
        resp.error = !src.error.empty() ? src.error
                                        : url_for_message(req.url) + ": " + (errbuf[0] ? errbuf : curl_easy_strerror(rc));
    }
    return resp;
}

HttpResponse HttpClient::send(const HttpRequest& req) {
    check_url_allowed(req.url);
    HttpResponse resp;
    for (int attempt = 1;; ++attempt) {
        resp = send_once(req);
        resp.attempts = attempt;
        const bool transport_failure = resp.status == 0;
        // An answer over a cap would be as large again: not retried.
        const bool retryable = (transport_failure && !resp.over_limit) || is_retryable_status(resp.status);
        if (!retryable || !req.retry || attempt > options_.retry.max_retries) return resp;
        // A file that cannot be read will not become readable by waiting.
        if (transport_failure && !req.body_file.empty() && resp.error.find(req.body_file) != std::string::npos) return resp;
        const double wait =
            retry_wait_seconds(options_.retry, attempt, resp.headers, resp.status, static_cast<std::int64_t>(std::time(nullptr)));
        const std::string why = (req.what.empty() ? req.method : req.what) + ": " + resp.describe();
        if (options_.on_retry) options_.on_retry(attempt, wait, why);
        options_.sleep(wait);
    }
}

}  // namespace mds::hub
