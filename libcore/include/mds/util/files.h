// Files as mds uses them: read-only memory maps with bounds-checked access, and outputs written
// under a temporary name and renamed into place only when complete (DESIGN.md "Conventions").
// A temporary output is removed when its owner is destroyed uncommitted and on SIGINT/SIGTERM.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace mds {

// A whole file mapped read-only. Empty files map to an empty span.
class MappedFile {
public:
    MappedFile() = default;
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::string& path() const { return path_; }
    std::span<const std::byte> bytes() const { return {data_, size_}; }
    const std::byte* data() const { return data_; }
    std::size_t size() const { return size_; }

private:
    std::string path_;
    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
};

// An output file that appears under `final_path` only after commit(). Writes go to
// `<dir>/.<name>.tmp-<pid>-<host>` (safe_paths.h) through a buffer, and the kernel is asked to start
// writing each flushed piece to the disk at once (start_writeback); commit() flushes, fsyncs and renames. Destroying an
// uncommitted AtomicOutput removes the temporary; so does SIGINT/SIGTERM (while the handlers
// installed by install_cleanup_signal_handlers are in place).
class AtomicOutput {
public:
    explicit AtomicOutput(std::string final_path, std::size_t buffer_bytes = 1 << 20);
    ~AtomicOutput();
    AtomicOutput(const AtomicOutput&) = delete;
    AtomicOutput& operator=(const AtomicOutput&) = delete;

    void write(const void* data, std::size_t n);
    void write(std::string_view s) { write(s.data(), s.size()); }
    // Copies the whole content of another file (used to merge .bin files).
    void append_file(const std::string& path);
    // Writes what write() buffered so far.
    void flush();
    // Positional writes, for several threads filling a file whose layout is known up front (each
    // thread its own byte ranges): pwrite of `n` bytes at `offset`, bypassing the buffer (flush()
    // what write() buffered first). bytes_written() counts only write()'s bytes. Thread-safe.
    void write_at(std::uint64_t offset, const void* data, std::size_t n);
    // Asks the kernel to start writing [offset, offset + n) to the disk now (sync_file_range),
    // without waiting, so that commit()'s fsync finds little left to do. Thread-safe; a no-op where
    // the system has no such call.
    void start_writeback(std::uint64_t offset, std::size_t n);
    std::uint64_t bytes_written() const { return written_; }
    const std::string& final_path() const { return final_path_; }
    const std::string& temp_path() const { return temp_path_; }

    // Flush, fsync, and rename into place. After this the object owns nothing.
    void commit();
    // Remove the temporary now (also done by the destructor if not committed).
    void discard() noexcept;

private:
    void written_back(std::size_t n);  // start_writeback of the n bytes write() just wrote at the end

    std::string final_path_;
    std::string temp_path_;
    int fd_ = -1;
    int cleanup_slot_ = -1;
    std::string buffer_;
    std::size_t buffer_bytes_;
    std::uint64_t written_ = 0;
    std::uint64_t flushed_ = 0;  // bytes write() has passed to the kernel (the file's sequential end)
};

// Writes `content` to `path` atomically (temporary + fsync + rename).
void write_file_atomic(const std::string& path, std::string_view content);
// Reads a whole file; errors name the path.
std::string read_file(const std::string& path);
// The same, refusing a file larger than `max_bytes` before reading it: "<path>: N bytes; a <what>
// has at most M". For documents whose size a hostile or mistaken file could blow up (JSON configs,
// state files, `latest`).
std::string read_file(const std::string& path, std::uint64_t max_bytes, const std::string& what);
bool file_exists(const std::string& path);
// Removes a file or a directory tree (rm -rf); a missing path is not an error. Use it instead of
// std::filesystem::remove_all in code that links LibTorch: libtorch.so exports its own
// std::filesystem::remove_all, which crashes when it interposes on ours.
void remove_tree(const std::string& path);
// fsync of a directory, so that renames and new entries in it survive a crash.
void sync_directory(const std::string& path);
std::uint64_t file_size(const std::string& path);

// SIGINT/SIGTERM handlers that unlink every live temporary output, then re-raise the signal with
// the default action, so the exit status still says which signal ended the process.
void install_cleanup_signal_handlers();

}  // namespace mds
