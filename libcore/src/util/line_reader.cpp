#include "mds/util/line_reader.h"

#include <fcntl.h>     // open
#include <sys/stat.h>  // fstat
#include <unistd.h>    // read, close

#include <zstd.h>  // ZSTD_createDStream, ZSTD_decompressStream

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "mds/util/error.h"

namespace mds {

namespace {

class FdReader {
public:
    explicit FdReader(const std::string& path) : path_(path) {
        if (path == "-") {
            fd_ = 0;
            name_ = "<stdin>";
        } else {
            fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
            if (fd_ < 0) throw Error(errno_message("cannot open " + path, errno));
            struct stat st {};
            if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) total_ = static_cast<std::uint64_t>(st.st_size);
            if (::fstat(fd_, &st) == 0 && S_ISDIR(st.st_mode)) {
                ::close(fd_);
                throw Error(path + ": is a directory, expected a .jsonl or .jsonl.zst file");
            }
            name_ = path;
        }
    }
    ~FdReader() {
        if (fd_ > 0) ::close(fd_);
    }
    FdReader(const FdReader&) = delete;
    FdReader& operator=(const FdReader&) = delete;

    std::size_t read(char* buf, std::size_t cap) {
        for (;;) {
            ssize_t n = ::read(fd_, buf, cap);
            if (n < 0) {
                if (errno == EINTR) continue;
                throw Error(errno_message("cannot read " + name_, errno));
            }
            consumed_ += static_cast<std::uint64_t>(n);
            return static_cast<std::size_t>(n);
        }
    }
    // Reads until `cap` bytes or end of input.
    std::size_t read_full(char* buf, std::size_t cap) {
        std::size_t got = 0;
        while (got < cap) {
            std::size_t n = read(buf + got, cap - got);
            if (n == 0) break;
            got += n;
        }
        return got;
    }
    const std::string& name() const { return name_; }
    std::uint64_t consumed() const { return consumed_; }
    std::uint64_t total() const { return total_; }

private:
    std::string path_;
    std::string name_;
    int fd_ = -1;
    std::uint64_t consumed_ = 0;
    std::uint64_t total_ = 0;
};

constexpr unsigned char kZstdMagic[4] = {0x28, 0xB5, 0x2F, 0xFD};

// Plain bytes; `head` holds bytes already read while sniffing the format.
class PlainSource final : public ByteSource {
public:
    PlainSource(std::unique_ptr<FdReader> in, std::string head) : in_(std::move(in)), head_(std::move(head)) {}
    std::size_t read(char* buf, std::size_t cap) override {
        if (head_pos_ < head_.size()) {
            std::size_t n = std::min(cap, head_.size() - head_pos_);
            std::memcpy(buf, head_.data() + head_pos_, n);
            head_pos_ += n;
            return n;
        }
        return in_->read(buf, cap);
    }
    std::uint64_t raw_consumed() const override { return in_->consumed() - (head_.size() - head_pos_); }
    std::uint64_t raw_total() const override { return in_->total(); }

private:
    std::unique_ptr<FdReader> in_;
    std::string head_;
    std::size_t head_pos_ = 0;
};

class ZstdSource final : public ByteSource {
public:
    ZstdSource(std::unique_ptr<FdReader> file, const std::string& head) : file_(std::move(file)) {
        stream_ = ZSTD_createDStream();
        if (!stream_) throw Error("cannot create a zstd decompression stream");
        ZSTD_initDStream(stream_);
        inbuf_.resize(std::max(ZSTD_DStreamInSize(), head.size()));
        inbuf_.replace(0, head.size(), head);
        zin_ = {inbuf_.data(), head.size(), 0};
    }
    ~ZstdSource() override { ZSTD_freeDStream(stream_); }
    ZstdSource(const ZstdSource&) = delete;
    ZstdSource& operator=(const ZstdSource&) = delete;

    std::size_t read(char* buf, std::size_t cap) override {
        ZSTD_outBuffer out{buf, cap, 0};
        while (out.pos == 0) {
            if (zin_.pos == zin_.size) {
                if (input_done_) {
                    if (!frame_done_)
                        throw Error(file_->name() + ": truncated zstd stream (ends inside a frame, after " +
                                    std::to_string(file_->consumed()) + " compressed bytes)");
                    return 0;
                }
                std::size_t n = file_->read(inbuf_.data(), inbuf_.size());
                if (n == 0) {
                    input_done_ = true;
                    continue;
                }
                zin_ = {inbuf_.data(), n, 0};
            }
            std::size_t r = ZSTD_decompressStream(stream_, &out, &zin_);
            if (ZSTD_isError(r))
                throw Error(file_->name() + ": corrupt zstd data near compressed byte " +
                            std::to_string(raw_consumed()) + ": " + ZSTD_getErrorName(r));
            frame_done_ = (r == 0);
        }
        return out.pos;
    }
    std::uint64_t raw_consumed() const override { return file_->consumed() - (zin_.size - zin_.pos); }
    std::uint64_t raw_total() const override { return file_->total(); }

private:
    std::unique_ptr<FdReader> file_;
    std::string inbuf_;
    ZSTD_inBuffer zin_{};
    ZSTD_DStream* stream_ = nullptr;
    bool input_done_ = false;
    bool frame_done_ = true;
};

}  // namespace

std::unique_ptr<ByteSource> open_byte_source(const std::string& path) {
    auto in = std::make_unique<FdReader>(path);
    std::string head(4, '\0');
    head.resize(in->read_full(head.data(), 4));
    if (head.size() == 4 && std::memcmp(head.data(), kZstdMagic, 4) == 0)
        return std::make_unique<ZstdSource>(std::move(in), std::move(head));
    return std::make_unique<PlainSource>(std::move(in), std::move(head));
}

namespace {
constexpr std::size_t kBlock = std::size_t{1} << 20;  // bytes asked of the source at a time
}  // namespace

LineBatchReader::LineBatchReader(const std::string& path, std::size_t batch_bytes, std::uint64_t max_line_bytes)
    : path_(path == "-" ? "<stdin>" : path),
      source_(open_byte_source(path)),
      batch_bytes_(batch_bytes),
      max_line_bytes_(std::min(max_line_bytes, kMaxLineBytes)) {}

bool LineBatchReader::fill() {
    // Drop consumed bytes, then append a block.
    if (pending_pos_ > 0) {
        pending_.erase(0, pending_pos_);
        pending_pos_ = 0;
    }
    std::size_t old = pending_.size();
    pending_.resize(old + kBlock);
    std::size_t n = source_->read(pending_.data() + old, kBlock);
    pending_.resize(old + n);
    if (n == 0) eof_ = true;
    return n > 0;
}

void LineBatchReader::read_long_line(LineBatch& batch) {
    // The line so far is pending_[pending_pos_, end), with no terminator in it. It is copied once
    // into the batch and the rest of it read straight behind it, instead of growing pending_ and
    // copying the whole line again at its end: a long line costs its size once, not three times.
    const std::size_t begin = batch.data.size();
    std::uint64_t len = pending_.size() - pending_pos_;
    bool keep = len <= max_line_bytes_;
    if (keep) batch.data.append(pending_, pending_pos_, std::string::npos);
    pending_.clear();
    pending_pos_ = 0;
    auto find_end = [](const char* p, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i)
            if (p[i] == '\n' || p[i] == '\r') return i;
        return n;
    };
    for (;;) {
        std::size_t n, at;
        if (keep) {
            const std::size_t old = batch.data.size();
            // Grow by doubling; past half of the longest line kept, straight to its full size, so
            // that a line over the limit costs about the limit, not the limit plus the copy of a
            // last doubling (pages reserved and never written take no memory).
            if (old + kBlock > batch.data.capacity()) {
                const std::uint64_t full = begin + max_line_bytes_ + kBlock;
                const std::uint64_t twice = std::max<std::uint64_t>(2 * batch.data.capacity(), old + kBlock);
                batch.data.reserve(twice > full / 2 ? full : twice);
            }
            batch.data.resize(old + kBlock);
            n = source_->read(batch.data.data() + old, kBlock);
            batch.data.resize(old + n);
            at = find_end(batch.data.data() + old, n);
            if (at < n) {
                // The terminator and what follows go back to pending_.
                pending_.assign(batch.data, old + at, std::string::npos);
                batch.data.resize(old + at);
            }
        } else {
            // Too long to keep: read through it in pending_, counting its bytes.
            pending_.resize(kBlock);
            n = source_->read(pending_.data(), kBlock);
            pending_.resize(n);
            at = find_end(pending_.data(), n);
            if (at < n) pending_.erase(0, at);
        }
        if (n == 0) eof_ = true;
        len += at;
        if (keep && len > max_line_bytes_) {
            keep = false;
            batch.data.resize(begin);
        }
        if (at < n || eof_) break;
        if (!keep) pending_.clear();
    }
    // pending_ now starts with the line's terminator (or is empty at the end of the input).
    std::size_t term = 0;
    if (!pending_.empty()) {
        term = 1;
        if (pending_[0] == '\r') {
            if (pending_.size() == 1 && !eof_) fill();  // "\r" at a block end: maybe "\r\n"
            if (pending_.size() > 1 && pending_[1] == '\n') term = 2;
        }
    }
    Line line{static_cast<std::uint32_t>(begin), 0, 0};
    if (keep)
        line.size = static_cast<std::uint32_t>(len);
    else
        line.too_long_bytes = len;
    batch.lines.push_back(line);
    ++next_line_;
    offset_ += len + term;
    pending_pos_ = term;
}

bool LineBatchReader::next(LineBatch& batch) {
    batch.clear();
    // A batch that once held a huge line gives its memory back rather than keeping it for the rest
    // of the input.
    if (batch.data.capacity() > 2 * std::max(batch_bytes_, kBlock) + kBlock) std::string().swap(batch.data);
    batch.first_line_number = next_line_;
    batch.first_byte_offset = offset_;
    std::uint64_t weight = 0;  // bytes of the lines in the batch, those too long to keep included
    std::size_t scan = pending_pos_;  // where to resume looking for a terminator
    auto add_line = [&](std::size_t len) {
        Line line{static_cast<std::uint32_t>(batch.data.size()), 0, 0};
        if (len > max_line_bytes_) {
            line.too_long_bytes = len;
        } else {
            line.size = static_cast<std::uint32_t>(len);
            batch.data.append(pending_.data() + pending_pos_, len);
        }
        batch.lines.push_back(line);
        weight += len;
        ++next_line_;
    };
    for (;;) {
        // Cut complete lines out of pending_. `cr_at` caches the next '\r' (most input has none,
        // and searching the whole block again for every line would be quadratic).
        auto find = [&](char c, std::size_t from) {
            const void* p = std::memchr(pending_.data() + from, c, pending_.size() - from);
            return p ? static_cast<std::size_t>(static_cast<const char*>(p) - pending_.data()) : pending_.size();
        };
        std::size_t cr_at = scan < pending_.size() ? find('\r', scan) : pending_.size();
        while (scan < pending_.size()) {
            const char* base = pending_.data();
            if (cr_at < scan) cr_at = find('\r', scan);
            std::size_t end = std::min(find('\n', scan), cr_at);
            if (end == pending_.size()) {
                scan = end;
                break;
            }
            std::size_t term = 1;
            if (base[end] == '\r') {
                if (end + 1 == pending_.size() && !eof_) {  // "\r" at the block end: maybe "\r\n"
                    scan = end;
                    break;
                }
                if (end + 1 < pending_.size() && base[end + 1] == '\n') term = 2;
            }
            std::size_t len = end - pending_pos_;
            add_line(len);
            offset_ += len + term;
            pending_pos_ = end + term;
            scan = pending_pos_;
            if (weight >= batch_bytes_) return true;
        }
        if (eof_) {
            if (pending_pos_ < pending_.size()) {  // last line without a terminator
                std::size_t len = pending_.size() - pending_pos_;
                add_line(len);
                offset_ += len;
                pending_pos_ = pending_.size();
            }
            return !batch.lines.empty();
        }
        // A line without a terminator yet that is already long (or too long to keep) is finished
        // apart from pending_, which stays the size of a block or two.
        const std::size_t partial = pending_.size() - pending_pos_;
        if (scan == pending_.size() && (partial >= kBlock || partial > max_line_bytes_)) {
            read_long_line(batch);
            const Line& last = batch.lines.back();
            weight += last.size + last.too_long_bytes;
            scan = pending_pos_;
            if (weight >= batch_bytes_) return true;
            if (eof_ && pending_pos_ >= pending_.size()) return true;
            continue;
        }
        std::size_t erased = pending_pos_;  // fill() drops the bytes before pending_pos_
        fill();
        scan -= erased;
    }
}

}  // namespace mds
