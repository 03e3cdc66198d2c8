// The retry policy of the Hub client (retry.h).
#include "mds/hub/retry.h"
#include "mds/util/text.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>

namespace mds::hub {
namespace {

const std::string* header(const std::map<std::string, std::string>& headers, std::string_view name) {
    for (const auto& [k, v] : headers)
        if (to_lower(k) == to_lower(name)) return &v;
    return nullptr;
}

// Spaces and tabs off both ends (and a trailing CR): a header value or list item as HTTP writes it.
std::string_view trim_blanks(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

std::optional<double> number(std::string_view s) {
    s = trim_blanks(s);
    double v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || s.empty() || !std::isfinite(v) || v < 0) return std::nullopt;
    return v;
}

}  // namespace

bool is_retryable_status(long status) {
    return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

double backoff_seconds(const RetryPolicy& policy, int retry) {
    double wait = policy.base_seconds;
    for (int i = 1; i < retry && wait < policy.max_seconds; ++i) wait *= 2;
    return std::min(wait, policy.max_seconds);
}

double retry_wait_seconds(const RetryPolicy& policy, int retry, const std::map<std::string, std::string>& headers,
                          long status, std::int64_t now) {
    if (const auto hint = server_wait_seconds(headers, status, now)) return std::min(*hint, policy.max_server_wait_seconds);
    return backoff_seconds(policy, retry);
}

std::optional<std::int64_t> parse_http_date(std::string_view text) {
    const std::string s(trim_blanks(text));
    std::tm tm{};
    const char* end = strptime(s.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (!end || *end != '\0') return std::nullopt;
    return static_cast<std::int64_t>(timegm(&tm));
}

std::optional<double> server_wait_seconds(const std::map<std::string, std::string>& headers, long status,
                                          std::int64_t now) {
    // As huggingface_hub's http_backoff: on 429, an exhausted RateLimit ("api";r=0;t=55) first,
    // else Retry-After; one second more either way.
    if (status == 429) {
        if (const std::string* rl = header(headers, "RateLimit")) {
            std::optional<double> r, t;
            std::string_view rest = *rl;
            while (!rest.empty()) {
                const auto semi = rest.find(';');
                const std::string_view part = trim_blanks(rest.substr(0, semi));
                rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
                if (part.size() > 2 && part[1] == '=') {
                    if (part[0] == 'r') r = number(part.substr(2));
                    if (part[0] == 't') t = number(part.substr(2));
                }
            }
            if (r && t && *r == 0) return *t + 1;
        }
    }
    if (const std::string* ra = header(headers, "Retry-After")) {
        if (auto secs = number(*ra)) return *secs + 1;
        if (auto when = parse_http_date(*ra)) return static_cast<double>(std::max<std::int64_t>(0, *when - now)) + 1;
    }
    return std::nullopt;
}

}  // namespace mds::hub
