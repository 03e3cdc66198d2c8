// When to try an HTTP request again, and how long to wait first: huggingface_hub's policy
// (specs/ops.md §2.5; utils/_http.py http_backoff): 408, 429, 500, 502, 503 and 504 and dropped
// connections are retried, at most 5 times, after 1, 2, 4, 8, 8 s — or after what the server asks
// for: on 429, the reset `t` of a `RateLimit` header whose remaining `r` is 0, else `Retry-After`
// (seconds, or an HTTP date, which the Python client ignores) — plus one second, as the client does.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace mds::hub {

struct RetryPolicy {
    int max_retries = 5;        // tries after the first
    double base_seconds = 1.0;  // first wait; doubles each time
    double max_seconds = 8.0;   // cap of the doubling
    // Cap of a wait the server asks for (Retry-After, RateLimit): the Hub's rate-limit windows are
    // 5 minutes; a server asking for days is not waited for that long.
    double max_server_wait_seconds = 301.0;
};

bool is_retryable_status(long status);

// The wait before retry number `retry` (1-based) without a server hint.
double backoff_seconds(const RetryPolicy& policy, int retry);

// Header names are matched case-insensitively. `now` (epoch seconds) resolves HTTP dates.
// None: the server did not say (or said something unreadable).
std::optional<double> server_wait_seconds(const std::map<std::string, std::string>& headers, long status,
                                          std::int64_t now);

// The wait before retry number `retry`: what the server asks for (server_wait_seconds), at most
// policy.max_server_wait_seconds, else backoff_seconds.
double retry_wait_seconds(const RetryPolicy& policy, int retry, const std::map<std::string, std::string>& headers,
                          long status, std::int64_t now);

// "Wed, 21 Oct 2015 07:28:00 GMT" (RFC 9110 IMF-fixdate) → epoch seconds.
std::optional<std::int64_t> parse_http_date(std::string_view text);

}  // namespace mds::hub
