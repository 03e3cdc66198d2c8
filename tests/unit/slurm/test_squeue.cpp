// squeue / sacct parsers (slurm/squeue.h) on outputs captured from a real SLURM 22.05.8
// (tests/data/slurm/squeue-22.05.8-*, made by the integration test's cluster) and on the shapes of
// later versions (tests/data/slurm/README.md says where each comes from).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "mds/slurm/squeue.h"
#include "mds/util/error.h"
#include "mds/util/files.h"

using namespace mds::slurm;

namespace {

std::string data(const std::string& name) { return mds::read_file(std::string(MDS_SOURCE_DIR) + "/tests/data/slurm/" + name); }

const Job& by_id(const std::vector<Job>& jobs, const std::string& id) {
    auto it = std::find_if(jobs.begin(), jobs.end(), [&](const Job& j) { return j.id == id; });
    REQUIRE_MESSAGE(it != jobs.end(), "no job " << id);
    return *it;
}

const std::string kLong = "tr11-176B-ml-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx-round3";

// The same nine jobs, whatever the form and version: the capture's scenario (test_slurm_status.py,
// tests/data/slurm/capture/). SLURM 24.11 fails `--nodes=5` on a one-node partition at once
// (FAILED, BadConstraints) where 22.05 keeps it PENDING (PartitionNodeLimit).
void check_capture(const std::vector<Job>& jobs, bool slurm_24 = false) {
    CHECK(jobs.size() == 9);
    const Job& run = by_id(jobs, "1");
    CHECK(run.name == kLong);
    CHECK(run.name.size() == 64);
    CHECK(run.state == "RUNNING");
    CHECK(run.nodes == "vm");
    CHECK(run.user == "root");
    CHECK(run.partition == "debug");
    CHECK(run.start_time > 0);
    CHECK(run.array_job_id == 0);
    CHECK(is_active_state(run));

    const Job& dep = by_id(jobs, "2");
    CHECK(dep.state == "PENDING");
    CHECK(dep.reason == "Dependency");
    CHECK(dep.start_time == 0);
    CHECK(is_pending_state(dep));
    CHECK_FALSE(is_stuck_reason(dep.reason));

    const Job& task = by_id(jobs, "3_1");
    CHECK(task.job_id == 9);
    CHECK(task.array_job_id == 3);
    CHECK(task.array_task == "1");
    CHECK(task.state == "RUNNING");

    const Job& rest = by_id(jobs, "3_[2-3%1]");
    CHECK(rest.array_job_id == 3);
    CHECK(rest.array_task == "2-3%1");
    CHECK(rest.reason == "JobArrayTaskLimit");
    CHECK(rest.name == "tr1-13B-round3");

    const Job& later = by_id(jobs, "4");
    CHECK(later.reason == "BeginTime");
    CHECK(later.start_time - later.submit_time == 3600);

    CHECK(is_stuck_reason(by_id(jobs, "5").reason));  // JobHeldUser
    const Job& big = by_id(jobs, "6");
    if (slurm_24) {
        CHECK(big.state == "FAILED");
        CHECK(big.reason == "BadConstraints");
    } else {
        CHECK(big.state == "PENDING");
        CHECK(is_stuck_reason(big.reason));  // PartitionNodeLimit
    }

    const Job& failed = by_id(jobs, "7");
    CHECK(failed.state == "FAILED");
    CHECK(is_finished_state(failed));
    CHECK(is_failure_state(failed));
    CHECK(failed.nodes == "vm");
    CHECK(failed.end_time >= failed.start_time);

    CHECK(by_id(jobs, "8").name == "with|pipe and spaces");
}

}  // namespace

TEST_CASE("squeue --json of SLURM 22.05.8: every field a watchdog uses") {
    const QueryResult q = parse_squeue_json(data("squeue-22.05.8-capture.json"));
    CHECK(q.slurm_version == "22.05.8");
    CHECK(q.errors.empty());
    check_capture(q.jobs);
    CHECK(by_id(q.jobs, "7").exit_code == "3:0");  // raw wait status 768
}

TEST_CASE("the delimited text form of SLURM 22.05.8 gives the same jobs") {
    const auto jobs = parse_squeue_text(data("squeue-22.05.8-text.txt"));
    check_capture(jobs);
    CHECK(by_id(jobs, "1").elapsed_s.has_value());
    // Times agree with the JSON form (both are the controller's; text is local time).
    const QueryResult q = parse_squeue_json(data("squeue-22.05.8-capture.json"));
    for (const char* id : {"1", "3_1", "4", "7"}) {
        CHECK(by_id(jobs, id).start_time == by_id(q.jobs, id).start_time);
        CHECK(by_id(jobs, id).submit_time == by_id(q.jobs, id).submit_time);
    }
}

TEST_CASE("squeue --json of SLURM 24.11.5, data_parser v0.0.40 / v0.0.41 / v0.0.42 (the 23.11 / 24.05 / 24.11 shapes)") {
    const auto text_jobs = parse_squeue_text(data("squeue-24.11.5-text.txt"));
    check_capture(text_jobs, true);
    for (const char* v : {"v0.0.40", "v0.0.41", "v0.0.42"}) {
        INFO(v);
        const QueryResult q = parse_squeue_json(data(std::string("squeue-24.11.5-") + v + ".json"));
        CHECK(q.slurm_version == "24.11.5");
        CHECK(q.errors.empty());
        check_capture(q.jobs, true);
        CHECK(by_id(q.jobs, "7").exit_code == "3:0");  // {status: [ERROR], return_code: {number: 3}}
        CHECK(by_id(q.jobs, "1").state_flags.empty());
        for (const char* id : {"1", "3_1", "4", "7"}) {
            CHECK(by_id(text_jobs, id).start_time == by_id(q.jobs, id).start_time);
            CHECK(by_id(text_jobs, id).submit_time == by_id(q.jobs, id).submit_time);
        }
    }
}

TEST_CASE("the shapes of 23.02, 23.02.3, 23.11, 24.05 and 24.11 (tests/data/slurm/gen-synthetic-squeue.py)") {
    for (const char* v : {"23.02", "23.02.3", "23.11", "24.05", "24.11"}) {
        INFO(v);
        const std::string version(v);
        if (version != "23.02.3") {
            const QueryResult mixed = parse_squeue_json(data("squeue-" + version + "-mixed.json"));
            CHECK(mixed.jobs.size() == 8);
            const Job& run = by_id(mixed.jobs, "4218801");
            CHECK(run.state == "RUNNING");
            CHECK(run.nodes == "jz-node[010-013]");
            CHECK(run.start_time == 1732702800);
            CHECK(by_id(mixed.jobs, "4218820_1").state == "RUNNING");
            const Job& rest = by_id(mixed.jobs, "4218820_[2-5%1]");
            CHECK(rest.reason == "JobArrayTaskLimit");
            CHECK(is_pending_state(rest));
            // RUNNING + CONFIGURING: a list in 23.11+, the flag alone in 23.02; running either way.
            CHECK(is_active_state(by_id(mixed.jobs, "4218833")));
            CHECK(by_id(mixed.jobs, "4218830").start_time == 1732720800);
            CHECK(is_stuck_reason(by_id(mixed.jobs, "4218831").reason));
            CHECK(by_id(mixed.jobs, "4218832").name.size() == 60);
        }
        const QueryResult fin = parse_squeue_json(data("squeue-" + version + "-finished.json"));
        CHECK(fin.jobs.size() == 11);
        const Job& failed = by_id(fin.jobs, "4218799");
        CHECK(failed.state == "FAILED");
        CHECK(failed.exit_code == "1:0");  // raw 256 (int or {set, number}) or {return_code: 1}
        CHECK(failed.nodes == "jz-node[001-004]");
        CHECK(is_failure_state(failed));
        CHECK(is_finished_state(by_id(fin.jobs, "4218820_1")));  // COMPLETED
        const Job& killed = by_id(fin.jobs, "4218833");
        CHECK(killed.state == "CANCELLED");
        CHECK(killed.exit_code == "0:15");
        CHECK(by_id(fin.jobs, "4218795").state != "RUNNING");  // COMPLETED + COMPLETING / COMPLETING
    }
}

TEST_CASE("squeue --json with the controller down: errors, no jobs") {
    const QueryResult q = parse_squeue_json(data("squeue-22.05.8-unreachable.json"));
    CHECK(q.jobs.empty());
    REQUIRE(q.errors.size() == 1);
    CHECK(q.errors[0].find("slurm_load_jobs") != std::string::npos);
    CHECK(q.errors[0].find("Failed while looking for jobs") != std::string::npos);
}

TEST_CASE("23.02+ shapes: job_state lists, {set, infinite, number} times, exit_code objects") {
    const std::string text = R"({"meta": {"slurm": {"release": "23.11.4"}}, "errors": [], "warnings": [], "jobs": [
      {"job_id": 101, "name": "tr11-176B-ml", "job_state": ["RUNNING"], "state_reason": "None", "user_name": "six001",
       "partition": "gpu_p5", "nodes": "jz[010-013]", "array_job_id": {"set": true, "infinite": false, "number": 0},
       "array_task_id": {"set": false, "infinite": false, "number": 0}, "array_task_string": "",
       "start_time": {"set": true, "infinite": false, "number": 1795350754},
       "end_time": {"set": true, "infinite": false, "number": 1795422754},
       "submit_time": {"set": true, "infinite": false, "number": 1795350000},
       "exit_code": {"status": ["SUCCESS"], "return_code": {"set": true, "infinite": false, "number": 0},
                     "signal": {"id": {"set": false, "infinite": false, "number": 0}, "name": ""}}},
      {"job_id": 102, "name": "tr11-176B-ml", "job_state": ["PENDING", "REQUEUED"], "state_reason": "Dependency",
       "user_name": "six001", "partition": "gpu_p5", "nodes": "",
       "array_job_id": {"set": true, "infinite": false, "number": 0}, "array_task_id": {"set": false, "infinite": false, "number": 0},
       "start_time": {"set": true, "infinite": false, "number": 0}, "end_time": {"set": false, "infinite": true, "number": 0},
       "submit_time": {"set": true, "infinite": false, "number": 1795350001}},
      {"job_id": 90, "name": "tr11-176B-ml", "job_state": ["FAILED"], "state_reason": "NonZeroExitCode",
       "user_name": "six002", "partition": "gpu_p5", "nodes": "jz[001-004]",
       "array_job_id": {"set": true, "infinite": false, "number": 88}, "array_task_id": {"set": true, "infinite": false, "number": 2},
       "start_time": {"set": true, "infinite": false, "number": 1795300000}, "end_time": {"set": true, "infinite": false, "number": 1795340000},
       "exit_code": {"status": ["NONZERO_EXIT"], "return_code": {"set": true, "infinite": false, "number": 1},
                     "signal": {"id": {"set": true, "infinite": false, "number": 9}, "name": "KILL"}}}
    ]})";
    const QueryResult q = parse_squeue_json(text);
    CHECK(q.slurm_version == "23.11.4");
    REQUIRE(q.jobs.size() == 3);
    CHECK(q.jobs[0].id == "101");
    CHECK(q.jobs[0].state == "RUNNING");
    CHECK(q.jobs[0].start_time == 1795350754);
    CHECK(q.jobs[0].exit_code == "0:0");
    CHECK(q.jobs[1].state == "PENDING");
    CHECK(q.jobs[1].state_flags == std::vector<std::string>{"REQUEUED"});
    CHECK(q.jobs[1].end_time == 0);  // infinite → unknown
    CHECK(q.jobs[2].id == "88_2");
    CHECK(q.jobs[2].array_job_id == 88);
    CHECK(q.jobs[2].exit_code == "1:9");
    CHECK(is_failure_state(q.jobs[2]));
}

TEST_CASE("squeue --json: errors name the job and the field") {
    CHECK_THROWS_WITH_AS(parse_squeue_json("{\"jobs\": [{\"job_id\": 1, \"name\": \"x\"}]}"),
                         doctest::Contains("jobs[0].job_state: missing"), mds::Error);
    CHECK_THROWS_WITH_AS(parse_squeue_json("{\"jobs\": [{\"job_id\": 1, \"job_state\": 7}]}"),
                         doctest::Contains("jobs[0].job_state: expected a string or a list"), mds::Error);
    CHECK_THROWS_WITH_AS(parse_squeue_json("{\"jobs\": [{\"job_id\": 1, \"job_state\": \"RUNNING\", \"start_time\": []}]}"),
                         doctest::Contains("jobs[0].start_time"), mds::Error);
    CHECK_THROWS_WITH_AS(parse_squeue_json("{\"jobs\": {}}"), doctest::Contains("\"jobs\" list"), mds::Error);
    CHECK_THROWS_WITH_AS(parse_squeue_json("squeue: unrecognized option '--json'"), doctest::Contains("not JSON at byte"),
                         mds::Error);
    CHECK_THROWS_AS(parse_squeue_json("[1e999999]"), mds::Error);
    // Floats past int64's range (found by fuzz_squeue: the cast was undefined behaviour).
    CHECK_THROWS_WITH_AS(parse_squeue_json("{\"jobs\": [{\"job_id\": 1, \"job_state\": \"RUNNING\", \"start_time\": 1e50}]}"),
                         doctest::Contains("jobs[0].start_time: 1e+50 is not a whole number within int64's range"), mds::Error);
    CHECK_THROWS_WITH_AS(
        parse_squeue_json("{\"jobs\": [{\"job_id\": 1, \"job_state\": \"RUNNING\", \"end_time\": {\"set\": true, \"number\": -1e19}}]}"),
        doctest::Contains("jobs[0].end_time: -1e+19 is not"), mds::Error);
    CHECK(parse_squeue_json("{\"jobs\": [{\"job_id\": 1, \"job_state\": \"RUNNING\", \"start_time\": 5.0}]}").jobs.at(0).start_time == 5);
}

TEST_CASE("the text form: errors name the line; names keep every character") {
    CHECK_THROWS_WITH_AS(parse_squeue_text("1|1|1|N/A|RUNNING|None|N/A|N/A|N/A|0:01|u|p|n|ok\n1|2|3\n"),
                         doctest::Contains("squeue output line 2: expected 14"), mds::Error);
    CHECK_THROWS_WITH_AS(parse_squeue_text("x|x|x|N/A|RUNNING|None|N/A|N/A|N/A|0:01|u|p|n|ok\n"),
                         doctest::Contains("job id 'x' is not a number"), mds::Error);
    CHECK_THROWS_WITH_AS(parse_squeue_text("5|5|5|N/A|RUNNING|None|yesterday|N/A|N/A|0:01|u|p|n|ok\n"),
                         doctest::Contains("line 1: expected a time"), mds::Error);
    const auto jobs = parse_squeue_text("5|5|5|N/A|RUNNING|None|N/A|N/A|N/A|1-02:03:04|u|p|n|a|b||c \r\n\n");
    REQUIRE(jobs.size() == 1);
    CHECK(jobs[0].name == "a|b||c ");
    CHECK(jobs[0].elapsed_s == 93784);
}

TEST_CASE("sacct -X -n -P") {
    const std::string text =
        "1234|tr11-176B-ml|FAILED|2026-11-20T10:00:00|2026-11-20T12:00:00|02:00:00|1:0|jz[001-004]|six001\n"
        "1235_7|tr11|176B|CANCELLED by 0|2026-11-20T12:05:00|2026-11-20T12:06:00|00:01:00|0:15|jz[005-008]|six002\n"
        "1236|tr11-176B-ml|PENDING|Unknown|Unknown|00:00:00|0:0|None assigned|six001\n";
    const auto jobs = parse_sacct(text);
    REQUIRE(jobs.size() == 3);
    CHECK(jobs[0].state == "FAILED");
    CHECK(jobs[0].nodes == "jz[001-004]");
    CHECK(jobs[0].exit_code == "1:0");
    CHECK(jobs[0].elapsed_s == 7200);
    CHECK(jobs[0].end_time - jobs[0].start_time == 7200);
    CHECK(jobs[1].name == "tr11|176B");  // a '|' inside the name
    CHECK(jobs[1].state == "CANCELLED");
    CHECK(jobs[1].array_job_id == 1235);
    CHECK(jobs[1].array_task == "7");
    CHECK(jobs[1].user == "six002");
    CHECK(jobs[2].start_time == 0);
    CHECK(jobs[2].nodes.empty());
    CHECK_THROWS_WITH_AS(parse_sacct("1|a|b\n"), doctest::Contains("sacct output line 1: expected 9"), mds::Error);
}

TEST_CASE("sacct -P of a chain's week (tests/data/slurm/sacct-P.txt)") {
    const auto jobs = parse_sacct(data("sacct-P.txt"));
    REQUIRE(jobs.size() == 13);
    CHECK(jobs[0].elapsed_s == 86400 + 6 * 3600 + 10 * 60 + 31);
    CHECK(jobs[4].state == "CANCELLED");  // "CANCELLED by 21042"
    CHECK(jobs[8].array_task == "9-12%1");
    CHECK(jobs[8].start_time == 0);
    CHECK(jobs[8].nodes.empty());  // "None assigned"
    const Job* last = nullptr;
    for (const Job& j : jobs)
        if (is_finished_state(j) && (!last || j.end_time > last->end_time)) last = &j;
    REQUIRE(last != nullptr);
    CHECK(last->id == "4218799");
    CHECK(last->state == "FAILED");
    CHECK(last->exit_code == "1:0");
    CHECK(last->nodes == "jz-node[001-004]");
    CHECK(last->user == "tr11user");
}

TEST_CASE("times and durations") {
    CHECK(parse_slurm_time("N/A") == 0);
    CHECK(parse_slurm_time("Unknown") == 0);
    CHECK(parse_slurm_time("NONE") == 0);
    const auto t = parse_slurm_time("2026-11-22T12:32:34");
    CHECK(format_slurm_time(t) == "2026-11-22T12:32:34");
    CHECK(parse_slurm_time("2026-11-22T12:32:35") - t == 1);
    CHECK_THROWS_AS(parse_slurm_time("2026-13-22T12:32:34"), mds::Error);
    CHECK_THROWS_AS(parse_slurm_time("12:32:34"), mds::Error);
    CHECK(parse_slurm_duration("0:00") == 0);
    CHECK(parse_slurm_duration("12:34") == 754);
    CHECK(parse_slurm_duration("1:02:03") == 3723);
    CHECK(parse_slurm_duration("2-01:02:03") == 2 * 86400 + 3723);
    CHECK(parse_slurm_duration("00:00.123") == 0);
    CHECK_FALSE(parse_slurm_duration("INVALID").has_value());
    CHECK_FALSE(parse_slurm_duration("-1:00").has_value());
    // Overflow: a corrupt day count or field is refused, not wrapped (fuzz_squeue found 4477988020393345017-0:0:2001).
    CHECK_FALSE(parse_slurm_duration("4477988020393345017-0:0:2001").has_value());
    CHECK_FALSE(parse_slurm_duration("99999999999999999:00:00").has_value());
    CHECK(parse_slurm_duration("365-00:00:00") == 365 * 86400);
    CHECK(format_duration(45) == "45s");
    CHECK(format_duration(723) == "12m 03s");
    CHECK(format_duration(3 * 3600 + 7 * 60) == "3h 07m");
    CHECK(format_duration(2 * 86400 + 4 * 3600) == "2d 04h");
}

TEST_CASE("every captured or written squeue JSON in tests/data/slurm parses") {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(std::string(MDS_SOURCE_DIR) + "/tests/data/slurm")) {
        const std::string name = e.path().filename().string();
        if (name.rfind("squeue-", 0) != 0 || e.path().extension() != ".json") continue;
        INFO(name);
        const QueryResult q = parse_squeue_json(mds::read_file(e.path().string()));
        if (name.find("unreachable") != std::string::npos || name.find("down") != std::string::npos) {
            CHECK(q.jobs.empty());
            CHECK_FALSE(q.errors.empty());
        } else {
            CHECK_FALSE(q.jobs.empty());
            for (const Job& j : q.jobs) {
                CHECK_FALSE(j.state.empty());
                CHECK(j.job_id > 0);
            }
        }
        ++n;
    }
    CHECK(n >= 2);
}
