// The Hub's content ids (hub/hash.h): known digests, files of several 1 MiB blocks, agreement with
// `git hash-object` where git is installed, and the errors.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "mds/hub/hash.h"
#include "mds/util/error.h"
#include "mds/util/files.h"
#include "mds/util/process.h"
#include "test_support.h"

using namespace mds::hub;

TEST_CASE("hub: known sha256 and git blob sha1 digests") {
    CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(git_blob_sha1_hex("") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
    // huggingface_hub's utils/sha.py documents this one (specs/ops.md §2.3).
    CHECK(git_blob_sha1_hex("Hello, World!") == "b45ef6fec89518d314f546fd6c3025367b721684");
}

TEST_CASE("hub: digest_file reads once, in blocks, and agrees with the in-memory digests and git") {
    const auto dir = mds::test::scratch_dir("hub-hash");
    std::string data;
    std::uint32_t x = 12345;
    for (std::size_t i = 0; i < (3u << 20) + 777; ++i) {
        x = x * 1664525u + 1013904223u;
        data.push_back(static_cast<char>(x >> 24));
    }
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1} << 20, data.size()}) {
        INFO(n);
        const std::string path = (dir / "f").string() + std::to_string(n);
        mds::write_file_atomic(path, std::string_view(data).substr(0, n));
        const FileDigests d = digest_file(path);
        CHECK(d.size == n);
        CHECK(d.sha256 == sha256_hex(std::string_view(data).substr(0, n)));
        CHECK(d.git_sha1 == git_blob_sha1_hex(std::string_view(data).substr(0, n)));
        const auto git = mds::run_process({"git", "hash-object", path});
        if (git.started && git.exit_code == 0) CHECK(git.out == d.git_sha1 + "\n");
    }
}

TEST_CASE("hub: the digests of a prefix: a consistent snapshot of a file being appended to") {
    const auto dir = mds::test::scratch_dir("hub-hash-prefix");
    const std::string path = (dir / "main_log.txt").string();
    mds::write_file_atomic(path, "iteration 10\niteration 20\n");
    const FileDigests d = digest_file_prefix(path, 13);
    CHECK(d.size == 13);
    CHECK(d.sha256 == sha256_hex("iteration 10\n"));
    CHECK(d.git_sha1 == git_blob_sha1_hex("iteration 10\n"));
    CHECK(read_file_prefix(path, 13) == "iteration 10\n");
    CHECK(digest_file_prefix(path, 26).sha256 == digest_file(path).sha256);
    CHECK_THROWS_WITH_AS(digest_file_prefix(path, 27), doctest::Contains("shorter"), mds::Error);
    CHECK_THROWS_WITH_AS(read_file_prefix(path, 100), doctest::Contains("truncated or replaced"), mds::Error);
}

TEST_CASE("hub: digest_file errors name the file") {
    const auto dir = mds::test::scratch_dir("hub-hash-errors");
    CHECK_THROWS_WITH_AS(digest_file((dir / "missing").string()), doctest::Contains("missing"), mds::Error);
    CHECK_THROWS_WITH_AS(digest_file(dir.string()), doctest::Contains("not a regular file"), mds::Error);
}

TEST_CASE("hub: sha256 and MD5 of a byte range (an S3 part's payload hash and ETag)") {
    const auto dir = mds::test::scratch_dir("hub-hash-range");
    const std::string path = (dir / "f").string();
    std::string data;
    for (std::size_t i = 0; i < (2u << 20) + 1000; ++i) data.push_back(static_cast<char>((i * 7919) >> 3));
    mds::write_file_atomic(path, data);
    // RFC 1321's test vectors, at an offset.
    mds::write_file_atomic(path + ".abc", "xxabcyy");
    CHECK(md5_file_range(path + ".abc", 2, 3) == "900150983cd24fb0d6963f7d28e17f72");
    CHECK(md5_file_range(path + ".abc", 0, 0) == "d41d8cd98f00b204e9800998ecf8427e");
    CHECK(sha256_file_range(path + ".abc", 2, 3) == sha256_hex("abc"));
    // Ranges across the 1 MiB read blocks agree with the in-memory digest.
    for (const auto& range : {std::pair<std::size_t, std::size_t>{0, data.size()}, {1, (1u << 20)}, {(1u << 20) - 5, 10},
                              {data.size() - 1, 1}}) {
        const std::size_t off = range.first, len = range.second;  // not a structured binding: INFO captures them
        INFO(off << "+" << len);
        CHECK(sha256_file_range(path, off, len) == sha256_hex(std::string_view(data).substr(off, len)));
    }
    CHECK_THROWS_WITH_AS(sha256_file_range(path, data.size() - 10, 11), doctest::Contains("shorter"), mds::Error);
    CHECK_THROWS_AS(md5_file_range(path + ".missing", 0, 1), mds::Error);
}
