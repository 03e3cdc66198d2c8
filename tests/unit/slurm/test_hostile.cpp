// mds-slurm-status under hostile input (issue 24): squeue answers nested without end, squeues that
// print without end or hang, --timeout values that are not numbers of seconds, state files that are
// too large, too deep or of the wrong shape, and a log without newlines. Each is an mds::Error or an
// UNKNOWN within a bounded time and memory, never another exception, a crash or a hang.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include "mds/slurm/squeue.h"
#include "mds/slurm/status.h"
#include "mds/slurm/watch.h"
#include "mds/util/error.h"
#include "test_support.h"

using namespace mds::slurm;
using namespace std::chrono_literals;

namespace {

std::string hostile_script(const std::filesystem::path& dir, const std::string& name, const std::string& body) {
    const std::string path = (dir / name).string();
    std::ofstream f(path);
    f << "#!/bin/sh\n" << body << "\n";
    f.close();
    ::chmod(path.c_str(), 0755);
    return path;
}

void write(const std::filesystem::path& p, const std::string& s) {
    std::ofstream f(p, std::ios::binary);
    f << s;
}

StatusOptions hostile_options(const std::string& squeue) {
    StatusOptions o;
    o.watch.job_name = "tr11-176B-ml";
    o.squeue = squeue;
    o.use_sacct = false;
    o.timeout_s = 20;
    return o;
}

std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const mds::Error& e) {
        return e.what();
    }
    return {};
}

}  // namespace

TEST_CASE("hostile: squeue JSON nested deeper than 64 levels is refused before it is built") {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    const std::string m = message_of([&] { (void)parse_squeue_json(deep); });
    CHECK(m.find("squeue --json: JSON nested deeper than 64 levels (at byte 64)") != std::string::npos);
    // Brackets inside strings are text, not nesting; escaped quotes do not end a string.
    const std::string in_string = R"({"jobs": [], "x": ")" + std::string(1000, '[') + R"(\"[[[["})";
    CHECK(parse_squeue_json(in_string).jobs.empty());
    // 64 levels are fine (as far as depth goes).
    const std::string ok = R"({"jobs": [], "x": )" + std::string(63, '[') + std::string(63, ']') + "}";
    CHECK(parse_squeue_json(ok).jobs.empty());
    const std::string too_deep = R"({"jobs": [], "x": )" + std::string(64, '[') + std::string(64, ']') + "}";
    CHECK_THROWS_AS((void)parse_squeue_json(too_deep), mds::Error);
}

TEST_CASE("hostile: junk in the text forms is named with escaped bytes") {
    const std::string m = message_of([&] { (void)parse_squeue_text(std::string("x\x1b[2J|b|c|d|e|f|g|h|i|j|k|l|m|n\n")); });
    CHECK(m.find("\\x1b") != std::string::npos);
    CHECK(m.find('\x1b') == std::string::npos);
}

TEST_CASE("hostile: --timeout must be a finite number of seconds in (0, a day]") {
    for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(), 0.0, -1.0,
                       1e300, 86400.5}) {
        CHECK_THROWS_AS(check_timeout(bad), mds::UsageError);
        const std::string m = message_of([&] { check_timeout(bad); });
        CHECK(m.find("--timeout") == 0);
    }
    for (double good : {1e-9, 0.5, 1.0, 30.0, 86400.0}) CHECK_NOTHROW(check_timeout(good));
    // query_queue checks it too, before running anything.
    StatusOptions o = hostile_options("/bin/true");
    o.timeout_s = std::nan("");
    CHECK_THROWS_AS((void)query_queue(o), mds::UsageError);
}

TEST_CASE("hostile: a tiny timeout is still a deadline for a squeue that hangs") {
    const auto dir = mds::test::scratch_dir("slurm-hostile-hang");
    StatusOptions o = hostile_options(hostile_script(dir, "squeue", "exec sleep 300"));
    o.timeout_s = 1e-9;
    const auto t0 = std::chrono::steady_clock::now();
    const QueueView v = query_queue(o);
    CHECK_FALSE(v.reachable);
    CHECK(v.error.find("did not answer within 1e-09 s") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - t0 < 4s);
    std::filesystem::remove_all(dir);
}

TEST_CASE("hostile: a squeue that prints without end is stopped at its cap") {
    const auto dir = mds::test::scratch_dir("slurm-hostile-endless");
    const std::string sq = hostile_script(dir, "squeue", "exec yes '[[[[[[[[[[[[[[[['");
    for (const char* fmt : {"auto", "json", "text"}) {
        StatusOptions o = hostile_options(sq);
        o.format = fmt;
        const auto t0 = std::chrono::steady_clock::now();
        const QueueView v = query_queue(o);
        CHECK_FALSE(v.reachable);
        CHECK(v.error.find("stopped: it printed more than") != std::string::npos);
        CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // not the 20 s deadline
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("hostile: state files too large, too deep or of the wrong shape are mds::Errors") {
    const auto dir = mds::test::scratch_dir("slurm-hostile-state");
    const auto big = dir / "big.json";
    write(big, std::string((16u << 20) + 1, ' '));
    const std::string m = message_of([&] { (void)load_state(big.string()); });
    CHECK(m.find("at most") != std::string::npos);
    CHECK(m.find(big.string()) != std::string::npos);

    const auto deep = dir / "deep.json";
    write(deep, std::string(100000, '['));
    CHECK(message_of([&] { (void)load_state(deep.string()); }).find("nested deeper than 64 levels") != std::string::npos);

    const auto shapes = dir / "shapes.json";
    for (const char* text : {R"({"format": "mds-slurm-status-state/1", "unreachable_runs": "x"})",
                             R"({"format": "mds-slurm-status-state/1", "alerts": {"a": 5}})",
                             R"({"format": "mds-slurm-status-state/1", "log": {"path": 5}})", R"([1, 2])", "\xff\xfe"}) {
        write(shapes, text);
        CHECK_THROWS_AS((void)load_state(shapes.string()), mds::Error);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("hostile: a log line of 3 MiB without a newline is read in bounded pieces") {
    const auto dir = mds::test::scratch_dir("slurm-hostile-log");
    const auto log = dir / "main_log.txt";
    write(log, " iteration 5/ 10 | loss\n" + std::string(3u << 20, 'x'));
    const LogScan s = scan_log(log.string());
    CHECK(s.error.empty());
    REQUIRE(s.last.has_value());
    CHECK(s.last->iteration == 5);
    write(log, std::string(3u << 20, 'y'));
    const LogScan none = scan_log(log.string());
    CHECK(none.error.empty());
    CHECK_FALSE(none.last.has_value());
    std::filesystem::remove_all(dir);
}

TEST_CASE("hostile: a FIFO as the log or the state file blocks nothing") {
    const auto dir = mds::test::scratch_dir("slurm-hostile-fifo");
    const auto fifo = dir / "fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
    const auto t0 = std::chrono::steady_clock::now();
    const LogScan s = scan_log(fifo.string());
    CHECK(s.error.find("not a regular file") != std::string::npos);
    CHECK(message_of([&] { (void)load_state(fifo.string()); }).find("not a regular file") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    std::filesystem::remove_all(dir);
}
