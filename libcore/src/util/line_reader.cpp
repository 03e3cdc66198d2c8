#include "mds/util/line_reader.h"

#include <fcntl.h>     // open
#include <sys/stat.h>  // fstat
#include <unistd.h>    // read, close

#include <zstd.h>  // ZSTD_createDStream, ZSTD_decompressStream

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <limits>

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

LineBatchReader::LineBatchReader(const std::string& path, std::size_t batch_bytes)
    : path_(path == "-" ? "<stdin>" : path), source_(open_byte_source(path)), batch_bytes_(batch_bytes) {}

bool LineBatchReader::fill() {
    // Drop consumed bytes, then append a block.
    if (pending_pos_ > 0) {
        pending_.erase(0, pending_pos_);
        pending_pos_ = 0;
    }
    constexpr std::size_t kBlock = std::size_t{1} << 20;
    std::size_t old = pending_.size();
    pending_.resize(old + kBlock);
    std::size_t n = source_->read(pending_.data() + old, kBlock);
    pending_.resize(old + n);
    if (n == 0) eof_ = true;
    return n > 0;
}

bool LineBatchReader::next(LineBatch& batch) {
    batch.clear();
    batch.first_line_number = next_line_;
    batch.first_byte_offset = offset_;
    std::size_t scan = pending_pos_;  // where to resume looking for a terminator
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
            if (len > std::numeric_limits<std::uint32_t>::max() - batch.data.size())
                throw Error(path_ + ":" + std::to_string(next_line_) + ": line longer than 4 GiB");
            batch.lines.push_back({static_cast<std::uint32_t>(batch.data.size()), static_cast<std::uint32_t>(len)});
            batch.data.append(base + pending_pos_, len);
            ++next_line_;
            offset_ += len + term;
            pending_pos_ = end + term;
            scan = pending_pos_;
            if (batch.data.size() >= batch_bytes_) return true;
        }
        if (eof_) {
            if (pending_pos_ < pending_.size()) {  // last line without a terminator
                std::size_t len = pending_.size() - pending_pos_;
                batch.lines.push_back({static_cast<std::uint32_t>(batch.data.size()), static_cast<std::uint32_t>(len)});
                batch.data.append(pending_.data() + pending_pos_, len);
                ++next_line_;
                offset_ += len;
                pending_pos_ = pending_.size();
            }
            return !batch.lines.empty();
        }
        std::size_t erased = pending_pos_;  // fill() drops the bytes before pending_pos_
        fill();
        scan -= erased;
    }
}

}  // namespace mds
