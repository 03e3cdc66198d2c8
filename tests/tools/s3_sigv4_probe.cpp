// Drives mds::hub::sigv4_sign (hub/s3.h) for tests/crosscheck/test_s3_sigv4.py. Reads one JSON
// object per line on stdin:
//   {"method","host","path","query":[[k,v],...],"headers":[[k,v],...],"payload_sha256",
//    "access_key","secret_key","session_token","region","service","amz_date",
//    "uri_encode":[[text, keep_slash],...]}   (uri_encode optional)
// and prints one JSON line per request: {"headers":[[k,v],...],"canonical_request","string_to_sign"}
// plus "uri_encoded":[...] (uri_encode of each given text), or {"error": message} when sigv4_sign
// throws mds::Error. `path` is used as given (already URI-encoded, as S3Client::send builds it).
#include <cstdio>
#include <exception>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "mds/hub/s3.h"
#include "mds/util/error.h"

namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;

Pairs pairs(const nlohmann::json& spec, const char* name) {
    Pairs out;
    if (!spec.contains(name)) return out;
    for (const auto& p : spec.at(name)) out.emplace_back(p.at(0).get<std::string>(), p.at(1).get<std::string>());
    return out;
}

nlohmann::json answer(const nlohmann::json& spec) {
    mds::hub::SigV4Input in;
    in.method = spec.at("method").get<std::string>();
    in.host = spec.at("host").get<std::string>();
    in.path = spec.at("path").get<std::string>();
    in.query = pairs(spec, "query");
    in.headers = pairs(spec, "headers");
    in.payload_sha256 = spec.at("payload_sha256").get<std::string>();
    const mds::hub::S3Credentials cred{spec.at("access_key").get<std::string>(), spec.at("secret_key").get<std::string>(),
                                       spec.value("session_token", std::string())};
    nlohmann::json out = nlohmann::json::object();
    try {
        const mds::hub::SigV4Output sig = mds::hub::sigv4_sign(in, cred, spec.at("region").get<std::string>(),
                                                               spec.at("service").get<std::string>(),
                                                               spec.at("amz_date").get<std::string>());
        out["headers"] = nlohmann::json::array();
        for (const auto& [k, v] : sig.headers) out["headers"].push_back({k, v});
        out["canonical_request"] = sig.canonical_request;
        out["string_to_sign"] = sig.string_to_sign;
    } catch (const mds::Error& e) {
        out = {{"error", e.what()}};
    }
    if (spec.contains("uri_encode")) {
        out["uri_encoded"] = nlohmann::json::array();
        for (const auto& t : spec.at("uri_encode"))
            out["uri_encoded"].push_back(mds::hub::uri_encode(t.at(0).get<std::string>(), t.at(1).get<bool>()));
    }
    return out;
}

}  // namespace

int main() {
    std::string line;
    std::size_t line_no = 0;
    try {
        while (std::getline(std::cin, line)) {
            ++line_no;
            if (line.empty()) continue;
            const std::string out = answer(nlohmann::json::parse(line)).dump();
            std::fwrite(out.data(), 1, out.size(), stdout);
            std::fputc('\n', stdout);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "s3_sigv4_probe: line %zu: %s\n", line_no, e.what());
        return 1;
    }
    return std::fflush(stdout) == 0 ? 0 : 1;
}
