// Drives mds::hub::HttpClient for test_hub_http.py: argv[1] is a JSON request
// {"method","url","token","headers":{...},"body","body_file","offset","length","authorize","retry",
//  "base_wait"}; prints {"status","attempts","error","body","waits":[...],"headers":{...}} on stdout.
// A URL the client refuses exits 2 with the message on stderr.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "mds/hub/http.h"
#include "mds/util/error.h"

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: hub_http_probe JSON\n");
        return 2;
    }
    const auto spec = nlohmann::json::parse(argv[1]);
    mds::hub::HttpOptions opt;
    opt.token = spec.value("token", std::string());
    opt.retry.base_seconds = spec.value("base_wait", 1.0);
    std::vector<double> waits;
    opt.sleep = [&](double s) {
        waits.push_back(s);
        std::this_thread::sleep_for(std::chrono::duration<double>(s));
    };
    opt.on_retry = [](int n, double s, const std::string& why) {
        std::fprintf(stderr, "retry %d in %.2f s: %s\n", n, s, why.c_str());
    };
    mds::hub::HttpRequest req;
    req.method = spec.value("method", std::string("GET"));
    req.url = spec.at("url").get<std::string>();
    if (spec.contains("headers"))
        for (const auto& [k, v] : spec["headers"].items()) req.headers.emplace_back(k, v.get<std::string>());
    req.body = spec.value("body", std::string());
    req.body_file = spec.value("body_file", std::string());
    req.body_offset = spec.value("offset", std::uint64_t{0});
    req.body_length = spec.value("length", std::uint64_t{0});
    req.authorize = spec.value("authorize", true);
    req.retry = spec.value("retry", true);
    try {
        mds::hub::HttpClient client(opt);
        const auto r = client.send(req);
        nlohmann::json out = {{"status", r.status}, {"attempts", r.attempts}, {"error", r.error},
                              {"body", r.body},     {"waits", waits},        {"headers", r.headers}};
        std::printf("%s\n", out.dump().c_str());
    } catch (const mds::UsageError& e) {
        std::fprintf(stderr, "usage error: %s\n", e.what());
        return 2;
    }
    return 0;
}
