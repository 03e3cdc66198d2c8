// Reading jsonl input in batches of whole lines: from a file, a zstd-compressed file (detected by
// its magic number, whatever the name), or standard input ("-"). Lines end at "\n", "\r\n" or a
// lone "\r", as in Python's universal-newlines text mode (specs/data.md §2.2). Memory is bounded
// by the batch size plus the longest line kept; a line longer than the reader's `max_line_bytes` is
// read through without being stored (Line::too_long_bytes says how long it was), so one huge line
// (a file that lost its newlines, a binary file) cannot take the memory of the machine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mds {

// A source of decompressed bytes.
class ByteSource {
public:
    virtual ~ByteSource() = default;
    // Reads up to `cap` bytes; returns 0 at end of input. Throws mds::Error on I/O or format errors.
    virtual std::size_t read(char* buf, std::size_t cap) = 0;
    // Bytes of the underlying file consumed so far and its total size (0 when unknown, e.g. a
    // pipe): for progress and ETA, counted in compressed bytes for .zst input.
    virtual std::uint64_t raw_consumed() const = 0;
    virtual std::uint64_t raw_total() const = 0;
};

// Opens `path` ("-" = stdin); zstd input is recognised by its magic number.
std::unique_ptr<ByteSource> open_byte_source(const std::string& path);

struct Line {
    std::uint32_t begin = 0;  // offset in LineBatch::data
    std::uint32_t size = 0;   // without the line terminator
    // Not 0: the line had this many bytes (terminator excluded), more than the reader's
    // max_line_bytes; its text was not kept (size is 0). Callers report or skip it.
    std::uint64_t too_long_bytes = 0;
};

// Whole lines, copied into one buffer.
struct LineBatch {
    std::string data;
    std::vector<Line> lines;
    std::uint64_t first_line_number = 1;  // 1-based number of lines[0] in the input
    std::uint64_t first_byte_offset = 0;  // offset of data[0] in the decompressed input

    std::string_view line(std::size_t i) const { return {data.data() + lines[i].begin, lines[i].size}; }
    std::size_t size() const { return lines.size(); }
    void clear() {
        data.clear();
        lines.clear();
    }
};

class LineBatchReader {
public:
    // The longest line a LineBatch can hold (its offsets are 32-bit).
    static constexpr std::uint64_t kMaxLineBytes = 0xFFFFFFFFu;
    // `batch_bytes`: a batch ends at the first line end after this many bytes. `max_line_bytes`:
    // longer lines are returned with too_long_bytes set and no text (at most kMaxLineBytes).
    LineBatchReader(const std::string& path, std::size_t batch_bytes = std::size_t{1} << 20,
                    std::uint64_t max_line_bytes = kMaxLineBytes);
    // Fills `batch` with the next lines; false at end of input (batch then empty).
    bool next(LineBatch& batch);

    const std::string& path() const { return path_; }
    std::uint64_t raw_consumed() const { return source_->raw_consumed(); }
    std::uint64_t raw_total() const { return source_->raw_total(); }
    std::uint64_t bytes_read() const { return offset_; }

private:
    bool fill();
    // Finishes the line that starts at pending_pos_ and has no terminator in pending_ yet, reading
    // it straight into batch.data (or through, when longer than max_line_bytes_).
    void read_long_line(LineBatch& batch);

    std::string path_;
    std::unique_ptr<ByteSource> source_;
    std::size_t batch_bytes_;
    std::uint64_t max_line_bytes_;
    std::string pending_;         // bytes read but not yet given out
    std::size_t pending_pos_ = 0;
    bool eof_ = false;
    std::uint64_t next_line_ = 1;
    std::uint64_t offset_ = 0;    // decompressed offset of pending_[pending_pos_]
};

}  // namespace mds
