// AtomicOutput (nothing under the final name before commit, temporaries removed on destruction and
// on SIGINT/SIGTERM, existing files replaced atomically), MappedFile and the small file helpers.
#include <doctest/doctest.h>

#include <sys/stat.h>  // mkfifo
#include <sys/wait.h>  // waitpid
#include <unistd.h>    // fork, _exit

#include <algorithm>
#include <csignal>
#include <functional>
#include <memory>
#include <fstream>
#include <string>
#include <vector>

#include "mds/util/error.h"
#include "mds/util/files.h"
#include "test_support.h"

using mds::test::slurp;
using mds::test::spit;

namespace fs = std::filesystem;

namespace {

std::vector<std::string> dir_entries(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

bool error_names(const std::function<void()>& fn, const std::string& needle) {
    try {
        fn();
    } catch (const mds::Error& e) {
        INFO("message: " << std::string(e.what()));
        CHECK(std::string(e.what()).find(needle) != std::string::npos);
        return true;
    }
    return false;
}

}  // namespace

TEST_CASE("files: AtomicOutput appears under its final name only at commit") {
    auto dir = mds::test::scratch_dir("files-commit");
    const std::string final_path = (dir / "out.bin").string();
    {
        mds::AtomicOutput out(final_path);
        CHECK(out.final_path() == final_path);
        // The temporary sits beside the final file (same file system, so rename is atomic), hidden.
        CHECK(fs::path(out.temp_path()).parent_path() == dir);
        CHECK(fs::path(out.temp_path()).filename().string().rfind(".out.bin.tmp", 0) == 0);
        CHECK(fs::exists(out.temp_path()));
        out.write("hello ");
        out.write(std::string(3 << 20, 'x'));  // larger than the buffer
        out.write("!", 1);
        CHECK(out.bytes_written() == 6 + (3u << 20) + 1);
        CHECK_FALSE(fs::exists(final_path));
        CHECK(dir_entries(dir).size() == 1);
        out.commit();
        CHECK(fs::exists(final_path));
        CHECK_FALSE(fs::exists(out.temp_path()));
        // After commit the object owns nothing: writing or committing again is an error.
        CHECK_THROWS_AS(out.write("more"), mds::Error);
        CHECK_THROWS_AS(out.commit(), mds::Error);
    }
    // Destroying a committed output leaves the file alone.
    CHECK(dir_entries(dir) == std::vector<std::string>{"out.bin"});
    CHECK(slurp(final_path) == "hello " + std::string(3 << 20, 'x') + "!");
    fs::remove_all(dir);
}

TEST_CASE("files: AtomicOutput destroyed uncommitted removes its temporary") {
    auto dir = mds::test::scratch_dir("files-discard");
    const std::string final_path = (dir / "x.idx").string();
    std::string temp;
    {
        mds::AtomicOutput out(final_path, 16);
        temp = out.temp_path();
        out.write(std::string(1000, 'a'));
        CHECK(fs::file_size(temp) >= 984);  // small buffer: most of it is on disk already
    }
    CHECK_FALSE(fs::exists(temp));
    CHECK_FALSE(fs::exists(final_path));
    CHECK(dir_entries(dir).empty());
    // An exception between construction and commit: the same.
    try {
        mds::AtomicOutput out(final_path);
        out.write("partial");
        throw mds::Error("boom");
    } catch (const mds::Error&) {
    }
    CHECK(dir_entries(dir).empty());
    // discard() now; the destructor then has nothing left to do.
    {
        mds::AtomicOutput out(final_path);
        out.write("x");
        out.discard();
        CHECK(dir_entries(dir).empty());
        CHECK_THROWS_AS(out.write("y"), mds::Error);
        CHECK_THROWS_AS(out.commit(), mds::Error);
        out.discard();  // twice is fine
    }
    CHECK(dir_entries(dir).empty());
    fs::remove_all(dir);
}

TEST_CASE("files: AtomicOutput replaces an existing file atomically") {
    auto dir = mds::test::scratch_dir("files-replace");
    const fs::path final_path = dir / "data.bin";
    spit(final_path, "old content");
    mds::MappedFile old_map(final_path.string());  // a reader of the old file
    {
        mds::AtomicOutput out(final_path.string());
        out.write("new content, longer than the old one");
        // Until commit, readers see the complete old file.
        CHECK(slurp(final_path) == "old content");
        out.commit();
    }
    CHECK(slurp(final_path) == "new content, longer than the old one");
    // The old inode is untouched: a reader that had it open still sees the old bytes.
    CHECK(std::string(reinterpret_cast<const char*>(old_map.data()), old_map.size()) == "old content");
    CHECK(dir_entries(dir) == std::vector<std::string>{"data.bin"});
    // An uncommitted replacement leaves the old file as it was.
    {
        mds::AtomicOutput out(final_path.string());
        out.write("never committed");
    }
    CHECK(slurp(final_path) == "new content, longer than the old one");
    fs::remove_all(dir);
}

TEST_CASE("files: several outputs at once, and many in a row") {
    auto dir = mds::test::scratch_dir("files-many");
    {
        std::vector<std::unique_ptr<mds::AtomicOutput>> outs;
        for (int i = 0; i < 20; ++i) {
            std::string name = "f";  // (not "f" + to_string(i): a GCC 12 -Wrestrict false positive)
            name += std::to_string(i);
            outs.push_back(std::make_unique<mds::AtomicOutput>((dir / name).string()));
            outs.back()->write(std::string("content ").append(std::to_string(i)));
        }
        for (int i = 0; i < 20; i += 2) outs[static_cast<std::size_t>(i)]->commit();
    }
    CHECK(dir_entries(dir).size() == 10);
    CHECK(slurp(dir / "f4") == "content 4");
    // More outputs over time than the signal-cleanup registry has slots: slots are reused.
    for (int i = 0; i < 600; ++i) {
        mds::AtomicOutput out((dir / "g").string());
        out.write("x");
        if (i % 2) out.commit();
    }
    CHECK(slurp(dir / "g") == "x");
    fs::remove_all(dir);
}

TEST_CASE("files: AtomicOutput errors name the paths and leave nothing behind") {
    auto dir = mds::test::scratch_dir("files-errors");
    const std::string in_missing_dir = (dir / "no-such-dir" / "out.bin").string();
    CHECK(error_names([&] { mds::AtomicOutput out(in_missing_dir); }, in_missing_dir));
    // Commit onto a non-empty directory: rename fails; the temporary is removed.
    fs::create_directories(dir / "taken" / "child");
    {
        mds::AtomicOutput out((dir / "taken").string());
        out.write("data");
        CHECK(error_names([&] { out.commit(); }, (dir / "taken").string()));
    }
    CHECK(dir_entries(dir) == std::vector<std::string>{"taken"});
    // append_file of a missing file names it; the output is still usable.
    {
        mds::AtomicOutput out((dir / "cat.bin").string());
        out.write("head:");
        const std::string missing = (dir / "missing.bin").string();
        CHECK(error_names([&] { out.append_file(missing); }, missing));
        spit(dir / "part", std::string(100000, 'p'));
        out.append_file((dir / "part").string());
        out.write(":tail");
        CHECK(out.bytes_written() == 5 + 100000 + 5);
        out.commit();
    }
    CHECK(slurp(dir / "cat.bin") == "head:" + std::string(100000, 'p') + ":tail");
    fs::remove_all(dir);
}

TEST_CASE("files: MappedFile, read_file, write_file_atomic, file_size") {
    auto dir = mds::test::scratch_dir("files-mapped");
    const std::string missing = (dir / "nope.idx").string();
    CHECK(error_names([&] { mds::MappedFile f(missing); }, missing));
    CHECK(error_names([&] { mds::MappedFile f(dir.string()); }, dir.string()));
    CHECK(error_names([&] { (void)mds::read_file(missing); }, missing));
    CHECK(error_names([&] { (void)mds::file_size(missing); }, missing));
    CHECK_FALSE(mds::file_exists(missing));

    // A FIFO named like a data file is refused at once instead of blocking the open.
    REQUIRE(::mkfifo((dir / "fifo.idx").c_str(), 0644) == 0);
    CHECK(error_names([&] { mds::MappedFile f((dir / "fifo.idx").string()); }, (dir / "fifo.idx").string()));
    fs::remove(dir / "fifo.idx");

    spit(dir / "empty", "");
    {
        mds::MappedFile f((dir / "empty").string());
        CHECK(f.size() == 0);
        CHECK(f.bytes().empty());
        CHECK(f.path() == (dir / "empty").string());
    }
    mds::write_file_atomic((dir / "w").string(), std::string("a\0b", 3));
    CHECK(mds::file_exists((dir / "w").string()));
    CHECK(mds::file_size((dir / "w").string()) == 3);
    CHECK(mds::read_file((dir / "w").string()) == std::string("a\0b", 3));
    mds::write_file_atomic((dir / "w").string(), "replaced");
    CHECK(mds::read_file((dir / "w").string()) == "replaced");
    CHECK(mds::read_file((dir / "w").string(), 8, "state file") == "replaced");
    CHECK_THROWS_WITH_AS((void)mds::read_file((dir / "w").string(), 7, "state file"),
                         doctest::Contains("8 bytes; a state file has at most 7"), mds::Error);

    mds::MappedFile a((dir / "w").string());
    CHECK(a.size() == 8);
    mds::MappedFile b(std::move(a));
    CHECK(b.size() == 8);
    CHECK(a.size() == 0);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
    mds::MappedFile c;
    c = std::move(b);
    CHECK(std::string(reinterpret_cast<const char*>(c.data()), c.size()) == "replaced");
    CHECK(c.path() == (dir / "w").string());
    CHECK(dir_entries(dir) == std::vector<std::string>{"empty", "w"});
    fs::remove_all(dir);
}

namespace {

// Runs `child` in a forked process that must end by `sig`; returns false if it did not.
bool ends_by_signal(const std::function<void()>& child, int sig) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        try {
            child();
        } catch (...) {
            ::_exit(3);
        }
        ::_exit(4);  // the signal should have ended it
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    INFO("child status " << status);
    return WIFSIGNALED(status) && WTERMSIG(status) == sig;
}

}  // namespace

TEST_CASE("files: SIGTERM and SIGINT remove live temporaries, keep committed files") {
    auto dir = mds::test::scratch_dir("files-signal");
    for (int sig : {SIGTERM, SIGINT}) {
        INFO("signal " << sig);
        CHECK(ends_by_signal(
            [&] {
                mds::install_cleanup_signal_handlers();
                // Failed constructions must give their cleanup slot back (256 slots).
                for (int i = 0; i < 300; ++i) {
                    try {
                        mds::AtomicOutput bad((dir / "missing" / "x").string());
                    } catch (const mds::Error&) {
                    }
                }
                mds::AtomicOutput done((dir / "done.bin").string());
                done.write("complete");
                done.commit();
                mds::AtomicOutput a((dir / "a.bin").string());
                mds::AtomicOutput b((dir / "b.idx").string());
                a.write(std::string(5 << 20, 'a'));
                b.write("b");
                if (!fs::exists(a.temp_path()) || !fs::exists(b.temp_path())) ::_exit(5);
                std::raise(sig);
            },
            sig));
        CHECK(dir_entries(dir) == std::vector<std::string>{"done.bin"});
        CHECK(slurp(dir / "done.bin") == "complete");
        fs::remove(dir / "done.bin");
    }
    fs::remove_all(dir);
}
