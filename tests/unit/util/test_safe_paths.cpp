// safe_paths.h: names read from files (a `latest` tag) never leave their folder, source and
// destination are told apart through links and "..", destinations are prepared once (a file is
// never replaced, an unwritable folder fails up front, stale temporaries of dead processes go).
#include <doctest/doctest.h>

#include <sys/wait.h>  // waitpid
#include <unistd.h>    // fork, _exit, getpid

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mds/util/error.h"
#include "mds/util/safe_paths.h"
#include "test_support.h"

namespace fs = std::filesystem;

TEST_CASE("printable escapes control bytes and cuts long text") {
    CHECK(mds::printable("global_step10") == "global_step10");
    CHECK(mds::printable(std::string("a\0b\x1b[2J\xff", 8)) == "a\\x00b\\x1b[2J\\xff");
    CHECK(mds::printable(std::string(100, 'x'), 10) == std::string(10, 'x') + "...");
    CHECK(mds::printable("back\\slash") == "back\\x5cslash");
}

TEST_CASE("checked_entry_name refuses names that would leave the folder") {
    CHECK(mds::checked_entry_name("global_step200", "ckpt/latest") == "global_step200");
    const std::vector<std::string> bads{"", ".", "..", "../../tagdir", "a/b", "/etc", std::string("a\0b", 3), "x\n",
                                        std::string(256, 'a')};
    for (const auto& bad : bads) {
        CAPTURE(bad);
        CHECK_THROWS_AS(mds::checked_entry_name(bad, "ckpt/latest"), mds::Error);
    }
    try {
        mds::checked_entry_name("../x\x01", "c1/latest");
        FAIL("no error");
    } catch (const mds::Error& e) {
        const std::string what = e.what();
        CHECK(what.find("c1/latest") != std::string::npos);
        CHECK(what.find("../x\\x01") != std::string::npos);
    }
}

TEST_CASE("paths_overlap sees the same folder through links, '..' and trailing slashes") {
    const auto dir = mds::test::scratch_dir("overlap");
    fs::create_directories(dir / "c1" / "sub");
    fs::create_directories(dir / "c2");
    fs::create_directory_symlink(dir / "c1", dir / "link");
    const std::string c1 = (dir / "c1").string();
    CHECK(mds::paths_overlap(c1, c1));
    CHECK(mds::paths_overlap(c1, c1 + "/"));
    CHECK(mds::paths_overlap(c1, (dir / "c2" / ".." / "c1").string()));
    CHECK(mds::paths_overlap(c1, (dir / "link").string()));
    CHECK(mds::paths_overlap(c1, (dir / "c1" / "sub" / "new").string()));
    CHECK(mds::paths_overlap((dir / "link" / "sub").string(), c1));
    CHECK_FALSE(mds::paths_overlap(c1, (dir / "c2").string()));
    CHECK_FALSE(mds::paths_overlap(c1, (dir / "c10").string()));
    CHECK_THROWS_AS(mds::refuse_overlap(c1, "source", (dir / "link").string(), "destination"), mds::UsageError);
    CHECK_NOTHROW(mds::refuse_overlap(c1, "source", (dir / "c2").string(), "destination"));
    fs::remove_all(dir);
}

TEST_CASE("temporary names carry the pid and host, and parse back") {
    const auto t = mds::temp_path_for("/a/b/global_step10");
    CHECK(t.rfind("/a/b/.global_step10.tmp-" + std::to_string(::getpid()) + "-", 0) == 0);
    const auto owner = mds::parse_temp_name(fs::path(t).filename().string());
    CHECK(owner.pid == ::getpid());
    CHECK_FALSE(owner.host.empty());
    CHECK(mds::parse_temp_name(".global_step10.tmp-4242").pid == 4242);  // older mds: no host
    CHECK(mds::parse_temp_name(".global_step10.tmp-4242").host.empty());
    CHECK(mds::parse_temp_name("global_step10").pid == 0);
    CHECK(mds::parse_temp_name(".x.tmp-").pid == 0);
    CHECK(mds::parse_temp_name(".x.tmp-12ab").pid == 0);
    CHECK_FALSE(mds::is_stale_temp(fs::path(t).filename().string()));   // we are alive
    CHECK_FALSE(mds::is_stale_temp(".x.tmp-1-some-other-host-xyz"));      // another node's
}

TEST_CASE("prepare_output_dir: creates, refuses files, removes dead processes' temporaries") {
    const auto dir = mds::test::scratch_dir("prepare");
    const auto out = dir / "a" / "b";
    CHECK(mds::prepare_output_dir(out.string(), "destination").empty());
    CHECK(fs::is_directory(out));

    std::ofstream(dir / "file") << "precious";
    CHECK_THROWS_WITH_AS(mds::prepare_output_dir((dir / "file").string(), "destination"),
                         doctest::Contains("exists and is not a folder"), mds::Error);
    CHECK_THROWS_AS(mds::prepare_output_dir((dir / "file" / "sub").string(), "destination"), mds::Error);
    CHECK(fs::is_regular_file(dir / "file"));

    // A child that exits leaves a pid nobody has (until reused, which the test cannot see here).
    const pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    ::waitpid(child, nullptr, 0);
    const std::string dead = fs::path(mds::temp_path_for((out / "global_step5").string())).filename().string();
    const std::string dead_name = dead.substr(0, dead.find(".tmp-") + 5) + std::to_string(child) +
                                  dead.substr(dead.find('-', dead.find(".tmp-") + 5));
    fs::create_directories(out / dead_name / "inner");
    fs::create_directories(out / (".global_step6.tmp-" + std::to_string(child)));          // older name
    fs::create_directories(out / (".global_step7.tmp-" + std::to_string(::getpid())));     // ours: kept
    fs::create_directories(out / "global_step8");
    const auto removed = mds::prepare_output_dir(out.string(), "destination");
    CHECK(removed.size() == 2);
    CHECK_FALSE(fs::exists(out / dead_name));
    CHECK_FALSE(fs::exists(out / (".global_step6.tmp-" + std::to_string(child))));
    CHECK(fs::exists(out / (".global_step7.tmp-" + std::to_string(::getpid()))));
    CHECK(fs::exists(out / "global_step8"));
    fs::remove_all(dir);
}

TEST_CASE("check_output_dir looks at the nearest existing ancestor without creating anything") {
    const auto dir = mds::test::scratch_dir("check");
    CHECK_NOTHROW(mds::check_output_dir((dir / "x" / "y").string(), "--save folder"));
    CHECK_FALSE(fs::exists(dir / "x"));
    std::ofstream(dir / "file") << "x";
    CHECK_THROWS_WITH_AS(mds::check_output_dir((dir / "file" / "y").string(), "--save folder"),
                         doctest::Contains("is not a folder"), mds::Error);
    CHECK_THROWS_AS(mds::check_output_dir((dir / "file").string(), "--save folder"), mds::Error);
    fs::remove_all(dir);
}

TEST_CASE("write_output_folder replaces the destination only with a whole, durable folder") {
    const auto dir = mds::test::scratch_dir("output_folder");
    const auto out = dir / "hf";
    const auto fill = [](const std::string& text) {
        return [text](const fs::path& tmp) { mds::test::spit(tmp / "config.json", text); };
    };
    const auto leftovers = [&] {  // anything but the destination in its folder
        std::vector<std::string> names;
        for (const auto& e : fs::directory_iterator(dir))
            if (e.path() != out) names.push_back(e.path().filename().string());
        return names;
    };
    std::vector<std::string> notes;
    const auto note = [&](const std::string& n) { notes.push_back(n); };
    int rechecks = 0;
    mds::write_output_folder(out, fill("first"), [&] { ++rechecks; }, note);
    CHECK(mds::test::slurp(out / "config.json") == "first");
    CHECK(rechecks == 1);
    CHECK(leftovers().empty());

    // A failure while writing, or a destination that changed meanwhile: the earlier output stays, the temporary goes.
    CHECK_THROWS_WITH_AS(mds::write_output_folder(
                             out, [](const fs::path& tmp) { mds::test::spit(tmp / "part", "x"); throw mds::Error("disk full"); },
                             [] {}, note),
                         "disk full", mds::Error);
    CHECK_THROWS_WITH_AS(mds::write_output_folder(out, fill("second"), [] { throw mds::Error("destination changed"); }, note),
                         "destination changed", mds::Error);
    CHECK(mds::test::slurp(out / "config.json") == "first");
    CHECK(leftovers().empty());

    // A dead process's temporary beside the destination is removed and reported; the new folder replaces the old whole.
    const pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    ::waitpid(child, nullptr, 0);
    const std::string stale = ".hf.tmp-" + std::to_string(child);
    fs::create_directories(dir / stale);
    mds::test::spit(out / "old-only", "x");
    mds::write_output_folder(out, fill("third"), {}, note);
    CHECK(mds::test::slurp(out / "config.json") == "third");
    CHECK_FALSE(fs::exists(out / "old-only"));
    CHECK(leftovers().empty());
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].find(stale) != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("filesystem errors are worded as: operation, path, reason") {
    const std::filesystem::filesystem_error e("cannot create directories", "/ro/ckpt/.global_step3.tmp-1",
                                              std::make_error_code(std::errc::permission_denied));
    CHECK(mds::filesystem_error_message(e) == "cannot create directories: /ro/ckpt/.global_step3.tmp-1: Permission denied");
    const std::filesystem::filesystem_error r("cannot rename", "/a", "/b", std::make_error_code(std::errc::no_space_on_device));
    CHECK(mds::filesystem_error_message(r) == "cannot rename: /a -> /b: No space left on device");
}
