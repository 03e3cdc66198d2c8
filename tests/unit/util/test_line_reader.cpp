// LineBatchReader: universal newlines (specs/data.md §2.2) across block and batch boundaries, line
// numbers and byte offsets, zstd input detected by content, and errors for broken zstd streams.
#include <doctest/doctest.h>

#include <fcntl.h>   // open
#include <unistd.h>  // dup, dup2, pipe, write, close

#include <zstd.h>  // ZSTD_compress, ZSTD_compressStream2 (test inputs)

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mds/util/error.h"
#include "mds/util/line_reader.h"
#include "test_support.h"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

struct ReadLine {
    std::string text;
    std::uint64_t number;
};

struct ReadResult {
    std::vector<ReadLine> lines;
    std::vector<std::uint64_t> batch_offsets;  // first_byte_offset of each batch
    std::uint64_t bytes_read = 0;
    std::size_t batches = 0;
};

void write_bytes(const std::filesystem::path& path, const std::string& content) {
    std::ofstream f(path, std::ios::binary);
    f.write(content.data(), static_cast<std::streamsize>(content.size()));
    REQUIRE(f.good());
}

// Reads everything, checking the batch invariants on the way.
ReadResult read_all(const std::string& path, std::size_t batch_bytes = kMiB) {
    mds::LineBatchReader reader(path, batch_bytes);
    ReadResult r;
    mds::LineBatch batch;
    std::uint64_t expect_line = 1;
    while (reader.next(batch)) {
        REQUIRE(batch.size() > 0);
        CHECK(batch.first_line_number == expect_line);
        r.batch_offsets.push_back(batch.first_byte_offset);
        for (std::size_t i = 0; i < batch.size(); ++i) {
            CHECK(batch.lines[i].begin + batch.lines[i].size <= batch.data.size());
            r.lines.push_back({std::string(batch.line(i)), batch.first_line_number + i});
        }
        // A batch ends at the first line end after batch_bytes: all but its last line fit below.
        std::size_t before_last = batch.lines.back().begin;
        CHECK(before_last < std::max<std::size_t>(batch_bytes, 1));
        expect_line += batch.size();
        ++r.batches;
    }
    CHECK(batch.size() == 0);
    CHECK_FALSE(reader.next(batch));  // stays at the end
    r.bytes_read = reader.bytes_read();
    return r;
}

std::vector<std::string> texts(const ReadResult& r) {
    std::vector<std::string> out;
    for (const auto& l : r.lines) out.push_back(l.text);
    return out;
}

// Python's universal newlines (str.splitlines restricted to \n, \r\n and \r).
std::vector<std::string> split_universal(const std::string& s) {
    std::vector<std::string> out;
    std::string cur;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
            out.push_back(cur);
            cur.clear();
            if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        } else {
            cur += s[i];
        }
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
}

std::string zstd_compress(const std::string& data, int level = 3, bool checksum = false) {
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checksum ? 1 : 0);
    std::string out(ZSTD_compressBound(data.size()), '\0');
    std::size_t n = ZSTD_compress2(cctx, out.data(), out.size(), data.data(), data.size());
    ZSTD_freeCCtx(cctx);
    REQUIRE_FALSE(ZSTD_isError(n));
    out.resize(n);
    return out;
}

// A streamed frame with a flush every `flush_every` bytes, so its blocks end at arbitrary offsets
// (the zstd CLI only makes 128 KiB blocks), and no content size in the header.
std::string zstd_compress_flushed(const std::string& data, std::size_t flush_every, bool checksum = false) {
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checksum ? 1 : 0);
    std::string out;
    std::vector<char> buf(ZSTD_CStreamOutSize());
    for (std::size_t pos = 0; pos < data.size() || pos == 0;) {
        std::size_t n = std::min(flush_every, data.size() - pos);
        bool last = pos + n >= data.size();
        ZSTD_inBuffer in{data.data() + pos, n, 0};
        ZSTD_EndDirective mode = last ? ZSTD_e_end : ZSTD_e_flush;
        for (;;) {
            ZSTD_outBuffer o{buf.data(), buf.size(), 0};
            std::size_t left = ZSTD_compressStream2(cctx, &o, &in, mode);
            REQUIRE_FALSE(ZSTD_isError(left));
            out.append(buf.data(), o.pos);
            if (left == 0 && in.pos == in.size) break;
        }
        pos += n;
        if (last) break;
    }
    ZSTD_freeCCtx(cctx);
    return out;
}

std::string make_lines(std::size_t count, std::uint32_t seed, const char* eol = "\n") {
    std::mt19937 rng(seed);
    std::string s;
    for (std::size_t i = 0; i < count; ++i) {
        s += "{\"text\": \"line " + std::to_string(i) + " ";
        s += std::string(rng() % 200, static_cast<char>('a' + rng() % 26));
        s += "\"}";
        s += eol;
    }
    return s;
}

}  // namespace

TEST_CASE("line_reader: \\n, \\r\\n and lone \\r end lines; offsets and line numbers") {
    auto dir = mds::test::scratch_dir("line-reader-eol");
    auto path = (dir / "in.jsonl").string();
    write_bytes(path, "a\nbb\r\nccc\rdddd\r\r\ne\n\nf");
    ReadResult r = read_all(path, 0);  // one line per batch: each batch offset is its line's offset
    CHECK(texts(r) == std::vector<std::string>{"a", "bb", "ccc", "dddd", "", "e", "", "f"});
    CHECK(r.batch_offsets == std::vector<std::uint64_t>{0, 2, 6, 10, 15, 17, 19, 20});
    for (std::size_t i = 0; i < r.lines.size(); ++i) CHECK(r.lines[i].number == i + 1);
    CHECK(r.bytes_read == 21);
    // The same lines in one batch.
    ReadResult one = read_all(path);
    CHECK(one.batches == 1);
    CHECK(texts(one) == texts(r));
    CHECK(one.bytes_read == 21);
    std::filesystem::remove_all(dir);
}

TEST_CASE("line_reader: the end of the input") {
    auto dir = mds::test::scratch_dir("line-reader-end");
    auto p = (dir / "f").string();
    struct Case {
        std::string content;
        std::vector<std::string> lines;
    };
    const Case cases[] = {
        {"", {}},
        {"\n", {""}},
        {"\r", {""}},
        {"\r\n", {""}},
        {"\n\n", {"", ""}},
        {"\r\r", {"", ""}},
        {"\n\r", {"", ""}},
        {"x", {"x"}},
        {"xyz", {"xyz"}},  // shorter than the 4 bytes sniffed for zstd
        {"ab\ncd", {"ab", "cd"}},
        {"ab\ncd\r", {"ab", "cd"}},
        {"ab\ncd\r\n", {"ab", "cd"}},
        {"\x28\xB5\x2F", {"\x28\xB5\x2F"}},  // 3 bytes of the zstd magic: plain text
    };
    for (const auto& c : cases) {
        INFO("content size " << c.content.size());
        write_bytes(p, c.content);
        ReadResult r = read_all(p);
        CHECK(texts(r) == c.lines);
        CHECK(r.bytes_read == c.content.size());
        mds::LineBatchReader reader(p);
        CHECK(reader.raw_total() == c.content.size());
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("line_reader: \\r\\n and \\r across the 1 MiB read blocks") {
    auto dir = mds::test::scratch_dir("line-reader-blocks");
    auto p = (dir / "f").string();
    // The reader sniffs 4 bytes first, so blocks may end at 1 MiB or 1 MiB + 4: try all nearby.
    for (std::size_t cr = kMiB - 6; cr <= kMiB + 6; ++cr) {
        for (const char* term : {"\r\n", "\r", "\n", "\r\r\n", "\r\n\r"}) {
            std::string s(cr, 'x');
            s[10] = '\n';
            s += term;
            s += "tail\r\nlast";
            INFO("terminator at " << cr << ", " << std::string(term).size() << " bytes");
            write_bytes(p, s);
            ReadResult r = read_all(p);
            CHECK(texts(r) == split_universal(s));
            CHECK(r.bytes_read == s.size());
            // Tiny batches cut the same lines.
            CHECK(texts(read_all(p, 100000)) == split_universal(s));
        }
    }
    // "\r" as the very last byte, exactly at a block end: one line, no empty one after it.
    for (std::size_t size : {kMiB, kMiB + 4, 2 * kMiB + 4}) {
        std::string s(size - 1, 'y');
        s += '\r';
        write_bytes(p, s);
        ReadResult r = read_all(p);
        REQUIRE(r.lines.size() == 1);
        CHECK(r.lines[0].text.size() == size - 1);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("line_reader: long lines over several blocks") {
    auto dir = mds::test::scratch_dir("line-reader-long");
    auto p = (dir / "f").string();
    std::string a(3 * kMiB + 12345, 'a'), b = "short", c(2 * kMiB + 7, 'c');
    for (std::size_t i = 0; i < a.size(); i += 4099) a[i] = 'A';
    std::string content = a + "\r\n" + b + "\r" + c;  // the last line has no terminator
    write_bytes(p, content);
    for (std::size_t batch : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, kMiB, 64 * kMiB}) {
        INFO("batch_bytes " << batch);
        ReadResult r = read_all(p, batch);
        REQUIRE(r.lines.size() == 3);
        CHECK(r.lines[0].text == a);
        CHECK(r.lines[1].text == b);
        CHECK(r.lines[2].text == c);
        CHECK(r.lines[2].number == 3);
        CHECK(r.bytes_read == content.size());
        if (batch <= 1) CHECK(r.batch_offsets == std::vector<std::uint64_t>{0, a.size() + 2, a.size() + 2 + b.size() + 1});
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("line_reader: batches cut the same lines whatever batch_bytes") {
    auto dir = mds::test::scratch_dir("line-reader-batches");
    auto p = (dir / "f").string();
    std::mt19937 rng(7);
    std::string content;
    for (int i = 0; i < 30000; ++i) {
        content += std::string(rng() % 120, static_cast<char>('a' + i % 26));
        const char* eols[] = {"\n", "\r\n", "\r", "\n\n"};
        content += eols[rng() % 4];
    }
    write_bytes(p, content);
    const auto expected = split_universal(content);
    for (std::size_t batch : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{100},
                              std::size_t{65536}, kMiB, 3 * kMiB}) {
        INFO("batch_bytes " << batch);
        ReadResult r = read_all(p, batch);
        CHECK(texts(r) == expected);
        CHECK(r.bytes_read == content.size());
        for (std::size_t i = 0; i < r.lines.size(); ++i)
            if (r.lines[i].number != i + 1) {
                CHECK(r.lines[i].number == i + 1);
                break;
            }
        if (batch == 0) {
            // Recompute each line's offset from the content.
            std::vector<std::uint64_t> offsets;
            std::size_t pos = 0;
            while (pos < content.size()) {
                offsets.push_back(pos);
                std::size_t e = content.find_first_of("\r\n", pos);
                if (e == std::string::npos) break;
                pos = e + ((content[e] == '\r' && e + 1 < content.size() && content[e + 1] == '\n') ? 2 : 1);
            }
            CHECK(r.batch_offsets == offsets);
        }
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("line_reader: zstd input, detected by content") {
    auto dir = mds::test::scratch_dir("line-reader-zstd");
    const std::string plain = make_lines(40000, 1) + "no newline at the end";  // ~4.6 MB
    const auto expected = split_universal(plain);
    write_bytes(dir / "plain.jsonl", plain);
    ReadResult ref = read_all((dir / "plain.jsonl").string());
    REQUIRE(texts(ref) == expected);

    SUBCASE("one frame, any name") {
        auto p = (dir / "data.txt").string();  // not named .zst
        std::string z = zstd_compress(plain, 3, true);
        write_bytes(p, z);
        ReadResult r = read_all(p);
        CHECK(texts(r) == expected);
        CHECK(r.bytes_read == plain.size());
        mds::LineBatchReader reader(p);
        CHECK(reader.raw_total() == z.size());
        mds::LineBatch b;
        while (reader.next(b)) {}
        CHECK(reader.raw_consumed() == z.size());
    }
    SUBCASE("several frames back to back, and an empty frame") {
        std::size_t cut = plain.size() / 3;
        std::string z = zstd_compress(plain.substr(0, cut)) + zstd_compress("") + zstd_compress(plain.substr(cut), 19);
        auto p = (dir / "multi.zst").string();
        write_bytes(p, z);
        CHECK(texts(read_all(p)) == expected);
    }
    SUBCASE("blocks ending anywhere (flushed stream), so a read ends inside a block") {
        // Sizes just above 1 MiB: the last block is still being flushed when its input has been
        // read (zstd holds back one input byte until then, so the end is not taken for truncation).
        for (std::size_t size : {kMiB + 1, kMiB + 100, kMiB + 50000, kMiB + 99999, 2 * kMiB + 3333}) {
            for (std::size_t flush : {std::size_t{1000}, std::size_t{100000}, std::size_t{131072}}) {
                INFO("size " << size << ", flush every " << flush);
                std::string data = plain.substr(0, size);
                auto p = (dir / "flushed.zst").string();
                write_bytes(p, zstd_compress_flushed(data, flush));
                CHECK(texts(read_all(p)) == split_universal(data));
                write_bytes(p, zstd_compress_flushed(data, flush, true));
                CHECK(texts(read_all(p)) == split_universal(data));
            }
        }
    }
    SUBCASE("the zstd command-line tool's output") {
        std::string cmd = "zstd -q -f -3 " + (dir / "plain.jsonl").string() + " -o " + (dir / "cli.jsonl.zst").string() +
                          " 2>/dev/null";
        if (std::system(cmd.c_str()) != 0) {
            MESSAGE("zstd CLI not available; skipped");
            return;
        }
        CHECK(texts(read_all((dir / "cli.jsonl.zst").string())) == expected);
    }
    SUBCASE("an empty frame alone is an empty input") {
        auto p = (dir / "empty.zst").string();
        write_bytes(p, zstd_compress(""));
        CHECK(read_all(p).lines.empty());
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("line_reader: truncated or corrupt zstd is an mds::Error naming the file") {
    auto dir = mds::test::scratch_dir("line-reader-zstd-bad");
    const std::string plain = make_lines(20000, 2);
    const std::string z = zstd_compress(plain, 3, true);
    auto p = (dir / "bad.jsonl.zst").string();
    auto drain = [&](std::size_t batch_bytes = kMiB) {
        mds::LineBatchReader reader(p, batch_bytes);
        mds::LineBatch b;
        while (reader.next(b)) {}
    };
    // Truncated at many lengths, from the bare magic number to one byte short.
    std::vector<std::size_t> lengths = {4, 5, 6, 8, 12, 20, 100, z.size() / 2, z.size() - 4, z.size() - 1};
    for (std::size_t len = 4; len < z.size(); len += z.size() / 37 + 1) lengths.push_back(len);
    for (std::size_t len : lengths) {
        INFO("truncated to " << len << " of " << z.size() << " bytes");
        write_bytes(p, z.substr(0, len));
        try {
            drain();
            FAIL_CHECK("no error");
        } catch (const mds::Error& e) {
            CHECK(std::string(e.what()).find(p) != std::string::npos);
        }
    }
    // Corrupt bytes: in the frame header, in a block header, in the data (the checksum catches it).
    for (std::size_t pos : {std::size_t{4}, std::size_t{5}, std::size_t{9}, z.size() / 2, z.size() - 3}) {
        INFO("byte " << pos << " flipped");
        std::string bad = z;
        bad[pos] = static_cast<char>(bad[pos] ^ 0x5A);
        write_bytes(p, bad);
        try {
            drain();
            FAIL_CHECK("no error");
        } catch (const mds::Error& e) {
            CHECK(std::string(e.what()).find(p) != std::string::npos);
        }
    }
    // Garbage after a complete frame.
    write_bytes(p, z + "garbage!");
    CHECK_THROWS_AS(drain(), mds::Error);
    // The error does not come before the lines read so far have been returned.
    write_bytes(p, z.substr(0, z.size() / 2));
    {
        mds::LineBatchReader reader(p, 1000);
        mds::LineBatch b;
        std::size_t lines = 0;
        CHECK_THROWS_AS(
            [&] {
                while (reader.next(b)) lines += b.size();
            }(),
            mds::Error);
        CHECK(lines > 1000);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("line_reader: missing files and directories are errors naming the path") {
    auto dir = mds::test::scratch_dir("line-reader-open");
    std::string missing = (dir / "no-such.jsonl").string();
    try {
        mds::LineBatchReader r(missing);
        FAIL_CHECK("no error");
    } catch (const mds::Error& e) {
        CHECK(std::string(e.what()).find(missing) != std::string::npos);
    }
    try {
        mds::LineBatchReader r(dir.string());
        FAIL_CHECK("no error");
    } catch (const mds::Error& e) {
        CHECK(std::string(e.what()).find(dir.string()) != std::string::npos);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("line_reader: standard input through a pipe, written in small pieces") {
    // "-" reads fd 0: point it at a pipe for the duration of the test.
    std::string content;
    std::mt19937 rng(11);
    for (int i = 0; i < 20000; ++i) {
        content += "line " + std::to_string(i);
        const char* eols[] = {"\n", "\r\n", "\r"};
        content += eols[rng() % 3];
    }
    content += "end";
    // If reading fails, fd 0 is restored before the writer is joined; it must then get EPIPE, not die.
    auto old_sigpipe = std::signal(SIGPIPE, SIG_IGN);
    int saved = ::dup(0);  // -1 if the test runs with fd 0 closed
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    if (fds[0] != 0) {
        REQUIRE(::dup2(fds[0], 0) == 0);
        ::close(fds[0]);
    }
    auto restore_stdin = [&] {
        if (saved >= 0) {
            ::dup2(saved, 0);
            ::close(saved);
        } else {
            ::close(0);
        }
    };
    std::thread writer([&] {
        // Pieces of 1..7 bytes, so "\r" and "\n" often arrive in different reads.
        std::mt19937 wr(3);
        for (std::size_t pos = 0; pos < content.size();) {
            std::size_t n = std::min<std::size_t>(1 + wr() % 7, content.size() - pos);
            if (::write(fds[1], content.data() + pos, n) != static_cast<ssize_t>(n)) break;
            pos += n;
        }
        ::close(fds[1]);
    });
    ReadResult r;
    try {
        r = read_all("-", 4096);
    } catch (...) {
        restore_stdin();  // closes the read end: the writer stops
        writer.join();
        std::signal(SIGPIPE, old_sigpipe);
        throw;
    }
    writer.join();
    restore_stdin();
    std::signal(SIGPIPE, old_sigpipe);
    CHECK(texts(r) == split_universal(content));
    CHECK(r.bytes_read == content.size());
}

namespace {

// Reads `path` with a line limit; long lines come back as "<too long: N>".
std::vector<std::string> read_limited(const std::string& path, std::size_t batch_bytes, std::uint64_t max_line,
                                      std::uint64_t* bytes_read = nullptr) {
    mds::LineBatchReader reader(path, batch_bytes, max_line);
    mds::LineBatch batch;
    std::vector<std::string> out;
    std::uint64_t expect_line = 1;
    while (reader.next(batch)) {
        REQUIRE(batch.size() > 0);
        CHECK(batch.first_line_number == expect_line);
        for (std::size_t i = 0; i < batch.size(); ++i) {
            const auto& l = batch.lines[i];
            CHECK(l.begin + std::uint64_t{l.size} <= batch.data.size());
            if (l.too_long_bytes) {
                CHECK(l.size == 0);
                CHECK(l.too_long_bytes > max_line);
                out.push_back("<too long: " + std::to_string(l.too_long_bytes) + ">");
            } else {
                CHECK(l.size <= max_line);
                out.push_back(std::string(batch.line(i)));
            }
        }
        expect_line += batch.size();
    }
    if (bytes_read) *bytes_read = reader.bytes_read();
    return out;
}

std::vector<std::string> limited_reference(const std::string& content, std::uint64_t max_line) {
    auto lines = split_universal(content);
    for (auto& l : lines)
        if (l.size() > max_line) l = "<too long: " + std::to_string(l.size()) + ">";
    return lines;
}

}  // namespace

TEST_CASE("line_reader: lines longer than max_line_bytes are read through, not kept") {
    auto dir = mds::test::scratch_dir("line-reader-too-long");
    auto p = (dir / "f").string();
    std::mt19937 rng(11);
    // Lines of every size class around the limits and the 1 MiB blocks, with every terminator, a
    // long one crossing several blocks and one at the very end without a terminator.
    for (int round = 0; round < 6; ++round) {
        std::string content;
        const std::size_t sizes[] = {0, 3, 5, 6, 100, kMiB - 1, kMiB, kMiB + 1, 3 * kMiB + 7, 2 * kMiB, 17};
        const char* terms[] = {"\n", "\r\n", "\r"};
        for (std::size_t k = 0; k < std::size(sizes); ++k) {
            std::string line(sizes[(k + static_cast<std::size_t>(round)) % std::size(sizes)], 'a');
            for (auto& c : line) c = static_cast<char>('a' + rng() % 26);
            content += line;
            if (round % 2 == 0 || k + 1 < std::size(sizes)) content += terms[rng() % 3];
        }
        write_bytes(p, content);
        for (std::uint64_t max_line : {std::uint64_t{5}, std::uint64_t{kMiB}, std::uint64_t{2 * kMiB + 3},
                                       mds::LineBatchReader::kMaxLineBytes}) {
            for (std::size_t batch_bytes : {std::size_t{1}, std::size_t{4096}, 4 * kMiB}) {
                INFO("round " << round << ", max_line " << max_line << ", batch_bytes " << batch_bytes);
                std::uint64_t bytes = 0;
                CHECK(read_limited(p, batch_bytes, max_line, &bytes) == limited_reference(content, max_line));
                CHECK(bytes == content.size());
            }
        }
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("line_reader: a line over the limit is counted in the batch size and its memory is given back") {
    auto dir = mds::test::scratch_dir("line-reader-memory");
    auto p = (dir / "f").string();
    std::string content = "{\"a\": 1}\n" + std::string(20 * kMiB, 'x') + "\n";
    for (int i = 0; i < 1000; ++i) content += "short line\n";
    write_bytes(p, content);
    {
        // Kept (limit above it): the next batch of short lines does not hold on to 20 MiB.
        mds::LineBatchReader reader(p, 4096, 64 * kMiB);
        mds::LineBatch batch;
        bool seen_long = false;
        while (reader.next(batch)) {
            for (std::size_t i = 0; i < batch.size(); ++i)
                if (batch.lines[i].size == 20 * kMiB) seen_long = true;
            if (seen_long && batch.lines.back().size < 100) CHECK(batch.data.capacity() < 8 * kMiB);
        }
        CHECK(seen_long);
    }
    {
        // Too long: the line is reported with its size, the batch never grows to it.
        mds::LineBatchReader reader(p, 4096, kMiB);
        mds::LineBatch batch;
        std::size_t too_long = 0, lines = 0;
        while (reader.next(batch)) {
            CHECK(batch.data.capacity() < 8 * kMiB);
            for (const auto& l : batch.lines) too_long += l.too_long_bytes == 20 * kMiB;
            lines += batch.size();
        }
        CHECK(too_long == 1);
        CHECK(lines == 1002);
        CHECK(reader.bytes_read() == content.size());
    }
    std::filesystem::remove_all(dir);
}

