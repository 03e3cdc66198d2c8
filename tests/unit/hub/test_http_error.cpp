// HttpError: a call the server refused throws it with the answer's status (0 for no answer), and
// with the message it always had ("<call> failed: HTTP 412: ..."), for the Hub API and the S3
// client, against a scripted loopback server. A commit without a clear answer stays CommitUncertain.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "hub/loopback_server.h"
#include "mds/hub/api.h"
#include "mds/hub/http.h"
#include "mds/hub/s3.h"

using namespace mds::hub;
using mds::test::HttpExchange;
using mds::test::HttpReply;
using mds::test::LoopbackServer;

namespace {

HttpOptions no_retries() {
    HttpOptions o;
    o.token = "hf_test";
    o.retry.max_retries = 0;
    o.connect_timeout = std::chrono::seconds(5);
    return o;
}

// "http://127.0.0.1:<port>" of a port bound but not listening: connections are refused.
struct RefusingPort {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    std::string url;
    RefusingPort() {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
        url = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    }
    ~RefusingPort() { ::close(fd); }
};

}  // namespace

TEST_CASE("HttpError is an mds::Error that carries the status") {
    const HttpError e("commit to a/b failed: HTTP 412: moved", 412);
    CHECK(e.status == 412);
    CHECK(std::string(e.what()) == "commit to a/b failed: HTTP 412: moved");
    const mds::Error& base = e;
    CHECK(dynamic_cast<const HttpError*>(&base) != nullptr);
}

TEST_CASE("Hub API: a refused call throws HttpError with the answer's status and the same message") {
    LoopbackServer server([](const HttpExchange& x) -> HttpReply {
        if (x.target.find("/revision/") != std::string::npos) return {500, "boom", {}};
        if (x.target == "/api/whoami-v2") return {401, "{\"error\":\"Invalid credentials\"}", {}};
        return {404, "", {}};
    });
    HttpClient http(no_retries());
    HubApi api(http, server.url());
    const RepoRef repo{"org/repo", "model", "main"};
    try {
        api.head(repo);
        FAIL("no exception");
    } catch (const HttpError& e) {
        CHECK(e.status == 500);
        CHECK(std::string(e.what()) == "revision main of org/repo failed: HTTP 500: boom");
    }
    try {
        api.whoami();
        FAIL("no exception");
    } catch (const HttpError& e) {
        CHECK(e.status == 401);
        CHECK(std::string(e.what()) ==
              "whoami failed: HTTP 401: {\"error\":\"Invalid credentials\"}; check the token (HF_TOKEN) and its write access");
    }
}

TEST_CASE("Hub API: a commit refused with 412 is an HttpError; one without a clear answer is CommitUncertain") {
    long commit_status = 412;
    LoopbackServer server([&](const HttpExchange& x) -> HttpReply {
        if (x.method == "POST" && x.target.find("/commit/") != std::string::npos)
            return {commit_status, "{\"error\":\"A commit has happened since. Please refresh and try again.\"}", {}};
        return {404, "", {}};
    });
    HttpClient http(no_retries());
    HubApi api(http, server.url());
    const RepoRef repo{"org/repo", "model", "main"};
    const std::vector<CommitFile> files{{CommitFile::Kind::deleted, "old.txt", "", "", 0}};
    try {
        api.commit(repo, "msg", files, std::string("abc"));
        FAIL("no exception");
    } catch (const CommitUncertain&) {
        FAIL("a 412 is a clear answer");
    } catch (const HttpError& e) {
        CHECK(e.status == 412);
        CHECK(std::string(e.what()) ==
              "commit to org/repo failed: HTTP 412: {\"error\":\"A commit has happened since. Please refresh and try again.\"}");
    }
    commit_status = 503;
    CHECK_THROWS_AS(api.commit(repo, "msg", files, std::string("abc")), CommitUncertain);
}

TEST_CASE("Hub API: no answer at all is an HttpError with status 0") {
    RefusingPort port;
    HttpClient http(no_retries());
    HubApi api(http, port.url);
    try {
        api.head(RepoRef{"org/repo", "model", "main"});
        FAIL("no exception");
    } catch (const HttpError& e) {
        CHECK(e.status == 0);
        CHECK(std::string(e.what()).rfind("revision main of org/repo failed: ", 0) == 0);
    }
}

TEST_CASE("S3: a refused call throws HttpError with the status; the message names S3's code") {
    LoopbackServer server([](const HttpExchange& x) -> HttpReply {
        if (x.method == "DELETE")
            return {500, "<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>", {}};
        if (x.method == "HEAD") return {403, "", {}};
        return {404, "", {}};
    });
    HttpClient http(no_retries());
    S3Settings settings;
    settings.endpoint = server.url();
    settings.credentials = {"AKID", "secret", ""};
    S3Client s3(http, settings);
    try {
        s3.delete_object("bucket", "a/b.txt");
        FAIL("no exception");
    } catch (const HttpError& e) {
        CHECK(e.status == 500);
        CHECK(std::string(e.what()) ==
              "deletion of s3://bucket/a/b.txt failed: HTTP 500 InternalError: We encountered an internal error.");
    }
    try {
        s3.head("bucket", "a/b.txt");
        FAIL("no exception");
    } catch (const HttpError& e) {
        CHECK(e.status == 403);
        CHECK(std::string(e.what()) == "HEAD of s3://bucket/a/b.txt failed: HTTP 403");
    }
}
