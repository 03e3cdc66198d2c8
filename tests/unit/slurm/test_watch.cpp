// The watchdog's judgement (slurm/watch.h): the iteration-line parser and the backwards log scan,
// --watch-disk specs and disk findings, the job findings for each queue situation (running,
// scheduled, stuck, unreachable, failed, stalled), which alerts are sent on each run, and the
// state file kept between runs.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/time.h>  // utimes

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mds/slurm/watch.h"
#include "mds/util/error.h"
#include "test_support.h"

using mds::test::contains;
using mds::test::spit;

namespace fs = std::filesystem;
using namespace mds::slurm;

namespace {

constexpr std::int64_t kNow = 1'760'000'000;  // a fixed "now" (2025-10-09)
const std::string kName = "tr1-13B-round3";
const std::string kMegatron =
    " iteration     1200/  292968 | consumed samples:      2457600 | elapsed time per iteration (ms): 40977.4 | "
    "learning rate: 5.999E-05 | global batch size:  2048 | lm loss: 2.467611E+00 | loss scale: 1.0 |";

const Finding* find_key(const std::vector<Finding>& fs, const std::string& key) {
    for (const auto& f : fs)
        if (f.key == key) return &f;
    return nullptr;
}

const Finding* find_prefix(const std::vector<Finding>& fs, const std::string& prefix) {
    for (const auto& f : fs)
        if (f.key.rfind(prefix, 0) == 0) return &f;
    return nullptr;
}

int count_level(const std::vector<Finding>& fs, Level level) {
    return static_cast<int>(std::count_if(fs.begin(), fs.end(), [&](const Finding& f) { return f.level == level; }));
}

std::string dump(const std::vector<Finding>& fs) {
    std::string s;
    for (const auto& f : fs) s += std::string(level_label(f.level)) + " [" + f.key + "] " + f.text + "\n";
    return s;
}

Job job(const std::string& id, const std::string& state, const std::string& reason = "None",
        const std::string& name = kName) {
    Job j;
    j.id = id;
    j.job_id = std::stoll(id);
    j.name = name;
    j.state = state;
    j.reason = reason;
    j.user = "stas";
    j.partition = "gpu_p13";
    j.submit_time = kNow - 600;
    return j;
}

Job running_job(std::int64_t started_ago) {
    Job j = job("1001", "RUNNING");
    j.start_time = kNow - started_ago;
    j.nodes = "jz[101-148]";
    return j;
}

WatchConfig config(const std::string& log = "", double stall_minutes = 0) {
    WatchConfig c;
    c.job_name = kName;
    c.log_file = log;
    c.stall_minutes = stall_minutes;
    return c;
}

std::vector<Finding> assess(const WatchConfig& c, const std::vector<Job>& jobs, std::int64_t now = kNow,
                            const LogScan* log = nullptr, std::vector<Job> history = {}) {
    QueueView q;
    q.jobs = jobs;
    q.history = std::move(history);
    WatchState state;
    return assess_jobs(c, q, log, state, now);
}

LogScan log_at(std::int64_t mtime, std::int64_t iteration, std::uint64_t offset = 5000) {
    LogScan l;
    l.path = "/scratch/tr1/logs/main_log.txt";
    l.mtime = mtime;
    l.size = offset + 300;
    l.last = IterationLine{iteration, 292968, offset, true};
    return l;
}

Finding alert(const std::string& key, const std::string& text = "something is wrong") {
    return {Level::alert, key, text, "[ALERT] " + text};
}

std::vector<std::string> keys(const std::vector<Finding>& fs) {
    std::vector<std::string> k;
    for (const auto& f : fs) k.push_back(f.key);
    return k;
}

}  // namespace

// --- parse_iteration_line ------------------------------------------------------------------------

TEST_CASE("watch: Megatron iteration lines parse, with or without rank prefixes") {
    auto p = parse_iteration_line(kMegatron);
    REQUIRE(p);
    CHECK(p->first == 1200);
    CHECK(p->second == 292968);

    p = parse_iteration_line("[default7]:" + kMegatron);
    REQUIRE(p);
    CHECK(p->first == 1200);
    CHECK(p->second == 292968);

    p = parse_iteration_line("0: [2025-10-09 10:11:12] iteration 5/10 | lm loss: 3.0");
    REQUIRE(p);
    CHECK(p->first == 5);
    CHECK(p->second == 10);

    p = parse_iteration_line(" iteration 7/8|");  // no space before '|'
    REQUIRE(p);
    CHECK(p->first == 7);

    // The first "iteration" word is not always the one with the numbers.
    p = parse_iteration_line("after iteration warmup:  iteration    42/   100 | x");
    REQUIRE(p);
    CHECK(p->first == 42);
    CHECK(p->second == 100);
}

TEST_CASE("watch: lines that are not iteration lines") {
    CHECK_FALSE(parse_iteration_line(""));
    CHECK_FALSE(parse_iteration_line("iteration 5 of 10"));
    CHECK_FALSE(parse_iteration_line("iterations 5/10 |"));
    CHECK_FALSE(parse_iteration_line(" iteration     1200/  292968 consumed samples: 2457600"));  // no '|'
    CHECK_FALSE(parse_iteration_line(" iteration     1200/  292968"));
    CHECK_FALSE(parse_iteration_line(" iteration     1200/ | x"));
    CHECK_FALSE(parse_iteration_line(" iteration /292968 | x"));
    CHECK_FALSE(parse_iteration_line("saving checkpoint at iteration    1200 to /scratch/checkpoints"));
    CHECK_FALSE(parse_iteration_line("iteration"));
}

// --- scan_log ------------------------------------------------------------------------------------

TEST_CASE("watch: scan_log finds the last iteration line at the end of the log") {
    const auto dir = mds::test::scratch_dir("watch-scan-end");
    const auto path = (dir / "log.txt").string();
    const std::string head = "starting\n iteration        1/  292968 | a |\n some info\n";
    const std::string last = "[default0]: iteration     1200/  292968 | consumed samples: 2457600 |";
    spit(path, head + last + "\n\n  \n");
    const LogScan s = scan_log(path);
    CHECK(s.error.empty());
    CHECK(s.path == path);
    CHECK(s.size == head.size() + last.size() + 5);
    CHECK(s.mtime > 0);
    REQUIRE(s.last);
    CHECK(s.last->iteration == 1200);
    CHECK(s.last->total == 292968);
    CHECK(s.last->offset == head.size());
    CHECK(s.last->last_line);  // only blank lines follow

    // Without a final newline too.
    spit(path, head + last);
    const LogScan t = scan_log(path);
    REQUIRE(t.last);
    CHECK(t.last->iteration == 1200);
    CHECK(t.last->offset == head.size());
    CHECK(t.last->last_line);
    fs::remove_all(dir);
}

TEST_CASE("watch: scan_log with other lines after the last iteration line") {
    const auto dir = mds::test::scratch_dir("watch-scan-after");
    const auto path = (dir / "log.txt").string();
    const std::string head = " iteration      999/  292968 | a |\n";
    const std::string line = " iteration     1000/  292968 | b |\n";
    spit(path, head + line + "[2025-10-09] watchdog: RUNNING\nWARNING: something\n");
    const LogScan s = scan_log(path);
    REQUIRE(s.last);
    CHECK(s.last->iteration == 1000);
    CHECK(s.last->offset == head.size());
    CHECK_FALSE(s.last->last_line);
    fs::remove_all(dir);
}

TEST_CASE("watch: scan_log of a log with CRLF line ends") {
    const auto dir = mds::test::scratch_dir("watch-scan-crlf");
    const auto path = (dir / "log.txt").string();
    const std::string head = "start\r\n iteration 10/ 20 | a |\r\n";
    spit(path, head + " iteration 11/ 20 | b |\r\n\r\n");
    LogScan s = scan_log(path);
    REQUIRE(s.last);
    CHECK(s.last->iteration == 11);
    CHECK(s.last->total == 20);
    CHECK(s.last->offset == head.size());
    CHECK(s.last->last_line);

    spit(path, head + "other\r\n");
    s = scan_log(path);
    REQUIRE(s.last);
    CHECK(s.last->iteration == 10);
    CHECK(s.last->offset == 7);
    CHECK_FALSE(s.last->last_line);
    fs::remove_all(dir);
}

TEST_CASE("watch: scan_log finds a line that spans the 1 MiB block boundary") {
    const auto dir = mds::test::scratch_dir("watch-scan-boundary");
    const auto path = (dir / "log.txt").string();
    const std::uint64_t block = 1 << 20;
    // Filler after the iteration line, without iteration lines; chosen so that the file's last
    // 1 MiB block starts in the middle of the iteration line.
    const std::string line = " iteration     4242/  292968 | consumed samples: 8687616 | lm loss: 2.1 |\n";
    std::string filler;
    while (filler.size() + 100 < block - line.size() + 30) filler += "[default3]: some warning that repeats itself\n";
    filler += std::string(block - line.size() + 30 - filler.size() - 1, '.') + "\n";
    std::string head;
    while (head.size() < 3 * block) head += " iteration       17/  292968 | old |\nnoise\n";
    head += "x\n";
    const std::string text = head + line + filler;
    // The block read first is [size - 1 MiB, size): it must begin inside `line`.
    REQUIRE(text.size() - block > head.size());
    REQUIRE(text.size() - block < head.size() + line.size() - 1);
    spit(path, text);
    const LogScan s = scan_log(path);
    CHECK(s.error.empty());
    CHECK(s.size == text.size());
    REQUIRE(s.last);
    CHECK(s.last->iteration == 4242);
    CHECK(s.last->total == 292968);
    CHECK(s.last->offset == head.size());
    CHECK_FALSE(s.last->last_line);

    // The last block starting exactly at the line's start, or right after its newline.
    for (std::size_t cut : {std::size_t{0}, line.size()}) {
        CAPTURE(cut);
        std::string tail;  // size - 1 MiB == head.size() + cut
        const std::size_t want = block + cut - line.size();
        while (tail.size() < want) tail += tail.size() % 64 == 63 || tail.size() + 1 == want ? '\n' : '-';
        const std::string t2 = head + line + tail;
        REQUIRE(t2.size() - block == head.size() + cut);
        spit(path, t2);
        const LogScan s2 = scan_log(path);
        REQUIRE(s2.last);
        CHECK(s2.last->iteration == 4242);
        CHECK(s2.last->offset == head.size());
        CHECK_FALSE(s2.last->last_line);
    }
    fs::remove_all(dir);
}

TEST_CASE("watch: scan_log reads the whole file, or stops after max_scan_bytes") {
    const auto dir = mds::test::scratch_dir("watch-scan-max");
    const auto path = (dir / "log.txt").string();
    std::string filler;
    while (filler.size() < 3 << 20) filler += "no progress here, just chatter\n";
    spit(path, " iteration 3/ 9 | a |\n" + filler);
    const LogScan all = scan_log(path);
    REQUIRE(all.last);
    CHECK(all.last->iteration == 3);
    CHECK(all.last->offset == 0);
    const LogScan some = scan_log(path, 1 << 20);
    CHECK(some.error.empty());
    CHECK_FALSE(some.last);
    CHECK(some.size == all.size);
    fs::remove_all(dir);
}

TEST_CASE("watch: scan_log without an iteration line, empty, missing, or a directory") {
    const auto dir = mds::test::scratch_dir("watch-scan-none");
    const auto path = (dir / "log.txt").string();
    spit(path, "loading data\nbuilding model\n");
    LogScan s = scan_log(path);
    CHECK(s.error.empty());
    CHECK_FALSE(s.last);
    CHECK(s.size == 28);

    spit(path, "");
    s = scan_log(path);
    CHECK(s.error.empty());
    CHECK_FALSE(s.last);
    CHECK(s.size == 0);

    const auto missing = (dir / "no-such-log.txt").string();
    s = scan_log(missing);
    CHECK_FALSE(s.error.empty());
    CHECK(contains(s.error, missing));
    CHECK_FALSE(s.last);

    s = scan_log(dir.string());
    CHECK(contains(s.error, dir.string()));
    CHECK_FALSE(s.last);
    fs::remove_all(dir);
}

// --- disks ---------------------------------------------------------------------------------------

TEST_CASE("watch: --watch-disk specs") {
    DiskWatch w = parse_disk_watch("/scratch:90");
    CHECK(w.path == "/scratch");
    CHECK(w.max_percent == 90.0);
    CHECK(w.max_inode_percent == 90.0);

    w = parse_disk_watch("/scratch:90:80");
    CHECK(w.path == "/scratch");
    CHECK(w.max_percent == 90.0);
    CHECK(w.max_inode_percent == 80.0);

    w = parse_disk_watch("/a:b:85");
    CHECK(w.path == "/a:b");
    CHECK(w.max_percent == 85.0);
    CHECK(w.max_inode_percent == 85.0);

    w = parse_disk_watch("/gpfs/work:97.5");
    CHECK(w.max_percent == 97.5);

    w = parse_disk_watch("/a:100");
    CHECK(w.max_percent == 100.0);

    for (const char* bad : {"x", "/a:0", "/a:101", "/a:abc", ":90", "/a:", "/a:90:", "/a:90:0", "/a:-5", "/a:nan"}) {
        CAPTURE(std::string(bad));
        CHECK_THROWS_AS(parse_disk_watch(bad), mds::UsageError);
    }
    try {
        parse_disk_watch("/a:101");
        FAIL("no exception");
    } catch (const mds::UsageError& e) {
        CHECK(contains(e.what(), "/a:101"));
    }
}

TEST_CASE("watch: disk findings") {
    const std::vector<DiskWatch> watches = {{"/scratch", 90, 90}, {"/work", 90, 50}, {"/home", 80, 80}, {"/gone", 90, 90}};
    DiskUsage full;  // 95 % space used
    full.total_bytes = 1000ull << 30;
    full.used_bytes = 950ull << 30;
    full.avail_bytes = 50ull << 30;
    full.total_inodes = 1000;
    full.used_inodes = 10;
    DiskUsage inodes;  // space fine, 60 % inodes
    inodes.total_bytes = 1000ull << 30;
    inodes.used_bytes = 100ull << 30;
    inodes.avail_bytes = 900ull << 30;
    inodes.total_inodes = 1000;
    inodes.used_inodes = 600;
    DiskUsage uncounted;  // 50 %, no inode counts (e.g. some network filesystems)
    uncounted.total_bytes = 200;
    uncounted.used_bytes = 100;
    uncounted.avail_bytes = 100;
    DiskUsage broken;
    broken.error = "cannot check disk /gone: No such file or directory";

    CHECK(full.percent() == doctest::Approx(95.0));
    CHECK(inodes.inode_percent() == doctest::Approx(60.0));
    CHECK(uncounted.inode_percent() == 0.0);

    const auto fs = assess_disks(watches, {full, inodes, uncounted, broken});
    INFO(dump(fs));
    REQUIRE(fs.size() == 4);
    CHECK(fs[0].level == Level::alert);
    CHECK(fs[0].key == "disk:/scratch");
    CHECK(contains(fs[0].text, "/scratch"));
    CHECK(contains(fs[0].text, "95.0%"));
    CHECK(contains(fs[0].subject, "/scratch"));
    CHECK(fs[1].level == Level::alert);
    CHECK(fs[1].key == "inodes:/work");
    CHECK(contains(fs[1].text, "inodes"));
    CHECK(fs[2].level == Level::pulse);
    CHECK(fs[2].key == "disk:/home");
    CHECK(contains(fs[2].text, "not counted"));
    CHECK(fs[3].level == Level::unknown);
    CHECK(fs[3].key == "disk:/gone");
    CHECK(contains(fs[3].text, "No such file"));

    // Exactly at the threshold counts as reached; just below does not.
    DiskUsage at;
    at.used_bytes = 90;
    at.avail_bytes = 10;
    DiskUsage below;
    below.used_bytes = 89;
    below.avail_bytes = 11;
    const auto edge = assess_disks({{"/a", 90, 90}, {"/b", 90, 90}}, {at, below});
    REQUIRE(edge.size() == 2);
    CHECK(edge[0].level == Level::alert);
    CHECK(edge[1].level == Level::pulse);

    // Both space and inodes over: two alerts with distinct keys.
    DiskUsage both = full;
    both.used_inodes = 999;
    const auto two = assess_disks({{"/x", 90, 90}}, {both});
    CHECK(keys(two) == std::vector<std::string>{"disk:/x", "inodes:/x"});
    CHECK(count_level(two, Level::alert) == 2);
}

TEST_CASE("watch: disk_usage of a real directory") {
    const DiskUsage u = disk_usage(fs::temp_directory_path().string());
    CHECK(u.error.empty());
    CHECK(u.total_bytes > 0);
    CHECK(u.used_bytes <= u.total_bytes);
    CHECK(u.percent() >= 0.0);
    CHECK(u.percent() <= 100.0);
    const DiskUsage bad = disk_usage("/no/such/dir/for/mds/tests");
    CHECK(contains(bad.error, "/no/such/dir/for/mds/tests"));
}

// --- assess_jobs: the queue --------------------------------------------------------------------

TEST_CASE("watch: one RUNNING job: a pulse, no alert") {
    Job j = running_job(3600);
    const auto fs = assess(config(), {j});
    INFO(dump(fs));
    REQUIRE(fs.size() == 1);
    CHECK(fs[0].level == Level::pulse);
    CHECK(fs[0].key == "running:1001");
    CHECK(contains(fs[0].text, kName));
    CHECK(contains(fs[0].text, "is running for 1h 00m"));
    CHECK(contains(fs[0].text, "jz[101-148]"));
}

TEST_CASE("watch: no job of that name: not-scheduled alert") {
    const auto fs = assess(config(), {});
    INFO(dump(fs));
    const Finding* a = find_key(fs, "not-scheduled");
    REQUIRE(a);
    CHECK(a->level == Level::alert);
    CHECK(contains(a->text, kName));
    CHECK(contains(a->subject, kName));
    CHECK(count_level(fs, Level::alert) == 1);
}

TEST_CASE("watch: PENDING jobs that will start by themselves are SCHEDULED") {
    SUBCASE("waiting for a dependency") {
        const auto fs = assess(config(), {job("1002", "PENDING", "Dependency")});
        INFO(dump(fs));
        CHECK_FALSE(find_key(fs, "not-scheduled"));
        CHECK(count_level(fs, Level::alert) == 0);
        const Finding* p = find_key(fs, "pending:1002");
        REQUIRE(p);
        CHECK(p->level == Level::pulse);
        CHECK(contains(p->text, "depends on"));
    }
    SUBCASE("an array task waiting for the previous one (%1)") {
        Job j = job("1003", "PENDING", "JobArrayTaskLimit");
        j.id = "1003_[2-10%1]";
        const auto fs = assess(config(), {j});
        INFO(dump(fs));
        CHECK_FALSE(find_key(fs, "not-scheduled"));
        const Finding* p = find_key(fs, "pending:1003_[2-10%1]");
        REQUIRE(p);
        CHECK(p->level == Level::pulse);
        CHECK(contains(p->text, "1003_[2-10%1]"));
    }
    SUBCASE("with an expected start time") {
        Job j = job("1004", "PENDING", "Resources");
        j.start_time = kNow + 2 * 3600 + 300;
        const auto fs = assess(config(), {j});
        INFO(dump(fs));
        CHECK_FALSE(find_key(fs, "not-scheduled"));
        const Finding* p = find_key(fs, "pending:1004");
        REQUIRE(p);
        CHECK(contains(p->text, "scheduled to start in 2h 05m"));
    }
    SUBCASE("Priority, no start time") {
        const auto fs = assess(config(), {job("1005", "PENDING", "Priority")});
        CHECK_FALSE(find_key(fs, "not-scheduled"));
        CHECK(find_key(fs, "pending:1005"));
    }
}

TEST_CASE("watch: PENDING jobs that will never start by themselves: a note and the alert") {
    for (const char* reason : {"JobHeldUser", "PartitionConfig", "DependencyNeverSatisfied"}) {
        CAPTURE(std::string(reason));
        const auto fs = assess(config(), {job("1006", "PENDING", reason)});
        INFO(dump(fs));
        const Finding* n = find_key(fs, "stuck:1006");
        REQUIRE(n);
        CHECK(n->level == Level::note);
        CHECK(contains(n->text, reason));
        const Finding* a = find_key(fs, "not-scheduled");
        REQUIRE(a);
        CHECK(a->level == Level::alert);
        CHECK(contains(a->text, "1 job(s)"));
        CHECK_FALSE(find_prefix(fs, "pending:"));
    }
}

TEST_CASE("watch: a job pending longer than max_pending_hours is stuck") {
    WatchConfig c = config();
    c.max_pending_hours = 6;
    Job j = job("1007", "PENDING", "Priority");
    j.submit_time = kNow - 7 * 3600;
    auto fs = assess(c, {j});
    INFO(dump(fs));
    REQUIRE(find_key(fs, "stuck:1007"));
    CHECK(contains(find_key(fs, "stuck:1007")->text, "7h 00m"));
    CHECK(find_key(fs, "not-scheduled"));

    j.submit_time = kNow - 5 * 3600;  // within the limit
    fs = assess(c, {j});
    CHECK_FALSE(find_key(fs, "not-scheduled"));
    CHECK(find_key(fs, "pending:1007"));

    c.max_pending_hours = 0;  // no limit
    j.submit_time = kNow - 30 * 86400;
    fs = assess(c, {j});
    CHECK_FALSE(find_key(fs, "not-scheduled"));
}

TEST_CASE("watch: jobs of other names are ignored, including names that share a prefix") {
    Job other = running_job(60);
    other.name = "tr8-104B";
    Job longer = running_job(60);
    longer.id = "1010";
    longer.name = kName + "-eval";
    Job shorter = job("1011", "PENDING", "Dependency", "tr1-13B");
    const auto fs = assess(config(), {other, longer, shorter});
    INFO(dump(fs));
    CHECK(find_key(fs, "not-scheduled"));
    CHECK_FALSE(find_prefix(fs, "running:"));
    CHECK_FALSE(find_prefix(fs, "pending:"));
}

TEST_CASE("watch: an unreachable scheduler is UNKNOWN, not a job alert") {
    QueueView q;
    q.reachable = false;
    q.error = "slurm_load_jobs error: Unable to contact slurm controller";
    WatchState state;
    const auto fs = assess_jobs(config(), q, nullptr, state, kNow);
    INFO(dump(fs));
    REQUIRE(fs.size() == 1);
    CHECK(fs[0].level == Level::unknown);
    CHECK(fs[0].key == "unreachable");
    CHECK(contains(fs[0].text, "Unable to contact slurm controller"));
    CHECK_FALSE(find_key(fs, "not-scheduled"));
}

TEST_CASE("watch: the last finished job failed: a note names its nodes for --exclude") {
    Job failed = job("990", "FAILED");
    failed.nodes = "jz[001-004]";
    failed.end_time = kNow - 3600;
    failed.exit_code = "1:0";
    Job older = job("980", "COMPLETED");
    older.end_time = kNow - 7200;
    older.nodes = "jz[005-008]";
    const auto fs = assess(config(), {running_job(600)}, kNow, nullptr, {older, failed});
    INFO(dump(fs));
    const Finding* n = find_key(fs, "failed:990");
    REQUIRE(n);
    CHECK(n->level == Level::note);
    CHECK(contains(n->text, "sbatch --exclude=jz[001-004]"));
    CHECK(contains(n->text, "FAILED"));
    CHECK(contains(n->text, "1:0"));
    CHECK(count_level(fs, Level::alert) == 0);

    // A failed job listed by squeue itself (still in the queue as FAILED) counts as finished too.
    const auto fq = assess(config(), {failed}, kNow);
    CHECK(find_key(fq, "failed:990"));
    CHECK(find_key(fq, "not-scheduled"));

    // The most recent finished job completed: no such note.
    Job completed = job("995", "COMPLETED");
    completed.end_time = kNow - 60;
    completed.nodes = "jz[009-012]";
    const auto fc = assess(config(), {running_job(30)}, kNow, nullptr, {failed, completed});
    INFO(dump(fc));
    CHECK_FALSE(find_prefix(fc, "failed:"));
    for (const auto& f : fc) CHECK_FALSE(contains(f.text, "--exclude"));
}

// --- assess_jobs: stalls -------------------------------------------------------------------------

TEST_CASE("watch: a running job whose log has not moved for longer than stall_minutes") {
    const auto c = config("/scratch/tr1/logs/main_log.txt", 30);
    const LogScan log = log_at(kNow - 50 * 60, 1200);
    QueueView q;
    q.jobs = {running_job(2 * 3600)};
    WatchState state;
    const auto fs = assess_jobs(c, q, &log, state, kNow);
    INFO(dump(fs));
    const Finding* a = find_key(fs, "stalled");
    REQUIRE(a);
    CHECK(a->level == Level::alert);
    CHECK(contains(a->text, "last iteration 1200/292968"));
    CHECK(contains(a->text, "50m 00s"));
    CHECK(contains(a->subject, kName));
    CHECK_FALSE(find_key(fs, "progress"));
    CHECK_FALSE(find_key(fs, "not-scheduled"));
}

TEST_CASE("watch: a running job whose log moved recently progresses") {
    const auto c = config("/scratch/tr1/logs/main_log.txt", 30);
    const LogScan log = log_at(kNow - 5 * 60, 1200);
    QueueView q;
    q.jobs = {running_job(2 * 3600)};
    WatchState state;
    const auto fs = assess_jobs(c, q, &log, state, kNow);
    INFO(dump(fs));
    const Finding* p = find_key(fs, "progress");
    REQUIRE(p);
    CHECK(p->level == Level::pulse);
    CHECK(contains(p->text, "1200/292968"));
    CHECK_FALSE(find_key(fs, "stalled"));
    CHECK(count_level(fs, Level::alert) == 0);
}

TEST_CASE("watch: other writers keep the mtime fresh but the iteration line is unchanged: stalled") {
    const auto c = config("/scratch/tr1/logs/main_log.txt", 30);
    QueueView q;
    q.jobs = {running_job(5 * 3600)};
    WatchState state;
    // First run: the line is new.
    LogScan log = log_at(kNow - 60, 1200);
    log.last->last_line = false;
    auto fs = assess_jobs(c, q, &log, state, kNow);
    CHECK(find_key(fs, "progress"));
    CHECK(state.log_iteration == 1200);
    CHECK(state.log_seen_at == kNow);
    CHECK(state.log_offset == log.last->offset);
    CHECK(state.log_path == log.path);

    // An hour later: the watchdog's own pulse lines were appended (mtime 1 min ago), the
    // iteration line is the same one at the same offset.
    const std::int64_t later = kNow + 3600;
    log.mtime = later - 60;
    log.size += 500;
    fs = assess_jobs(c, q, &log, state, later);
    INFO(dump(fs));
    const Finding* a = find_key(fs, "stalled");
    REQUIRE(a);
    CHECK(contains(a->text, "1200"));
    CHECK(state.log_seen_at == kNow);  // still the run that first saw it

    // A new iteration line arrives: progress again, the state moves on.
    LogScan next = log_at(later + 600 - 30, 1201, log.last->offset + 800);
    fs = assess_jobs(c, q, &next, state, later + 600);
    CHECK(find_key(fs, "progress"));
    CHECK_FALSE(find_key(fs, "stalled"));
    CHECK(state.log_iteration == 1201);
    CHECK(state.log_seen_at == later + 600);
}

TEST_CASE("watch: a job that just started is not stalled by yesterday's last line") {
    const auto c = config("/scratch/tr1/logs/main_log.txt", 30);
    const LogScan log = log_at(kNow - 86400, 1200);
    QueueView q;
    q.jobs = {running_job(5 * 60)};
    WatchState state;
    state.log_path = log.path;  // and the state saw the same line yesterday
    state.log_iteration = 1200;
    state.log_offset = log.last->offset;
    state.log_seen_at = kNow - 86400;
    const auto fs = assess_jobs(c, q, &log, state, kNow);
    INFO(dump(fs));
    CHECK_FALSE(find_key(fs, "stalled"));
    CHECK(find_key(fs, "progress"));

    // 40 minutes into the job, still no new line: now it is stalled.
    QueueView q2;
    q2.jobs = {running_job(40 * 60)};
    const auto f2 = assess_jobs(c, q2, &log, state, kNow);
    INFO(dump(f2));
    CHECK(find_key(f2, "stalled"));
}

TEST_CASE("watch: a running job with no iteration line yet") {
    const auto c = config("/scratch/tr1/logs/main_log.txt", 30);
    LogScan log;
    log.path = c.log_file;
    log.mtime = kNow - 10;
    log.size = 100;
    QueueView q;
    q.jobs = {running_job(2 * 3600)};
    WatchState state;
    // The file is fresh (data loading prints lines), but the job has run for 2 h: the file's
    // mtime is all there is to go by.
    auto fs = assess_jobs(c, q, &log, state, kNow);
    INFO(dump(fs));
    const Finding* p = find_key(fs, "progress");
    REQUIRE(p);
    CHECK(contains(p->text, "no iteration line yet"));

    log.mtime = kNow - 3600;
    fs = assess_jobs(c, q, &log, state, kNow);
    const Finding* a = find_key(fs, "stalled");
    REQUIRE(a);
    CHECK(contains(a->text, "no iteration line yet"));
}

TEST_CASE("watch: the log cannot be read while the job runs: UNKNOWN, once it has run long enough") {
    const auto c = config("/scratch/tr1/logs/main_log.txt", 30);
    LogScan log;
    log.path = c.log_file;
    log.error = "cannot read /scratch/tr1/logs/main_log.txt: No such file or directory";
    QueueView q;
    q.jobs = {running_job(2 * 3600)};
    WatchState state;
    auto fs = assess_jobs(c, q, &log, state, kNow);
    INFO(dump(fs));
    const Finding* u = find_key(fs, "log");
    REQUIRE(u);
    CHECK(u->level == Level::unknown);
    CHECK(contains(u->text, "No such file or directory"));
    CHECK_FALSE(find_key(fs, "stalled"));

    // A job that started a minute ago may not have created its log yet.
    q.jobs = {running_job(60)};
    fs = assess_jobs(c, q, &log, state, kNow);
    CHECK_FALSE(find_key(fs, "log"));
    CHECK(count_level(fs, Level::unknown) == 0);
}

TEST_CASE("watch: no stall check without a running job, or without stall_minutes") {
    const LogScan log = log_at(kNow - 86400, 1200);
    QueueView q;
    q.jobs = {job("1002", "PENDING", "Dependency")};
    WatchState state;
    auto fs = assess_jobs(config("/l", 30), q, &log, state, kNow);
    CHECK_FALSE(find_key(fs, "stalled"));
    CHECK_FALSE(find_key(fs, "progress"));

    q.jobs = {running_job(2 * 3600)};
    fs = assess_jobs(config("/l", 0), q, &log, state, kNow);
    CHECK_FALSE(find_key(fs, "stalled"));
}

// --- select_notifications ----------------------------------------------------------------------

TEST_CASE("watch: an alert is sent once, then again after renotify_hours") {
    WatchState state;
    NotifyPolicy policy;  // 24 h
    std::vector<Finding> run1 = {alert("not-scheduled")};
    auto sent = select_notifications(run1, state, policy, kNow);
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].key == "not-scheduled");
    CHECK(state.alerts.at("not-scheduled").first_seen == kNow);
    CHECK(state.alerts.at("not-scheduled").last_notified == kNow);

    std::vector<Finding> run2 = {alert("not-scheduled")};
    sent = select_notifications(run2, state, policy, kNow + 3600);
    CHECK(sent.empty());

    std::vector<Finding> run3 = {alert("not-scheduled")};
    sent = select_notifications(run3, state, policy, kNow + 23 * 3600);
    CHECK(sent.empty());

    std::vector<Finding> run4 = {alert("not-scheduled")};
    sent = select_notifications(run4, state, policy, kNow + 24 * 3600 + 1);
    REQUIRE(sent.size() == 1);
    CHECK(state.alerts.at("not-scheduled").first_seen == kNow);
    CHECK(state.alerts.at("not-scheduled").last_notified == kNow + 24 * 3600 + 1);

    // Pulses and notes are never sent.
    std::vector<Finding> quiet = {{Level::pulse, "running:1", "fine", {}}, {Level::note, "failed:2", "hm", {}}};
    WatchState fresh;
    CHECK(select_notifications(quiet, fresh, policy, kNow).empty());
    CHECK(fresh.alerts.empty());
}

TEST_CASE("watch: stateless and renotify 0 send every run") {
    NotifyPolicy stateless;
    stateless.stateless = true;
    WatchState state;
    for (int run = 0; run < 3; ++run) {
        std::vector<Finding> f = {alert("stalled")};
        CHECK(select_notifications(f, state, stateless, kNow + run * 60).size() == 1);
    }
    NotifyPolicy every;
    every.renotify_hours = 0;
    WatchState s2;
    for (int run = 0; run < 3; ++run) {
        std::vector<Finding> f = {alert("stalled")};
        CHECK(select_notifications(f, s2, every, kNow + run * 60).size() == 1);
    }
}

TEST_CASE("watch: an alert that is gone produces one RECOVERED notification") {
    WatchState state;
    NotifyPolicy policy;
    std::vector<Finding> run1 = {alert("stalled", "tr1 is RUNNING but the log has had no new iteration line")};
    REQUIRE(select_notifications(run1, state, policy, kNow).size() == 1);

    std::vector<Finding> run2 = {{Level::pulse, "progress", "tr1 progresses", {}}};
    auto sent = select_notifications(run2, state, policy, kNow + 3600);
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].key == "recovered:stalled");
    CHECK(sent[0].level == Level::pulse);
    CHECK(contains(sent[0].text, "no new iteration line"));
    CHECK(contains(sent[0].subject, "RECOVERED"));
    // The report gets it too.
    CHECK(find_key(run2, "recovered:stalled"));
    CHECK(state.alerts.empty());

    std::vector<Finding> run3 = {{Level::pulse, "progress", "tr1 progresses", {}}};
    CHECK(select_notifications(run3, state, policy, kNow + 7200).empty());

    // The same alert coming back later is new again.
    std::vector<Finding> run4 = {alert("stalled")};
    CHECK(select_notifications(run4, state, policy, kNow + 10800).size() == 1);
}

TEST_CASE("watch: an unreachable scheduler is sent only after unreachable_after runs in a row") {
    WatchState state;
    NotifyPolicy policy;
    policy.unreachable_after = 2;
    const Finding unreachable{Level::unknown, "unreachable", "cannot query the SLURM scheduler", "[UNKNOWN] ..."};
    std::vector<Finding> run1 = {unreachable};
    CHECK(select_notifications(run1, state, policy, kNow).empty());
    CHECK(state.unreachable_runs == 1);

    std::vector<Finding> run2 = {unreachable};
    auto sent = select_notifications(run2, state, policy, kNow + 3600);
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].key == "unreachable");
    CHECK(state.unreachable_runs == 2);

    // Back: the counter resets and the recovery is told.
    std::vector<Finding> run3 = {{Level::pulse, "running:1", "fine", {}}};
    sent = select_notifications(run3, state, policy, kNow + 7200);
    CHECK(state.unreachable_runs == 0);
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].key == "recovered:unreachable");

    // One unreachable run between reachable ones: nothing sent, no recovery either.
    std::vector<Finding> run4 = {unreachable};
    CHECK(select_notifications(run4, state, policy, kNow + 10800).empty());
    std::vector<Finding> run5 = {};
    CHECK(select_notifications(run5, state, policy, kNow + 14400).empty());
    CHECK(state.unreachable_runs == 0);
}

TEST_CASE("watch: while the scheduler is unreachable, earlier job alerts are kept") {
    WatchState state;
    NotifyPolicy policy;
    std::vector<Finding> run1 = {alert("not-scheduled"), alert("disk:/scratch")};
    REQUIRE(select_notifications(run1, state, policy, kNow).size() == 2);

    // Unreachable: not-scheduled cannot be judged; it must not "recover".
    std::vector<Finding> run2 = {{Level::unknown, "unreachable", "cannot query", "[UNKNOWN] ..."}, alert("disk:/scratch")};
    auto sent = select_notifications(run2, state, policy, kNow + 3600);
    CHECK(keys(sent) == std::vector<std::string>{"unreachable"});
    CHECK(state.alerts.count("not-scheduled") == 1);
    CHECK(state.alerts.at("not-scheduled").last_notified == kNow);

    // Reachable again, still not scheduled: no second notification within renotify_hours.
    std::vector<Finding> run3 = {alert("not-scheduled"), alert("disk:/scratch")};
    sent = select_notifications(run3, state, policy, kNow + 7200);
    CHECK(keys(sent) == std::vector<std::string>{"recovered:unreachable"});
    CHECK(state.alerts.at("not-scheduled").first_seen == kNow);
}

TEST_CASE("watch: a disk alert recovers while the scheduler is unreachable (disks need no SLURM)") {
    WatchState state;
    NotifyPolicy policy;
    std::vector<Finding> run1 = {alert("not-scheduled"), alert("disk:/scratch"), alert("inodes:/work")};
    REQUIRE(select_notifications(run1, state, policy, kNow).size() == 3);
    std::vector<Finding> run2 = {{Level::unknown, "unreachable", "cannot query", "[UNKNOWN] ..."}};
    const auto sent = select_notifications(run2, state, policy, kNow + 3600);
    CHECK(keys(sent) == std::vector<std::string>{"unreachable", "recovered:disk:/scratch", "recovered:inodes:/work"});
    CHECK(state.alerts.count("not-scheduled") == 1);
}

TEST_CASE("watch: iteration lines with tabs") {
    const auto p = parse_iteration_line("iteration\t5/\t10\t| consumed samples: 1");
    REQUIRE(p.has_value());
    CHECK(p->first == 5);
    CHECK(p->second == 10);
}

// --- the state file ------------------------------------------------------------------------------

TEST_CASE("watch: state file round trip") {
    const auto dir = mds::test::scratch_dir("watch-state");
    const auto path = (dir / "state.json").string();
    WatchState s;
    s.unreachable_runs = 3;
    s.log_path = "/scratch/tr1/logs/main_log.txt";
    s.log_iteration = 1200;
    s.log_offset = 123456789012ull;
    s.log_seen_at = kNow - 60;
    s.alerts["not-scheduled"] = {kNow - 7200, kNow - 3600, "tr1 is neither RUNNING nor SCHEDULED: \"quoted\" \xc3\xa9"};
    s.alerts["disk:/a:b"] = {kNow, 0, "never sent"};
    save_state(path, s);
    const WatchState t = load_state(path);
    CHECK(t.unreachable_runs == 3);
    CHECK(t.log_path == s.log_path);
    CHECK(t.log_iteration == 1200);
    CHECK(t.log_offset == 123456789012ull);
    CHECK(t.log_seen_at == kNow - 60);
    REQUIRE(t.alerts.size() == 2);
    CHECK(t.alerts.at("not-scheduled").first_seen == kNow - 7200);
    CHECK(t.alerts.at("not-scheduled").last_notified == kNow - 3600);
    CHECK(t.alerts.at("not-scheduled").text == s.alerts["not-scheduled"].text);
    CHECK(t.alerts.at("disk:/a:b").last_notified == 0);

    // Saving again replaces the file.
    WatchState empty;
    save_state(path, empty);
    const WatchState u = load_state(path);
    CHECK(u.alerts.empty());
    CHECK(u.unreachable_runs == 0);
    CHECK(u.log_iteration == -1);
    fs::remove_all(dir);
}

TEST_CASE("watch: a missing state file is an empty state; a corrupt one an error naming it") {
    const auto dir = mds::test::scratch_dir("watch-state-bad");
    const auto missing = (dir / "none.json").string();
    const WatchState s = load_state(missing);
    CHECK(s.alerts.empty());
    CHECK(s.unreachable_runs == 0);
    CHECK(s.log_iteration == -1);
    CHECK(s.log_seen_at == 0);

    const auto path = (dir / "state.json").string();
    for (const std::string& text : {std::string("{\"format\": \"mds-slurm-status-state/1\", \"alerts\": {"),
                                   std::string("{\"format\": \"something-else\"}"), std::string("[1, 2]"),
                                   std::string("{\"format\": \"mds-slurm-status-state/1\", \"alerts\": {\"k\": 5}}"),
                                   std::string("{\"format\": \"mds-slurm-status-state/1\", \"unreachable_runs\": \"x\"}")}) {
        CAPTURE(text);
        spit(path, text);
        try {
            load_state(path);
            FAIL("no exception");
        } catch (const mds::Error& e) {
            CHECK(contains(e.what(), path));
        }
    }
    fs::remove_all(dir);
}
