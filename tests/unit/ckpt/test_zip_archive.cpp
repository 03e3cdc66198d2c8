#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "mds/ckpt/zip_archive.h"
#include "mds/util/error.h"
#include "test_support.h"

using mds::test::as_bytes;
using mds::test::slurp;
using mds::test::spit;

using namespace mds::ckpt;

namespace {

std::string as_string(std::span<const std::byte> b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

void put16(std::string& s, std::size_t at, std::uint32_t v) {
    s[at] = static_cast<char>(v & 0xff);
    s[at + 1] = static_cast<char>((v >> 8) & 0xff);
}
void put32(std::string& s, std::size_t at, std::uint32_t v) {
    put16(s, at, v & 0xffff);
    put16(s, at + 2, v >> 16);
}

// Offset of the n-th (0-based) occurrence of a 4-byte little-endian signature.
std::size_t find_sig(const std::string& s, std::uint32_t sig, int nth = 0) {
    const char pat[4] = {static_cast<char>(sig & 0xff), static_cast<char>((sig >> 8) & 0xff), static_cast<char>((sig >> 16) & 0xff),
                         static_cast<char>(sig >> 24)};
    std::size_t pos = 0;
    for (int i = 0;; ++i, ++pos) {
        pos = s.find(std::string_view(pat, 4), pos);
        REQUIRE(pos != std::string::npos);
        if (i == nth) return pos;
    }
}
constexpr std::uint32_t kLocal = 0x04034b50, kCentral = 0x02014b50, kEnd = 0x06054b50;

// Two records "one" (100 × 'a') and "two" ("hello"), written by ZipWriter; returns the file bytes.
std::string two_records(const std::string& path, ZipWriterOptions options = {}, std::string_view comment = {}) {
    ZipWriter w(path, options);
    w.add_record("one", std::string(100, 'a'));
    w.add_record("two", std::string_view("hello"));
    w.finish(comment);
    return slurp(path);
}

}  // namespace

TEST_CASE("zip: crc32 matches zlib's check value and composes") {
    CHECK(crc32(as_bytes("123456789")) == 0xCBF43926u);
    CHECK(crc32({}) == 0u);
    CHECK(crc32(as_bytes("a")) == 0xE8B7BE43u);
    std::mt19937 rng(7);
    std::string buf(10007, '\0');
    for (auto& c : buf) c = static_cast<char>(rng());
    // Bytewise reference.
    std::uint32_t ref = 0xFFFFFFFFu;
    for (unsigned char c : buf) {
        ref ^= c;
        for (int k = 0; k < 8; ++k) ref = (ref & 1) ? 0xEDB88320u ^ (ref >> 1) : ref >> 1;
    }
    ref = ~ref;
    CHECK(crc32(as_bytes(buf)) == ref);
    for (std::size_t cut : {0, 1, 5, 8, 13, 4096, 10006}) {
        const auto b = as_bytes(buf);
        CHECK(crc32(b.subspan(cut), crc32(b.first(cut))) == ref);
    }
    // Every length around the folding code's thresholds (256 bytes, 64-byte rounds, a 1..63-byte
    // tail), at unaligned starts, against the bytewise reference.
    const auto bytewise = [](std::span<const std::byte> b) {
        std::uint32_t c = 0xFFFFFFFFu;
        for (auto x : b) {
            c ^= std::to_integer<std::uint32_t>(x);
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        }
        return ~c;
    };
    int mismatches = 0;
    for (std::size_t start : {0, 1, 3})
        for (std::size_t n = 240; n <= 420; ++n) mismatches += crc32(as_bytes(buf).subspan(start, n)) != bytewise(as_bytes(buf).subspan(start, n));
    CHECK(mismatches == 0);
}

TEST_CASE("zip: write then read back; data aligned to 64 bytes; comment; streaming") {
    const std::string dir = mds::test::scratch_dir("zip_rw").string();
    const std::string path = dir + "/a.zip";
    std::string big(300000, '\0');
    std::mt19937 rng(1);
    for (auto& c : big) c = static_cast<char>(rng());
    {
        ZipWriter w(path);
        w.add_record("x/data.pkl", std::string_view("pickle bytes"));
        w.add_record("x/empty", std::string_view());
        w.begin_record("x/data/0", big.size());
        for (std::size_t i = 0; i < big.size(); i += 4096) w.write(as_bytes(big).subspan(i, std::min<std::size_t>(4096, big.size() - i)));
        w.end_record();
        const std::string p1 = "abc", p2 = "defg";
        const std::span<const std::byte> pieces[] = {as_bytes(p1), {}, as_bytes(p2)};
        w.add_record_pieces("x/pieces", pieces);
        CHECK(w.contains("x/empty"));
        CHECK_FALSE(mds::file_exists(path));  // only after finish()
        w.finish("a comment with PK\x05\x06 inside");
    }
    REQUIRE(mds::file_exists(path));
    ZipArchive z(path);
    REQUIRE(z.entries().size() == 4);
    CHECK_FALSE(z.zip64());
    CHECK(as_string(z.comment()) == "a comment with PK\x05\x06 inside");
    CHECK(z.entries()[0].name == "x/data.pkl");
    CHECK(as_string(z.data(z.at("x/data.pkl"))) == "pickle bytes");
    CHECK(z.data(z.at("x/empty")).empty());
    CHECK(as_string(z.data(z.at("x/data/0"))) == big);
    CHECK(as_string(z.data(z.at("x/pieces"))) == "abcdefg");
    for (const auto& e : z.entries()) {
        CHECK(e.data_offset % 64 == 0);
        CHECK(e.method == 0);
    }
    CHECK(z.at("x/data/0").crc32 == crc32(as_bytes(big)));
    z.verify_all_crcs();
    CHECK(z.find("nope") == nullptr);
    CHECK_THROWS_WITH_AS(z.at("nope"), doctest::Contains("no entry \"nope\""), mds::Error);
    // torch helpers
    CHECK(z.prefix() == "x");
    CHECK(as_string(z.record("data.pkl")) == "pickle bytes");
    CHECK(z.has_record("data/0"));
    CHECK_FALSE(z.has_record("data/1"));
    CHECK(z.record_names() == std::vector<std::string>{"data.pkl", "empty", "data/0", "pieces"});
    CHECK_THROWS_WITH_AS(z.record("version"), doctest::Contains("no record \"version\" (entry \"x/version\")"), mds::Error);
}

TEST_CASE("zip: writer misuse is an error and leaves no file") {
    const std::string dir = mds::test::scratch_dir("zip_misuse").string();
    const std::string path = dir + "/m.zip";
    {
        ZipWriter w(path);
        w.add_record("a", std::string_view("1"));
        CHECK_THROWS_WITH_AS(w.add_record("a", std::string_view("2")), doctest::Contains("duplicate record name"), mds::Error);
        w.begin_record("b", 3);
        CHECK_THROWS_WITH_AS(w.begin_record("c", 1), doctest::Contains("\"b\" is still open"), mds::Error);
        CHECK_THROWS_WITH_AS(w.write(as_bytes("abcd")), doctest::Contains("more than the declared 3"), mds::Error);
        w.write(as_bytes("ab"));
        CHECK_THROWS_WITH_AS(w.end_record(), doctest::Contains("2 bytes written, 3 declared"), mds::Error);
        CHECK_THROWS_WITH_AS(w.finish(), doctest::Contains("still open"), mds::Error);
    }
    CHECK_FALSE(mds::file_exists(path));
    CHECK(std::filesystem::is_empty(dir));  // the temporary is gone too
    ZipWriter w(path);
    CHECK_THROWS_AS(w.add_record("", std::string_view("x")), mds::Error);
    w.finish();
    CHECK_THROWS_WITH_AS(w.finish(), doctest::Contains("twice"), mds::Error);
    ZipArchive z(path);
    CHECK(z.entries().empty());
    CHECK_THROWS_WITH_AS(z.prefix(), doctest::Contains("no entries"), mds::Error);
}

TEST_CASE("zip: TorchZipWriter prefixes records and adds torch's own") {
    const std::string dir = mds::test::scratch_dir("zip_torch").string();
    CHECK(TorchZipWriter::archive_name_for("/a/b/mp_rank_00_model_states.pt") == "mp_rank_00_model_states");
    CHECK(TorchZipWriter::archive_name_for("x.tar.gz") == "x.tar");
    CHECK(TorchZipWriter::archive_name_for("plain") == "plain");
    const std::string path = dir + "/t.pt";
    {
        TorchZipWriter w(path, "archive");
        CHECK_THROWS_WITH_AS(w.finish(), doctest::Contains("no data.pkl"), mds::Error);
    }
    CHECK_FALSE(mds::file_exists(path));
    TorchZipWriter w(path, "archive");
    w.add_record("data.pkl", std::string_view("\x80\x02N."));
    w.begin_record("data/0", 8);
    w.write(as_bytes("0123"));
    w.write(as_bytes("4567"));
    w.end_record();
    CHECK_THROWS_WITH_AS(w.add_record("version", std::string_view("3\n")), doctest::Contains("written by TorchZipWriter"),
                         mds::Error);
    w.finish();
    ZipArchive z(path);
    CHECK(z.prefix() == "archive");
    CHECK(z.record_names() ==
          std::vector<std::string>{"data.pkl", "data/0", "byteorder", ".storage_alignment", "version", ".data/serialization_id"});
    CHECK(as_string(z.record("version")) == "3\n");
    CHECK(as_string(z.record("byteorder")) == "little");
    CHECK(as_string(z.record(".storage_alignment")) == "64");
    CHECK(z.record(".data/serialization_id").size() == 40);
    CHECK(as_string(z.record("data/0")) == "01234567");
    z.verify_all_crcs();
    // Same records, same bytes.
    const std::string path2 = dir + "/t2.pt";
    TorchZipWriter w2(path2, "archive");
    w2.add_record("data.pkl", std::string_view("\x80\x02N."));
    w2.add_record("data/0", std::string_view("01234567"));
    w2.finish();
    CHECK(slurp(path) == slurp(path2));
}

TEST_CASE("zip: forced ZIP64 and more than 65535 entries") {
    const std::string dir = mds::test::scratch_dir("zip64").string();
    const std::string path = dir + "/z.zip";
    const std::string bytes = two_records(path, {.force_zip64 = true}, "c");
    ZipArchive z(path);
    CHECK(z.zip64());
    REQUIRE(z.entries().size() == 2);
    CHECK(z.entries()[0].size == 100);
    CHECK(as_string(z.data(z.at("two"))) == "hello");
    CHECK(z.entries()[1].data_offset % 64 == 0);
    z.verify_all_crcs();
    CHECK(as_string(z.comment()) == "c");

    const std::string many = dir + "/many.zip";
    {
        ZipWriter w(many);
        for (int i = 0; i < 65536; ++i) w.add_record(std::to_string(i), std::string_view(i % 2 ? "x" : ""));
        w.finish();
    }
    ZipArchive m(many);
    CHECK(m.zip64());
    REQUIRE(m.entries().size() == 65536);
    CHECK(m.entries()[65535].name == "65535");
    CHECK(as_string(m.data(m.at("65535"))) == "x");
}

TEST_CASE("zip: malformed archives are errors naming the file, entry and offset") {
    const std::string dir = mds::test::scratch_dir("zip_bad").string();
    const std::string good_path = dir + "/good.zip";
    const std::string good = two_records(good_path);
    const std::string bad = dir + "/bad.zip";
    auto fails = [&](const std::string& bytes, const std::string& expect) {
        spit(bad, bytes);
        CHECK_THROWS_WITH_AS(ZipArchive{bad}, doctest::Contains(expect.c_str()), mds::Error);
    };
    const std::size_t c0 = find_sig(good, kCentral, 0), c1 = find_sig(good, kCentral, 1);
    const std::size_t l1 = find_sig(good, kLocal, 1), end = find_sig(good, kEnd);

    fails("", "too short");
    fails(std::string(100, 'x'), "no end of central directory");
    // A comment length that does not reach the end of the file: no valid end record.
    {
        std::string s = good;
        put16(s, end + 20, 5);
        fails(s, "no end of central directory");
    }
    // Every truncation fails cleanly.
    for (std::size_t n = 0; n < good.size(); ++n) {
        spit(bad, good.substr(0, n));
        CHECK_THROWS_AS(ZipArchive{bad}, mds::Error);
    }
    {
        std::string s = good;
        put32(s, c1, 0x12345678);
        fails(s, "central directory entry 1 at offset " + std::to_string(c1) + ": bad signature 0x12345678");
    }
    {
        std::string s = good;
        put32(s, end + 16, static_cast<std::uint32_t>(good.size()));  // central directory offset past the end
        fails(s, "runs past offset");
    }
    {
        std::string s = good;
        put16(s, end + 10, 50);  // 50 entries in 2 entries' bytes
        put16(s, end + 8, 50);
        fails(s, "50 entries cannot fit");
    }
    {
        std::string s = good;
        put32(s, c1 + 42, static_cast<std::uint32_t>(good.size() - 10));  // local header out of the file
        fails(s, "entry \"two\"");
        fails(s, "not inside the file");
    }
    {
        std::string s = good;
        s[l1 + 30] = 'T';  // local name "Two" vs central "two"
        fails(s, "name \"Two\" differs from the central directory's");
    }
    {
        std::string s = good;
        put32(s, l1, 0);
        fails(s, "local header at offset " + std::to_string(l1) + ": bad signature 0x00000000");
    }
    {
        std::string s = good;
        put32(s, c0 + 20, 200);  // "one" grows to 200 bytes, over the header of "two"
        put32(s, c0 + 24, 200);
        fails(s, "overlaps entry \"one\"");
    }
    {
        std::string s = good;
        put32(s, c0 + 20, 99);  // stored but sizes differ
        fails(s, "compressed size 99 != size 100");
    }
    {
        std::string s = good;
        put32(s, c1 + 42, static_cast<std::uint32_t>(find_sig(good, kLocal, 0)));  // both entries at one header
        fails(s, "differs from the central directory's");
    }
    {
        std::string s = good;
        put32(s, c0 + 24, 0xFFFFFFFFu);  // saturated size without a ZIP64 field
        fails(s, "without a ZIP64 extra field");
    }
    {
        std::string s = good;
        put16(s, c1 + 28, 0x7000);  // name length runs past the central directory
        fails(s, "run past the central directory end");
    }
    // Duplicate names: rename "two" to "one" in both headers.
    {
        std::string s = good;
        s.replace(c1 + 46, 3, "one");
        s.replace(l1 + 30, 3, "one");
        fails(s, "duplicate entry name");
    }
}

TEST_CASE("zip: deflated entries and bad CRCs are reported on access") {
    const std::string dir = mds::test::scratch_dir("zip_deflate").string();
    const std::string path = dir + "/d.zip";
    std::string s = two_records(path);
    const std::size_t c0 = find_sig(s, kCentral, 0), l0 = find_sig(s, kLocal, 0);
    put16(s, c0 + 10, 8);
    put16(s, l0 + 8, 8);
    spit(path, s);
    ZipArchive z(path);
    CHECK(z.at("one").method == 8);
    CHECK_THROWS_WITH_AS(z.data(z.at("one")), doctest::Contains("entry \"one\""), mds::Error);
    CHECK_THROWS_WITH_AS(z.data(z.at("one")), doctest::Contains("method 8 (deflate)"), mds::Error);
    CHECK(as_string(z.data(z.at("two"))) == "hello");

    // Local and central methods must agree.
    put16(s, l0 + 8, 0);
    spit(path, s);
    CHECK_THROWS_WITH_AS(ZipArchive{path}, doctest::Contains("method 0 differs"), mds::Error);

    std::string t = two_records(path);
    ZipArchive ok(path);
    t[ok.at("two").data_offset] = 'j';  // "jello"
    spit(path, t);
    ZipArchive z2(path);
    CHECK(as_string(z2.data(z2.at("two"))) == "jello");
    CHECK_THROWS_WITH_AS(z2.verify_crc(z2.at("two")), doctest::Contains("CRC-32 mismatch"), mds::Error);
    CHECK_THROWS_WITH_AS(z2.verify_all_crcs(), doctest::Contains("entry \"two\""), mds::Error);
    z2.verify_crc(z2.at("one"));
}

TEST_CASE("zip: an archive without a folder is no torch archive") {
    const std::string dir = mds::test::scratch_dir("zip_noprefix").string();
    const std::string path = dir + "/n.zip";
    two_records(path);
    ZipArchive z(path);
    CHECK_FALSE(z.has_record("one"));
    CHECK_THROWS_WITH_AS(z.prefix(), doctest::Contains("first entry \"one\" is not in a folder"), mds::Error);
    CHECK_THROWS_AS(z.record("one"), mds::Error);
}
