// Fuzzes mds::LineBatchReader (util/line_reader.h) on plain and zstd files, with small batches.
// Input: byte 0 picks the batch size and the case below, the rest is the file content.
// Invariants: plain content (not starting with the zstd magic) and the same content compressed
// as one or two zstd frames are both read back as exactly the universal-newline split of the
// content, with the right line numbers and byte offsets; a damaged zstd stream (truncated or with
// a flipped byte) and arbitrary bytes after the zstd magic end in success or mds::Error only.
#include <zstd.h>  // ZSTD_compress

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "mds/util/line_reader.h"

namespace {

struct RefLine {
    std::string_view text;
    std::uint64_t offset;  // of the line's first byte in the content
};

// Python's universal newlines: "\n", "\r\n" and a lone "\r" end a line; a last line may lack one.
std::vector<RefLine> split_lines(std::string_view s) {
    std::vector<RefLine> lines;
    std::size_t start = 0, i = 0;
    while (i < s.size()) {
        if (s[i] != '\n' && s[i] != '\r') {
            ++i;
            continue;
        }
        lines.push_back({s.substr(start, i - start), start});
        i += (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ? 2 : 1;
        start = i;
    }
    if (start < s.size()) lines.push_back({s.substr(start), start});
    return lines;
}

// Reads every line of `path`; with `expect`, checks them against it (then the read must succeed).
bool read_lines(const std::string& path, std::size_t batch_bytes, const std::vector<RefLine>* expect) {
    return mds::fuzz::only_mds_errors([&] {
        mds::LineBatchReader reader(path, batch_bytes);
        mds::LineBatch batch;
        std::size_t n = 0;
        std::uint64_t total_bytes = 0;  // guard against decompression bombs in the damaged cases
        while (reader.next(batch)) {
            MDS_FUZZ_CHECK(batch.size() > 0);
            MDS_FUZZ_CHECK(batch.first_line_number == n + 1);
            for (std::size_t i = 0; i < batch.size(); ++i) {
                // Lines lie inside the batch buffer, back to back.
                MDS_FUZZ_CHECK(batch.lines[i].begin + std::uint64_t{batch.lines[i].size} <= batch.data.size());
                if (i > 0) MDS_FUZZ_CHECK(batch.lines[i].begin == batch.lines[i - 1].begin + batch.lines[i - 1].size);
            }
            // A batch ends at the first line end after batch_bytes: without its last line it is smaller.
            MDS_FUZZ_CHECK(batch.lines.back().begin < batch_bytes || batch.size() == 1);
            if (expect) {
                MDS_FUZZ_CHECK(n + batch.size() <= expect->size());
                MDS_FUZZ_CHECK(batch.first_byte_offset == (*expect)[n].offset);
                for (std::size_t i = 0; i < batch.size(); ++i) MDS_FUZZ_CHECK(batch.line(i) == (*expect)[n + i].text);
            }
            n += batch.size();
            total_bytes += batch.data.size();
            if (total_bytes > (std::uint64_t{256} << 20)) return;
        }
        MDS_FUZZ_CHECK(batch.size() == 0);
        if (expect) MDS_FUZZ_CHECK(n == expect->size());
    });
}

std::string zstd_frame(std::string_view s, int level) {
    std::string out(ZSTD_compressBound(s.size()), '\0');
    std::size_t n = ZSTD_compress(out.data(), out.size(), s.data(), s.size(), level);
    MDS_FUZZ_CHECK(!ZSTD_isError(n));
    out.resize(n);
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const unsigned control = data[0];
    const std::size_t batch_bytes = 1 + (control & 0x1F);  // 1..32 bytes: many batch boundaries
    const std::string_view content(reinterpret_cast<const char*>(data) + 1, size - 1);
    const auto expect = split_lines(content);
    static const std::string path = mds::fuzz::scratch_path("input");
    constexpr unsigned char kMagic[4] = {0x28, 0xB5, 0x2F, 0xFD};

    // One reader per input, picked by bits 5-6 (each reader costs fresh 1 MiB blocks, which
    // dominate the run time under ASan): the plain content, the content as two zstd frames split
    // at a point picked by the control byte, that stream damaged (bit 7: truncated, else one byte
    // flipped after the magic), or the fuzzer's bytes right behind the zstd magic.
    const unsigned mode = (control >> 5) & 3;
    std::string file;
    const std::vector<RefLine>* check = nullptr;
    if (mode == 0) {
        // Content that happens to start with the zstd magic is read as zstd: success or Error.
        file.assign(content);
        if (file.size() < 4 || std::memcmp(file.data(), kMagic, 4) != 0) check = &expect;
    } else if (mode == 3) {
        file.assign(reinterpret_cast<const char*>(kMagic), 4);
        file.append(content);
    } else {
        const std::size_t cut = content.empty() ? 0 : (control * 131u) % (content.size() + 1);
        file = zstd_frame(content.substr(0, cut), 1) + zstd_frame(content.substr(cut), 3);
        if (mode == 1) {
            check = &expect;
        } else {
            const std::size_t at = 4 + (control * 7919u + content.size()) % (file.size() - 4);
            if (control & 0x80)
                file.resize(at);
            else
                file[at] = static_cast<char>(file[at] ^ (1u << (content.size() % 8)));
        }
    }
    mds::fuzz::write_bytes(path, file.data(), file.size());
    const bool ok = read_lines(path, batch_bytes, check);
    MDS_FUZZ_CHECK(ok || !check);
    return 0;
}
