// The Hub client's retry policy (hub/retry.h), against huggingface_hub's http_backoff rules.
#include <doctest/doctest.h>

#include "mds/hub/retry.h"

using namespace mds::hub;

TEST_CASE("hub: which statuses are retried") {
    for (long s : {408L, 429L, 500L, 502L, 503L, 504L}) CHECK(is_retryable_status(s));
    for (long s : {200L, 201L, 400L, 401L, 403L, 404L, 409L, 412L, 413L, 422L, 501L, 505L}) CHECK_FALSE(is_retryable_status(s));
}

TEST_CASE("hub: backoff 1, 2, 4, 8, 8 s") {
    const RetryPolicy p;
    CHECK(backoff_seconds(p, 1) == 1);
    CHECK(backoff_seconds(p, 2) == 2);
    CHECK(backoff_seconds(p, 3) == 4);
    CHECK(backoff_seconds(p, 4) == 8);
    CHECK(backoff_seconds(p, 5) == 8);
    CHECK(backoff_seconds(p, 50) == 8);
}

TEST_CASE("hub: Retry-After in seconds or as an HTTP date; RateLimit's reset on 429") {
    const std::int64_t now = 1445412480;  // Wed, 21 Oct 2015 07:28:00 GMT
    CHECK(parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT") == now);
    CHECK_FALSE(parse_http_date("tomorrow").has_value());
    // One second more than asked, as huggingface_hub's http_backoff.
    CHECK(server_wait_seconds({{"Retry-After", "3"}}, 503, now) == 4);
    CHECK(server_wait_seconds({{"retry-after", " 2.5 "}}, 429, now) == 3.5);
    CHECK(server_wait_seconds({{"Retry-After", "Wed, 21 Oct 2015 07:28:30 GMT"}}, 503, now) == 31);
    CHECK(server_wait_seconds({{"Retry-After", "Wed, 21 Oct 2015 07:27:00 GMT"}}, 503, now) == 1);
    // An exhausted RateLimit wins over Retry-After on 429.
    CHECK(server_wait_seconds({{"Retry-After", "3"}, {"ratelimit", "\"api\";r=0;t=10"}}, 429, now) == 11);
    CHECK_FALSE(server_wait_seconds({{"Retry-After", "soon"}}, 503, now).has_value());
    CHECK_FALSE(server_wait_seconds({{"Retry-After", "-4"}}, 503, now).has_value());
    CHECK(server_wait_seconds({{"RateLimit", "\"api\";r=0;t=55"}}, 429, now) == 56);
    CHECK_FALSE(server_wait_seconds({{"RateLimit", "\"api\";r=3;t=55"}}, 429, now).has_value());
    CHECK(server_wait_seconds({{"RateLimit", "\"api\";r=3;t=55"}, {"Retry-After", "2"}}, 429, now) == 3);
    CHECK_FALSE(server_wait_seconds({{"RateLimit", "\"api\";r=0;t=55"}}, 503, now).has_value());
    CHECK_FALSE(server_wait_seconds({}, 429, now).has_value());
}

TEST_CASE("hub: a wait the server asks for is capped; without a hint, the backoff") {
    const std::int64_t now = 1445412480;
    RetryPolicy p;
    CHECK(retry_wait_seconds(p, 1, {{"Retry-After", "3"}}, 503, now) == 4);
    CHECK(retry_wait_seconds(p, 1, {{"Retry-After", "1e300"}}, 503, now) == p.max_server_wait_seconds);
    CHECK(retry_wait_seconds(p, 1, {{"Retry-After", "Fri, 01 Jan 9999 00:00:00 GMT"}}, 503, now) == p.max_server_wait_seconds);
    CHECK(retry_wait_seconds(p, 1, {{"RateLimit", "\"api\";r=0;t=99999999"}}, 429, now) == p.max_server_wait_seconds);
    CHECK(retry_wait_seconds(p, 3, {}, 503, now) == 4);
    CHECK(retry_wait_seconds(p, 1, {{"Retry-After", "nan"}}, 503, now) == 1);
    CHECK(retry_wait_seconds(p, 1, {{"Retry-After", "inf"}}, 503, now) == 1);
    p.max_server_wait_seconds = 10;
    CHECK(retry_wait_seconds(p, 1, {{"Retry-After", "60"}}, 503, now) == 10);
}
