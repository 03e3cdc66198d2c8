// run_process: exit codes and signals, both output streams captured without deadlock, standard
// input (also to a child that never reads it), the deadline that kills the whole process group,
// environment overrides, output truncation, and a program that cannot be started.
#include <doctest/doctest.h>

#include <fcntl.h>   // open
#include <signal.h>  // kill
#include <unistd.h>  // dup2, close

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "mds/util/process.h"
#include "test_support.h"

using mds::test::slurp;

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// Whether `pid` names a live (not zombie) process.
bool alive(pid_t pid) {
    if (::kill(pid, 0) != 0) return errno != ESRCH;
    const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    if (stat.empty()) return false;
    const auto paren = stat.rfind(')');
    return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

// Waits up to `limit` for `pid` to die (an orphaned grandchild is reaped by init, not by us).
bool dies_within(pid_t pid, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
        if (!alive(pid)) return true;
        std::this_thread::sleep_for(20ms);
    }
    return !alive(pid);
}

std::string pattern(std::size_t n, unsigned seed) {
    std::string s(n, '\0');
    unsigned x = seed;
    for (auto& c : s) {
        x = x * 1103515245u + 12345u;
        c = static_cast<char>(x >> 16);
    }
    return s;
}

mds::ProcessOptions with_timeout(std::chrono::milliseconds timeout) {
    mds::ProcessOptions o;
    o.timeout = timeout;
    return o;
}

}  // namespace

TEST_CASE("process: exit status, ok() and describe()") {
    const auto ok = mds::run_process({"true"});
    CHECK(ok.started);
    CHECK(ok.exit_code == 0);
    CHECK(ok.signal == 0);
    CHECK_FALSE(ok.timed_out);
    CHECK(ok.ok());
    CHECK(ok.describe() == "exit status 0");

    const auto seven = mds::run_process({"sh", "-c", "exit 7"});
    CHECK(seven.started);
    CHECK(seven.exit_code == 7);
    CHECK_FALSE(seven.ok());
    CHECK(seven.describe() == "exit status 7");

    CHECK_THROWS_AS(mds::run_process({}), std::invalid_argument);
}

TEST_CASE("process: arguments are passed verbatim, without a shell") {
    const auto r = mds::run_process({"printf", "%s|%s|%s", "a b", "$(echo no)", ""});
    REQUIRE(r.ok());
    CHECK(r.out == "a b|$(echo no)|");
}

TEST_CASE("process: stdout and stderr are captured separately, several MB each, no deadlock") {
    // stderr is written first and fills its pipe long before stdout gets anything: a reader that
    // drained stdout to its end before looking at stderr would wait forever.
    const auto r = mds::run_process(
        {"sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' e >&2; head -c 5000000 /dev/zero | tr '\\0' o; echo -n E >&2"},
        with_timeout(60s));
    REQUIRE(r.ok());
    CHECK_FALSE(r.truncated);
    CHECK(r.out == std::string(5000000, 'o'));
    CHECK(r.err == std::string(3000000, 'e') + "E");
}

TEST_CASE("process: both streams written at once") {
    // Two writers run concurrently, interleaving their output on both pipes.
    const auto r = mds::run_process(
        {"sh", "-c", "head -c 4000000 /dev/zero | tr '\\0' a >&2 & head -c 4000000 /dev/zero | tr '\\0' b; wait"},
        with_timeout(60s));
    REQUIRE(r.ok());
    CHECK(r.out.size() == 4000000);
    CHECK(r.err.size() == 4000000);
    CHECK(r.out.find_first_not_of('b') == std::string::npos);
    CHECK(r.err.find_first_not_of('a') == std::string::npos);
}

TEST_CASE("process: stdin round trip through cat (binary, larger than any pipe buffer)") {
    const std::string data = pattern(6 << 20, 42);  // NUL bytes included
    mds::ProcessOptions o;
    o.stdin_data = data;
    o.timeout = 60s;
    const auto r = mds::run_process({"cat"}, o);
    REQUIRE(r.ok());
    CHECK(r.out.size() == data.size());
    CHECK(r.out == data);
    CHECK(r.err.empty());
}

TEST_CASE("process: no stdin data means /dev/null, not the test's own stdin") {
    const auto r = mds::run_process({"sh", "-c", "cat; echo end"}, with_timeout(30s));
    CHECK(r.ok());
    CHECK(r.out == "end\n");
}

TEST_CASE("process: a child that never reads its stdin does not kill the caller with SIGPIPE") {
    mds::ProcessOptions o;
    o.stdin_data = std::string(10 << 20, 'x');
    o.timeout = 30s;
    const auto r = mds::run_process({"true"}, o);
    // Reaching this line at all is the main check: a SIGPIPE would have ended the test binary.
    CHECK(r.started);
    CHECK(r.exit_code == 0);
    CHECK_FALSE(r.timed_out);

    // Same with a child that reads a little, then exits.
    const auto h = mds::run_process({"head", "-c", "5"}, o);
    CHECK(h.exit_code == 0);
    CHECK(h.out == "xxxxx");
}

TEST_CASE("process: the deadline kills the child and reaps it") {
    const auto r = mds::run_process({"sh", "-c", "echo $$; exec sleep 30"}, with_timeout(500ms));
    CHECK(r.started);
    CHECK(r.timed_out);
    CHECK_FALSE(r.ok());
    CHECK(r.exit_code == -1);
    CHECK(r.signal == SIGTERM);
    CHECK(r.elapsed >= 400ms);
    CHECK(r.elapsed < 4000ms);
    CHECK(r.describe().find("timed out after 0.") != std::string::npos);  // not "after 0 s"
    // Its pid is gone entirely: killed and waited for (a zombie would still answer kill(pid, 0)).
    const pid_t pid = static_cast<pid_t>(std::stol(r.out));
    CHECK(::kill(pid, 0) == -1);
    CHECK(errno == ESRCH);
}

TEST_CASE("process: the deadline also kills grandchildren (the whole process group)") {
    const auto dir = mds::test::scratch_dir("process-grandchild");
    const std::string pidfile = (dir / "bg.pid").string();
    const auto r = mds::run_process({"sh", "-c", "sleep 30 & echo $! > '" + pidfile + "'; sleep 30"}, with_timeout(500ms));
    CHECK(r.timed_out);
    CHECK(r.elapsed < 4000ms);
    const std::string text = slurp(pidfile);
    REQUIRE_FALSE(text.empty());
    const pid_t bg = static_cast<pid_t>(std::stol(text));
    CHECK(dies_within(bg, 3000ms));
    if (alive(bg)) ::kill(bg, SIGKILL);
    fs::remove_all(dir);
}

TEST_CASE("process: a background grandchild holding the pipes open does not outlive the deadline") {
    // The shell exits at once; its background sleep keeps stdout open.
    const auto r = mds::run_process({"sh", "-c", "sleep 30 & echo started"}, with_timeout(500ms));
    CHECK(r.started);
    CHECK(r.out == "started\n");
    CHECK(r.elapsed < 4000ms);
}

TEST_CASE("process: a child that ignores SIGTERM gets SIGKILL 2 s later") {
    const auto r = mds::run_process({"sh", "-c", "trap '' TERM; sleep 30; sleep 30"}, with_timeout(300ms));
    CHECK(r.timed_out);
    CHECK(r.signal == SIGKILL);
    CHECK(r.elapsed >= 2000ms);
    CHECK(r.elapsed < 5000ms);
}

TEST_CASE("process: a process that left the group keeps its pipe open: still returns after the deadline") {
    // setsid puts the writer in a session of its own, out of reach of the group kill; it holds
    // stdout open. The caller must stop reading shortly after SIGKILL went to the group.
    const auto dir = mds::test::scratch_dir("process-escaped");
    const std::string pidfile = (dir / "escaped.pid").string();
    const auto r = mds::run_process(
        {"sh", "-c", "setsid sh -c 'echo $$ > \"$0\"; exec sleep 30' '" + pidfile + "' & wait"}, with_timeout(300ms));
    CHECK(r.timed_out);
    CHECK(r.elapsed < 4500ms);
    const std::string text = slurp(pidfile);
    if (!text.empty()) ::kill(static_cast<pid_t>(std::stol(text)), SIGKILL);
    fs::remove_all(dir);
}

TEST_CASE("process: an escaped process that keeps writing does not hang the caller") {
    // A descendant outside the process group (setsid) that writes more often than the read loop's
    // poll interval must not keep run_process reading past its deadline (the watchdog must never
    // hang): it returns about 2.5 s after the deadline (SIGTERM, SIGKILL 2 s later, 0.5 s of reads).
    const auto dir = mds::test::scratch_dir("process-escaped-writer");
    const std::string pidfile = (dir / "writer.pid").string();
    std::atomic<bool> done{false};
    std::thread guard([&] {
        // Kills the escaped writer after 6 s in any case, so that a hanging run_process returns.
        for (int i = 0; i < 600 && !done; ++i) std::this_thread::sleep_for(10ms);
        const std::string text = slurp(pidfile);
        if (!text.empty()) ::kill(-static_cast<pid_t>(std::stol(text)), SIGKILL);
    });
    const auto r = mds::run_process(
        {"sh", "-c",
         "setsid sh -c 'echo $$ > \"$0\"; while :; do echo x; sleep 0.05; done' '" + pidfile + "' & wait"},
        with_timeout(300ms));
    done = true;
    guard.join();
    CHECK(r.timed_out);
    CHECK(r.elapsed < 5000ms);
    fs::remove_all(dir);
}

TEST_CASE("process: a program that does not exist") {
    const auto r = mds::run_process({"mds-no-such-program-xyz", "arg"});
    CHECK_FALSE(r.started);
    CHECK_FALSE(r.ok());
    CHECK(r.start_error.find("mds-no-such-program-xyz") != std::string::npos);
    CHECK(r.describe().find("could not start") != std::string::npos);
    CHECK(r.describe().find("mds-no-such-program-xyz") != std::string::npos);
    CHECK(r.out.empty());
}

TEST_CASE("process: death by a signal") {
    const auto r = mds::run_process({"sh", "-c", "kill -9 $$"}, with_timeout(30s));
    CHECK(r.started);
    CHECK_FALSE(r.timed_out);
    CHECK_FALSE(r.ok());
    CHECK(r.exit_code == -1);
    CHECK(r.signal == 9);
    CHECK(r.describe().find("killed by signal 9") != std::string::npos);
}

TEST_CASE("process: environment overrides are added or replace inherited values") {
    ::setenv("MDS_TEST_INHERITED", "from-parent", 1);
    ::setenv("MDS_TEST_REPLACED", "old", 1);
    mds::ProcessOptions o;
    o.env = {{"MDS_TEST_ADDED", "a b $c"}, {"MDS_TEST_REPLACED", "new"}};
    const auto r = mds::run_process(
        {"sh", "-c", "printf '%s|%s|%s' \"$MDS_TEST_INHERITED\" \"$MDS_TEST_ADDED\" \"$MDS_TEST_REPLACED\"; "
                     "env | grep -c '^MDS_TEST_REPLACED='"},
        o);
    ::unsetenv("MDS_TEST_INHERITED");
    ::unsetenv("MDS_TEST_REPLACED");
    REQUIRE(r.ok());
    CHECK(r.out == "from-parent|a b $c|new1\n");  // and the variable appears once
}

TEST_CASE("process: output beyond max_output_bytes is dropped and flagged") {
    mds::ProcessOptions o;
    o.max_output_bytes = 1000;
    o.timeout = 30s;
    const auto r = mds::run_process({"sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' z; echo short >&2"}, o);
    // The rest was read and dropped: the writer was not stopped by a full pipe or SIGPIPE.
    CHECK(r.ok());
    CHECK(r.truncated);
    CHECK(r.out == std::string(1000, 'z'));
    CHECK(r.err == "short\n");

    o.max_output_bytes = 6;
    const auto exact = mds::run_process({"printf", "abcdef"}, o);
    CHECK(exact.out == "abcdef");
    CHECK_FALSE(exact.truncated);
}

TEST_CASE("process: descriptors of the caller are not inherited") {
    const int fd = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC on purpose
    REQUIRE(fd >= 0);
    REQUIRE(::dup2(fd, 100) == 100);
    ::close(fd);
    const auto r = mds::run_process({"sh", "-c", "if [ -e /proc/$$/fd/100 ]; then echo open; else echo closed; fi"});
    ::close(100);
    REQUIRE(r.ok());
    CHECK(r.out == "closed\n");
}

TEST_CASE("process: stop_on_overflow stops an endless writer as soon as the cap is passed") {
    mds::ProcessOptions o;
    o.max_output_bytes = 1000;
    o.stop_on_overflow = true;
    o.timeout = 30s;
    const auto r = mds::run_process({"yes", "junk"}, o);
    CHECK(r.started);
    CHECK(r.overflowed);
    CHECK(r.truncated);
    CHECK_FALSE(r.timed_out);
    CHECK_FALSE(r.ok());
    CHECK(r.out.size() == 1000);
    CHECK(r.elapsed < 3000ms);  // not the 30 s deadline
    CHECK(r.describe() == "stopped: it printed more than 1000 bytes");

    // Endless stderr counts as well; caps are shown in MiB when they are whole MiB.
    o.max_output_bytes = std::size_t{1} << 20;
    const auto e = mds::run_process({"sh", "-c", "yes error >&2"}, o);
    CHECK(e.overflowed);
    CHECK(e.err.size() == (std::size_t{1} << 20));
    CHECK(e.describe() == "stopped: it printed more than 1 MiB");
}

TEST_CASE("process: timeouts that are absurd, zero or negative neither overflow nor hang") {
    // Beyond 30 days the deadline is cut (no overflow of the clock arithmetic).
    const auto huge = mds::run_process({"sh", "-c", "echo ok"}, with_timeout(std::chrono::milliseconds::max()));
    CHECK(huge.ok());
    CHECK(huge.out == "ok\n");
    const auto negative = mds::run_process({"true"}, with_timeout(-5s));
    CHECK(negative.ok());
    // A deadline of 1 ms is a deadline (not "none"): a sleeping child is stopped.
    const auto tiny = mds::run_process({"sleep", "30"}, with_timeout(1ms));
    CHECK(tiny.timed_out);
    CHECK(tiny.elapsed < 3000ms);
}

TEST_CASE("process: without a deadline, a group member holding the pipes after the child exited is killed 2 s later") {
    // The shell exits at once; its background sleep (same process group) keeps stdout open.
    const auto r = mds::run_process({"sh", "-c", "sleep 30 & echo $!"});
    CHECK(r.started);
    CHECK(r.exit_code == 0);
    CHECK_FALSE(r.timed_out);
    CHECK(r.elapsed >= 1500ms);
    CHECK(r.elapsed < 5000ms);
    REQUIRE_FALSE(r.out.empty());
    const pid_t bg = static_cast<pid_t>(std::stol(r.out));
    CHECK(dies_within(bg, 3000ms));
    if (alive(bg)) ::kill(bg, SIGKILL);
}
