// E-mail and alert-command delivery (notify.h).
#include "mds/slurm/notify.h"

#include <curl/curl.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <mutex>

#include "mds/util/base64.h"
#include "mds/util/process.h"

namespace mds::slurm {
namespace {

// A header value: CR/LF removed (no header injection through a job name); when not ASCII, RFC 2047
// encoded words of at most 75 characters (45 bytes of UTF-8 each, never cutting a character),
// folded onto continuation lines.
std::string header_value(const std::string& s) {
    std::string clean;
    for (char c : s) clean += (c == '\r' || c == '\n') ? ' ' : c;
    const bool ascii = std::all_of(clean.begin(), clean.end(), [](char c) { return static_cast<unsigned char>(c) < 128; });
    if (ascii) return clean;
    std::string out;
    std::size_t i = 0;
    while (i < clean.size()) {
        std::size_t n = std::min<std::size_t>(45, clean.size() - i);
        // Back off to a character boundary: a continuation byte is 10xxxxxx.
        while (n > 0 && i + n < clean.size() && (static_cast<unsigned char>(clean[i + n]) & 0xC0) == 0x80) --n;
        if (n == 0) n = std::min<std::size_t>(45, clean.size() - i);  // not UTF-8: cut anywhere
        if (!out.empty()) out += "\r\n ";
        out += "=?UTF-8?B?" + base64_encode(std::string_view(clean).substr(i, n)) + "?=";
        i += n;
    }
    return out;
}

std::string address(const std::string& a) {
    std::string clean;
    for (char c : a)
        if (c != '\r' && c != '\n' && c != '<' && c != '>') clean += c;
    return clean;
}

// "<address>" for the SMTP envelope (built by appends: GCC 12 misreads '"<" + s' as overlapping).
std::string envelope(const std::string& a) {
    std::string out;
    out.reserve(a.size() + 2);
    out.push_back('<');
    out.append(address(a));
    out.push_back('>');
    return out;
}

struct Upload {
    const std::string* data;
    std::size_t offset = 0;
};

std::size_t read_cb(char* buf, std::size_t size, std::size_t n, void* user) {
    auto* up = static_cast<Upload*>(user);
    const std::size_t room = size * n;
    const std::size_t left = up->data->size() - up->offset;
    const std::size_t k = std::min(room, left);
    std::memcpy(buf, up->data->data() + up->offset, k);
    up->offset += k;
    return k;
}

void curl_init_once() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

std::string default_mail_from() {
    char host[256] = {0};
    if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
    std::string user = "mds";
    if (const passwd* pw = ::getpwuid(::geteuid()); pw && pw->pw_name) user = pw->pw_name;
    return user + "@" + host;
}

std::string build_mail(const MailConfig& config, const std::string& subject, const std::string& body,
                       std::int64_t now) {
    const std::string from = address(config.from.empty() ? default_mail_from() : config.from);
    std::string to;
    for (const auto& t : config.to) to += (to.empty() ? "" : ", ") + address(t);
    char date[64];
    const std::time_t t = static_cast<std::time_t>(now);
    std::tm tm{};
    localtime_r(&t, &tm);
    std::strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S %z", &tm);
    const std::string domain = from.find('@') != std::string::npos ? from.substr(from.find('@') + 1) : "localhost";
    std::string m;
    m += "Date: " + std::string(date) + "\r\n";
    m += "From: " + from + "\r\n";
    m += "To: " + to + "\r\n";
    m += "Subject: " + header_value(subject) + "\r\n";
    m += "Message-ID: <" + std::to_string(now) + "." + std::to_string(::getpid()) + ".mds-slurm-status@" + domain + ">\r\n";
    m += "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n";
    // Body lines end in CRLF; libcurl dot-stuffs lines that start with '.'.
    std::size_t start = 0;
    while (start < body.size()) {
        std::size_t nl = body.find('\n', start);
        if (nl == std::string::npos) nl = body.size();
        std::string line = body.substr(start, nl - start);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        m += line + "\r\n";
        start = nl + 1;
    }
    return m;
}

std::string send_mail(const MailConfig& config, const std::string& subject, const std::string& body) {
    if (config.to.empty()) return "no recipients";
    curl_init_once();
    CURL* curl = curl_easy_init();
    if (!curl) return "libcurl could not start";
    const std::string message = build_mail(config, subject, body, static_cast<std::int64_t>(std::time(nullptr)));
    Upload up{&message};
    const std::string from = envelope(config.from.empty() ? default_mail_from() : config.from);
    curl_slist* rcpt = nullptr;
    for (const auto& t : config.to) rcpt = curl_slist_append(rcpt, envelope(t).c_str());
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(curl, CURLOPT_URL, config.smtp_url.c_str());
    curl_easy_setopt(curl, CURLOPT_MAIL_FROM, from.c_str());
    curl_easy_setopt(curl, CURLOPT_MAIL_RCPT, rcpt);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, read_cb);
    curl_easy_setopt(curl, CURLOPT_READDATA, &up);
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_USE_SSL, static_cast<long>(CURLUSESSL_TRY));
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, static_cast<long>(config.timeout.count()));
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 20L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "smtp,smtps");
    if (!config.user.empty()) {
        curl_easy_setopt(curl, CURLOPT_USERNAME, config.user.c_str());
        curl_easy_setopt(curl, CURLOPT_PASSWORD, config.password.c_str());
    }
    const CURLcode rc = curl_easy_perform(curl);
    std::string error;
    if (rc != CURLE_OK) {
        long code = 0;
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
        error = "e-mail to " + std::to_string(config.to.size()) + " recipient(s) via " + config.smtp_url + " failed: " +
                (errbuf[0] ? errbuf : curl_easy_strerror(rc));
        if (code) error += " (server reply " + std::to_string(code) + ")";
    }
    curl_slist_free_all(rcpt);
    curl_easy_cleanup(curl);
    return error;
}

std::string run_alert_command(const std::string& command, const std::string& message, const std::string& subject,
                              const std::string& level, const std::string& job_name, const std::string& report,
                              std::chrono::seconds timeout) {
    ProcessOptions opts;
    opts.timeout = timeout;
    opts.max_output_bytes = std::size_t{1} << 20;  // only the end of stderr is shown, on failure
    opts.stdin_data = report;
    opts.env = {{"MDS_ALERT_MESSAGE", message},
                {"MDS_ALERT_SUBJECT", subject},
                {"MDS_ALERT_LEVEL", level},
                {"MDS_JOB_NAME", job_name}};
    ProcessResult r = run_process({"/bin/sh", "-c", command, "sh", message}, opts);
    if (r.ok()) return {};
    std::string err = r.err;
    while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
    if (err.size() > 500) err = "..." + err.substr(err.size() - 500);
    return "--alert-command " + r.describe() + (err.empty() ? "" : ": " + err);
}

}  // namespace mds::slurm
