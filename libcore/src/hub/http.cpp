// The Hub client's HTTP over libcurl (http.h).
#include "mds/hub/http.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>
#include <thread>

#include "mds/util/error.h"

namespace mds::hub {
namespace {

void curl_init_once() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
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

std::size_t write_body(char* p, std::size_t size, std::size_t n, void* user) {
    static_cast<std::string*>(user)->append(p, size * n);
    return size * n;
}

std::size_t write_header(char* p, std::size_t size, std::size_t n, void* user) {
    auto* headers = static_cast<std::map<std::string, std::string>*>(user);
    std::string line(p, size * n);
    if (line.rfind("HTTP/", 0) == 0) headers->clear();  // a new response (after 100-continue, redirects)
    const auto colon = line.find(':');
    if (colon != std::string::npos) {
        std::string value = line.substr(colon + 1);
        while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.erase(value.begin());
        while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) value.pop_back();
        (*headers)[lower(line.substr(0, colon))] = value;
    }
    return size * n;
}

struct ProgressCtx {
    const HttpOptions* options;
};

int progress_cb(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t ulnow) {
    auto* ctx = static_cast<ProgressCtx*>(user);
    if (ctx->options->on_upload_progress) ctx->options->on_upload_progress(static_cast<std::uint64_t>(ulnow));
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
    std::string snippet = body.substr(0, 300);
    for (char& c : snippet)
        if (c == '\n' || c == '\r') c = ' ';
    return "HTTP " + std::to_string(status) + (snippet.empty() ? "" : ": " + snippet);
}

void check_url_allowed(const std::string& url) {
    const auto scheme_end = url.find("://");
    if (scheme_end == std::string::npos) throw UsageError("'" + url + "' is not a URL (expected https://...)");
    const std::string scheme = lower(url.substr(0, scheme_end));
    std::string rest = url.substr(scheme_end + 3);
    const std::string authority = rest.substr(0, rest.find_first_of("/?#"));
    if (authority.find('@') != std::string::npos)
        throw UsageError("a URL must not carry credentials (user:password@); use the token instead");
    std::string host = authority;
    if (!host.empty() && host.front() == '[') host = host.substr(0, host.find(']') + 1);
    else host = host.substr(0, host.find(':'));
    if (scheme == "https") return;
    if (scheme == "http" && is_loopback_host(lower(host))) return;
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

    curl_slist* headers = nullptr;
    for (const auto& [k, v] : req.headers) headers = curl_slist_append(headers, (k + ": " + v).c_str());
    if (req.authorize && !options_.token.empty())
        headers = curl_slist_append(headers, ("authorization: Bearer " + options_.token).c_str());
    headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
    char errbuf[CURL_ERROR_SIZE] = {0};
    ProgressCtx pctx{&options_};

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
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &resp.body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, write_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &resp.headers);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);  // redirects would carry the token elsewhere
    if (req.method == "HEAD") {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (has_body) {
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);  // PUT by default; the method is set below
        curl_easy_setopt(c, CURLOPT_READFUNCTION, read_body);
        curl_easy_setopt(c, CURLOPT_READDATA, &src);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body_size));
        if (req.method != "PUT") curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
        if (options_.on_upload_progress) {
            curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress_cb);
            curl_easy_setopt(c, CURLOPT_XFERINFODATA, &pctx);
            curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        }
    } else if (req.method != "GET") {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    }
    const CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(headers);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
    } else {
        resp.status = 0;
        resp.error = !src.error.empty() ? src.error : std::string(errbuf[0] ? errbuf : curl_easy_strerror(rc));
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
        const bool retryable = transport_failure || is_retryable_status(resp.status);
        if (!retryable || !req.retry || attempt > options_.retry.max_retries) return resp;
        // A file that cannot be read will not become readable by waiting.
        if (transport_failure && !req.body_file.empty() && resp.error.find(req.body_file) != std::string::npos) return resp;
        double wait = backoff_seconds(options_.retry, attempt);
        if (auto hint = server_wait_seconds(resp.headers, resp.status, static_cast<std::int64_t>(std::time(nullptr))))
            wait = *hint;
        const std::string why = (req.what.empty() ? req.method : req.what) + ": " + resp.describe();
        if (options_.on_retry) options_.on_retry(attempt, wait, why);
        options_.sleep(wait);
    }
}

}  // namespace mds::hub
