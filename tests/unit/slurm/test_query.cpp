// query_queue (slurm/status.h) against stand-in squeue / sacct programs that replay what real SLURM
// versions print (tests/data/slurm/): the fallback from --json to the text form where --json does
// not exist, the two ways a dead controller shows (22.05: exit 0 with errors[]; 24.11: exit 1), a
// hanging squeue, sacct with and without accounting, and the client-side user filter.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "mds/slurm/status.h"
#include "mds/util/files.h"
#include "test_support.h"

using namespace mds::slurm;

namespace {

const std::string kData = std::string(MDS_SOURCE_DIR) + "/tests/data/slurm/";

// A shell script at dir/name that logs its arguments to dir/name.calls, then runs `body`.
std::string script(const std::filesystem::path& dir, const std::string& name, const std::string& body) {
    const std::string path = (dir / name).string();
    std::ofstream f(path);
    f << "#!/bin/sh\necho \"$*\" >> '" << path << ".calls'\n" << body << "\n";
    f.close();
    ::chmod(path.c_str(), 0755);
    return path;
}

int calls(const std::string& path) {
    if (!mds::file_exists(path + ".calls")) return 0;
    const std::string s = mds::read_file(path + ".calls");
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
}

StatusOptions options(const std::string& squeue, const std::string& name = "tr1-13B-round3") {
    StatusOptions o;
    o.watch.job_name = name;
    o.squeue = squeue;
    o.use_sacct = false;
    o.timeout_s = 10;
    return o;
}

}  // namespace

TEST_CASE("a SLURM without --json: the text form is used") {
    const auto dir = mds::test::scratch_dir("slurm-query-nojson");
    const auto sq = script(dir, "squeue",
                           "case \"$*\" in *--json*) echo \"squeue: unrecognized option '--json'\" >&2; exit 1;; esac\n"
                           "cat '" + kData + "squeue-22.05.8-text.txt'");
    const QueueView v = query_queue(options(sq));
    CHECK(v.reachable);
    CHECK(v.jobs.size() == 9);  // the stand-in ignores --name; the watchdog filters by name later
    CHECK(calls(sq) == 2);
    const std::string args = mds::read_file(sq + ".calls");
    CHECK(args.find("-h -t all -o %A|%i|%F|%K|%T|%r|%V|%S|%e|%M|%u|%P|%N|%j --name=tr1-13B-round3") != std::string::npos);
}

TEST_CASE("SLURM 24.11 with the controller down: squeue --json exits 1; UNKNOWN at once") {
    const auto dir = mds::test::scratch_dir("slurm-query-down24");
    const auto sq = script(dir, "squeue",
                           "echo 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2; exit 1");
    const QueueView v = query_queue(options(sq));
    CHECK_FALSE(v.reachable);
    CHECK(v.error.find("Unable to contact slurm controller") != std::string::npos);
    CHECK(calls(sq) == 1);  // not asked again in the text form: it would wait as long again
}

TEST_CASE("SLURM 22.05 with the controller down: squeue --json exits 0 with errors[]") {
    const auto dir = mds::test::scratch_dir("slurm-query-down22");
    const auto sq = script(dir, "squeue", "cat '" + kData + "squeue-22.05.8-unreachable.json'");
    const QueueView v = query_queue(options(sq));
    CHECK_FALSE(v.reachable);
    CHECK(v.error.find("Failed while looking for jobs") != std::string::npos);
    CHECK(calls(sq) == 1);
}

TEST_CASE("unreadable JSON: auto falls back to the text form, json says why") {
    const auto dir = mds::test::scratch_dir("slurm-query-garbage");
    const auto sq = script(dir, "squeue",
                           "case \"$*\" in *--json*) echo 'Unable to find plugin: data_parser'; exit 0;; esac\n"
                           "cat '" + kData + "squeue-24.11.5-text.txt'");
    QueueView v = query_queue(options(sq));
    CHECK(v.reachable);
    CHECK(v.jobs.size() == 9);
    StatusOptions o = options(sq);
    o.format = "json";
    v = query_queue(o);
    CHECK_FALSE(v.reachable);
    CHECK(v.error.find("not JSON") != std::string::npos);
}

TEST_CASE("a squeue that hangs is stopped at --timeout") {
    const auto dir = mds::test::scratch_dir("slurm-query-hang");
    const auto sq = script(dir, "squeue", "sleep 30");
    StatusOptions o = options(sq);
    o.timeout_s = 1;
    const auto t0 = std::chrono::steady_clock::now();
    const QueueView v = query_queue(o);
    CHECK_FALSE(v.reachable);
    CHECK(v.error.find("did not answer within 1 s") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
}

TEST_CASE("the JSON form is filtered by user and partition here") {
    const auto dir = mds::test::scratch_dir("slurm-query-users");
    const auto sq = script(dir, "squeue", "cat '" + kData + "squeue-24.11.5-v0.0.42.json'");
    StatusOptions o = options(sq);
    o.users = {"root"};
    CHECK(query_queue(o).jobs.size() == 9);
    o.users = {"six001", "six002"};
    CHECK(query_queue(o).jobs.empty());
    o.users.clear();
    o.partitions = {"gpu_p5", "debug"};
    CHECK(query_queue(o).jobs.size() == 9);
    o.partitions = {"gpu_p5"};
    CHECK(query_queue(o).jobs.empty());
    const std::string args = mds::read_file(sq + ".calls");
    CHECK(args.find("--json -t all --name=tr1-13B-round3 --user=six001,six002") != std::string::npos);
}

TEST_CASE("sacct: finished jobs where accounting answers, nothing where it is disabled") {
    const auto dir = mds::test::scratch_dir("slurm-query-sacct");
    const auto sq = script(dir, "squeue", "cat '" + kData + "squeue-24.11.5-v0.0.42.json'");
    const auto sa = script(dir, "sacct",
                           "printf '%s\\n' '41|tr1-13B-round3|NODE_FAIL|2026-11-20T10:00:00|2026-11-20T12:00:00|02:00:00|0:0|jz[001-004]|root'");
    StatusOptions o = options(sq);
    o.use_sacct = true;
    o.sacct = sa;
    QueueView v = query_queue(o);
    REQUIRE(v.history.size() == 1);
    CHECK(v.history[0].state == "NODE_FAIL");
    CHECK(mds::read_file(sa + ".calls").find("-X -n -P --name=tr1-13B-round3 -S now-7days") != std::string::npos);
    o.sacct = script(dir, "sacct-off", "echo 'Slurm accounting storage is disabled'; exit 1");
    v = query_queue(o);
    CHECK(v.reachable);
    CHECK(v.history.empty());
}
