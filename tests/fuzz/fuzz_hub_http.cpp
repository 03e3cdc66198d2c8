// Fuzzes what mds-hub-sync reads from a server's headers and says about its answers (hub/retry.h,
// hub/http.h). Byte 0 picks what the rest feeds:
//   0: header lines ("Name: value", one per line) to server_wait_seconds / retry_wait_seconds with
//      status 429 or 503: a wait the server asks for is finite and at least 1 s; the wait used is
//      finite, >= 0 and never above the policy's caps, whatever Retry-After or RateLimit say.
//   1: a body and a Location to HttpResponse::describe(), and bytes to url_for_message(): what is
//      printed holds no control byte and no byte >= 0x7f, is bounded in length, and a URL in a
//      message has no query.
//   2: bytes to check_url_allowed: only mds::Error (UsageError) escapes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "mds/hub/http.h"
#include "mds/hub/retry.h"

namespace {

bool printable_only(const std::string& s) {
    for (unsigned char c : s)
        if (c < 0x20 || c >= 0x7f) return false;
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace mds::hub;
    if (size < 2) return 0;
    const std::string text(reinterpret_cast<const char*>(data) + 2, size - 2);
    switch (data[0] % 3) {
        case 0: {
            std::map<std::string, std::string> headers;
            std::size_t start = 0;
            while (start < text.size()) {
                std::size_t end = text.find('\n', start);
                if (end == std::string::npos) end = text.size();
                const std::string line = text.substr(start, end - start);
                const auto colon = line.find(':');
                if (colon != std::string::npos) headers[line.substr(0, colon)] = line.substr(colon + 1);
                start = end + 1;
            }
            const long status = data[1] % 2 ? 429 : 503;
            const std::int64_t now = 1445412480;
            if (const auto w = server_wait_seconds(headers, status, now)) MDS_FUZZ_CHECK(std::isfinite(*w) && *w >= 1);
            RetryPolicy p;
            const double wait = retry_wait_seconds(p, 1 + data[1] % 8, headers, status, now);
            MDS_FUZZ_CHECK(std::isfinite(wait) && wait >= 0);
            MDS_FUZZ_CHECK(wait <= std::max(p.max_server_wait_seconds, p.max_seconds));
            (void)parse_http_date(text);
            break;
        }
        case 1: {
            HttpResponse r;
            r.status = 100 + data[1] * 2;
            const auto split = text.find('\n');
            r.body = text.substr(0, split);
            if (split != std::string::npos) r.headers["location"] = text.substr(split + 1);
            const std::string d = r.describe();
            MDS_FUZZ_CHECK(printable_only(d));
            MDS_FUZZ_CHECK(d.size() < 2000);
            const std::string u = url_for_message(text);
            MDS_FUZZ_CHECK(printable_only(u));
            MDS_FUZZ_CHECK(u.find('?') == std::string::npos);
            MDS_FUZZ_CHECK(u.size() <= 203 * 4);
            r.status = 0;
            r.error = text;
            (void)r.describe();
            break;
        }
        default:
            mds::fuzz::only_mds_errors([&] { check_url_allowed(text); });
            break;
    }
    return 0;
}
