#include "mds/util/files.h"

#include <fcntl.h>     // open
#include <ftw.h>       // nftw
#include <sys/mman.h>  // mmap, munmap, madvise
#include <sys/stat.h>  // fstat, stat
#include <unistd.h>    // write, close, fsync, unlink, getpid

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>

#include "mds/util/error.h"
#include "mds/util/safe_paths.h"

namespace mds {

// ---- cleanup registry: temporaries to unlink on a signal ----------------------------------------
// Fixed storage so the signal handler touches no heap: a slot is claimed with a CAS on `used`.
namespace {
constexpr int kCleanupSlots = 256;
constexpr std::size_t kCleanupPathMax = 4096;
struct CleanupSlot {
    std::atomic<int> used{0};
    char path[kCleanupPathMax];
};
std::array<CleanupSlot, kCleanupSlots> g_cleanup;

int cleanup_register(const std::string& path) {
    if (path.size() >= kCleanupPathMax) return -1;
    for (int i = 0; i < kCleanupSlots; ++i) {
        int expected = 0;
        if (g_cleanup[i].used.compare_exchange_strong(expected, 2)) {  // 2 = being written
            std::memcpy(g_cleanup[i].path, path.c_str(), path.size() + 1);
            g_cleanup[i].used.store(1);
            return i;
        }
    }
    return -1;  // too many outputs at once: they are still removed by destructors, not on signals
}

void cleanup_release(int slot) {
    if (slot >= 0) g_cleanup[slot].used.store(0);
}

extern "C" void mds_cleanup_signal_handler(int sig) {
    for (auto& s : g_cleanup)
        if (s.used.load() == 1) ::unlink(s.path);
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}
}  // namespace

void install_cleanup_signal_handlers() {
    struct sigaction sa {};
    sa.sa_handler = mds_cleanup_signal_handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

// ---- MappedFile ----------------------------------------------------------------------------------
MappedFile::MappedFile(const std::string& path) : path_(path) {
    // O_NONBLOCK: opening a FIFO named like a data file must not block; it is refused below.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Error(errno_message("cannot open " + path, errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        throw Error(errno_message("cannot stat " + path, err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(path + ": not a regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            ::close(fd);
            throw Error(errno_message("cannot map " + path, err));
        }
        data_ = static_cast<std::byte*>(p);
    }
    ::close(fd);
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(data_, size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
    other.data_ = nullptr;
    other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        if (data_) ::munmap(data_, size_);
        path_ = std::move(other.path_);
        data_ = other.data_;
        size_ = other.size_;
        other.data_ = nullptr;
        other.size_ = 0;
    }
    return *this;
}

// ---- AtomicOutput --------------------------------------------------------------------------------
namespace {
void write_all(int fd, const char* p, std::size_t n, const std::string& path) {
    while (n > 0) {
        ssize_t w = ::write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            throw Error(errno_message("cannot write " + path, errno));
        }
        p += w;
        n -= static_cast<std::size_t>(w);
    }
}

}  // namespace

AtomicOutput::AtomicOutput(std::string final_path, std::size_t buffer_bytes)
    : final_path_(std::move(final_path)), temp_path_(temp_path_for(final_path_)), buffer_bytes_(buffer_bytes) {
    cleanup_slot_ = cleanup_register(temp_path_);
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
        int err = errno;
        cleanup_release(cleanup_slot_);
        throw Error(errno_message("cannot create " + temp_path_ + " (for " + final_path_ + ")", err));
    }
    buffer_.reserve(buffer_bytes_);
}

AtomicOutput::~AtomicOutput() { discard(); }

void AtomicOutput::flush() {
    if (!buffer_.empty()) {
        write_all(fd_, buffer_.data(), buffer_.size(), temp_path_);
        written_back(buffer_.size());
        buffer_.clear();
    }
}

// What was just written with write() goes to the disk now, in the background: commit()'s fsync then
// finds little left to wait for, and no process's writes pile up as gigabytes of dirty pages.
void AtomicOutput::written_back(std::size_t n) {
    start_writeback(flushed_, n);
    flushed_ += n;
}

void AtomicOutput::write(const void* data, std::size_t n) {
    if (fd_ < 0) throw Error("internal: write to a closed output " + final_path_);
    written_ += n;
    if (buffer_.size() + n > buffer_bytes_) {
        flush();
        if (n >= buffer_bytes_) {
            write_all(fd_, static_cast<const char*>(data), n, temp_path_);
            written_back(n);
            return;
        }
    }
    buffer_.append(static_cast<const char*>(data), n);
}

void AtomicOutput::write_at(std::uint64_t offset, const void* data, std::size_t n) {
    if (fd_ < 0) throw Error("internal: write to a closed output " + final_path_);
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        const ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
        if (w < 0) {
            if (errno == EINTR) continue;
            throw Error(errno_message("cannot write " + temp_path_ + " at byte " + std::to_string(offset), errno));
        }
        p += w;
        n -= static_cast<std::size_t>(w);
        offset += static_cast<std::uint64_t>(w);
    }
}

void AtomicOutput::start_writeback(std::uint64_t offset, std::size_t n) {
#if defined(__linux__)
    if (fd_ >= 0) (void)::sync_file_range(fd_, static_cast<off64_t>(offset), static_cast<off64_t>(n), SYNC_FILE_RANGE_WRITE);
#else
    (void)offset;
    (void)n;
#endif
}

void AtomicOutput::append_file(const std::string& path) {
    MappedFile in(path);
    const char* p = reinterpret_cast<const char*>(in.data());
    std::size_t left = in.size();
    flush();
    constexpr std::size_t kChunk = std::size_t{64} << 20;
    while (left > 0) {
        std::size_t n = left < kChunk ? left : kChunk;
        write_all(fd_, p, n, temp_path_);
        written_back(n);
        p += n;
        left -= n;
        written_ += n;
    }
}

void AtomicOutput::commit() {
    if (fd_ < 0) throw Error("internal: commit of a closed output " + final_path_);
    flush();
    if (::fsync(fd_) != 0) throw Error(errno_message("cannot sync " + temp_path_, errno));
    if (::close(fd_) != 0) {
        // The data may not have reached the disk (NFS reports write errors here): drop the
        // temporary now, as discard() no longer sees an open descriptor.
        int err = errno;
        fd_ = -1;
        ::unlink(temp_path_.c_str());
        cleanup_release(cleanup_slot_);
        cleanup_slot_ = -1;
        throw Error(errno_message("cannot close " + temp_path_, err));
    }
    fd_ = -1;
    if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
        int err = errno;
        ::unlink(temp_path_.c_str());
        cleanup_release(cleanup_slot_);
        cleanup_slot_ = -1;
        throw Error(errno_message("cannot rename " + temp_path_ + " to " + final_path_, err));
    }
    cleanup_release(cleanup_slot_);
    cleanup_slot_ = -1;
}

void AtomicOutput::discard() noexcept {
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
        ::unlink(temp_path_.c_str());
    }
    cleanup_release(cleanup_slot_);
    cleanup_slot_ = -1;
}

// ---- small helpers -------------------------------------------------------------------------------
void write_file_atomic(const std::string& path, std::string_view content) {
    AtomicOutput out(path);
    out.write(content);
    out.commit();
}

std::string read_file(const std::string& path) {
    MappedFile f(path);
    return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

std::string read_file(const std::string& path, std::uint64_t max_bytes, const std::string& what) {
    MappedFile f(path);
    if (f.size() > max_bytes)
        throw Error(path + ": " + std::to_string(f.size()) + " bytes; a " + what + " has at most " + std::to_string(max_bytes) +
                    " (is this the right file?)");
    return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

namespace {
int remove_entry(const char* path, const struct stat*, int type, struct FTW*) {
    const int rc = type == FTW_DP ? ::rmdir(path) : ::unlink(path);
    return rc != 0 && errno != ENOENT ? errno : 0;
}
}  // namespace

void remove_tree(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return;
        throw Error(errno_message("cannot remove " + path, errno));
    }
    const int rc = S_ISDIR(st.st_mode) ? ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) : ::unlink(path.c_str());
    if (rc != 0) throw Error(errno_message("cannot remove " + path, rc > 0 ? rc : errno));
}

void sync_directory(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw Error(errno_message("cannot open directory " + path, errno));
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0 && err != EINVAL) throw Error(errno_message("cannot sync directory " + path, err));
}

bool file_exists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
}

std::uint64_t file_size(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw Error(errno_message("cannot stat " + path, errno));
    return static_cast<std::uint64_t>(st.st_size);
}

}  // namespace mds
