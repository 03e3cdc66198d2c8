// sync_folder's commit step against a scripted Hub on loopback: a commit refused with HTTP 412
// (another writer moved the branch) is tried again on the new head, at most three times in all;
// other refusals are not retried; the files of a batch that fails are reported, not committed.
#include <doctest/doctest.h>

#include <fstream>
#include <mutex>
#include <string>

#include "hub/loopback_server.h"
#include "mds/hub/sync.h"
#include "test_support.h"

using namespace mds::hub;
using mds::test::HttpExchange;
using mds::test::HttpReply;
using mds::test::LoopbackServer;

namespace {

// A Hub holding an empty repository org/repo whose branch head moves on each refused commit;
// `refusals` commits are answered `refusal` before one is accepted.
struct ScriptedHub {
    std::mutex mu;
    int head = 1;
    int refusals = 0;
    long refusal = 412;
    std::vector<std::string> commit_parents;

    HttpReply answer(const HttpExchange& x) {
        std::lock_guard<std::mutex> g(mu);
        if (x.method == "GET" && x.target == "/api/models/org/repo/revision/main")
            return {200, "{\"sha\":\"head" + std::to_string(head) + "\"}", {}};
        if (x.method == "GET" && x.target.rfind("/api/models/org/repo/tree/main", 0) == 0) return {200, "[]", {}};
        if (x.method == "POST" && x.target == "/api/models/org/repo/preupload/main")
            return {200, "{\"files\":[{\"path\":\"a.txt\",\"uploadMode\":\"regular\",\"shouldIgnore\":false}]}", {}};
        if (x.method == "POST" && x.target == "/api/models/org/repo/commit/main") {
            const auto p = x.body.find("\"parentCommit\":\"");
            commit_parents.push_back(p == std::string::npos ? "" : x.body.substr(p + 16, x.body.find('"', p + 16) - p - 16));
            if (refusals > 0) {
                --refusals;
                ++head;  // another writer committed
                return {refusal, "{\"error\":\"A commit has happened since. Please refresh and try again.\"}", {}};
            }
            return {200, "{\"commitOid\":\"c0ffee0000000000\",\"commitUrl\":\"x\"}", {}};
        }
        return {404, "{\"error\":\"not found\"}", {}};
    }
};

SyncOptions options_for(const std::filesystem::path& dir) {
    SyncOptions o;
    o.local_dir = dir.string();
    o.repo = RepoRef{"org/repo", "model", "main"};
    o.progress = mds::Progress::Mode::Off;
    o.http.token = "hf_test";
    o.http.retry.max_retries = 0;
    return o;
}

std::filesystem::path folder_with_one_file(const std::string& name) {
    const auto dir = mds::test::scratch_dir(name);
    std::ofstream(dir / "a.txt") << "hello\n";
    return dir;
}

}  // namespace

TEST_CASE("sync_folder: a commit refused with 412 is tried again on the branch's new head") {
    ScriptedHub hub;
    hub.refusals = 2;
    LoopbackServer server([&](const HttpExchange& x) { return hub.answer(x); });
    const SyncReport r = sync_folder(server.url(), options_for(folder_with_one_file("sync-412")));
    CHECK(r.failed.empty());
    CHECK(r.commits == std::vector<std::string>{"c0ffee0000000000"});
    CHECK(r.uploaded == std::vector<std::string>{"a.txt"});
    CHECK(r.uploaded_bytes == 6);
    CHECK(hub.commit_parents == std::vector<std::string>{"head1", "head2", "head3"});
}

TEST_CASE("sync_folder: a third 412 gives up; the batch's files are reported with the Hub's answer") {
    ScriptedHub hub;
    hub.refusals = 3;
    LoopbackServer server([&](const HttpExchange& x) { return hub.answer(x); });
    const SyncReport r = sync_folder(server.url(), options_for(folder_with_one_file("sync-412x3")));
    CHECK(r.commits.empty());
    CHECK(r.uploaded.empty());
    REQUIRE(r.failed.size() == 1);
    CHECK(r.failed[0].first == "a.txt");
    CHECK(r.failed[0].second ==
          "not committed: commit to org/repo failed: HTTP 412: {\"error\":\"A commit has happened since. Please refresh and try again.\"}");
    CHECK(hub.commit_parents.size() == 3);
}

TEST_CASE("sync_folder: a refusal other than 412 is not tried again") {
    ScriptedHub hub;
    hub.refusals = 1;
    hub.refusal = 422;
    LoopbackServer server([&](const HttpExchange& x) { return hub.answer(x); });
    const SyncReport r = sync_folder(server.url(), options_for(folder_with_one_file("sync-422")));
    CHECK(r.commits.empty());
    REQUIRE(r.failed.size() == 1);
    CHECK(r.failed[0].second.rfind("not committed: commit to org/repo failed: HTTP 422: ", 0) == 0);
    CHECK(hub.commit_parents.size() == 1);
}
