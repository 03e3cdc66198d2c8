// The zip container of torch.save files (specs/checkpoints.md §2): a reader over a memory-mapped
// file (stored entries, ZIP64, validated against the file size) and a streaming writer that lays
// records out as PyTorch's writer (miniz) does: stored, data 64-byte aligned through an "FB"
// extra field, CRC-32 in a data descriptor after each non-empty record, ZIP64 where needed.
// Plain bytes: no LibTorch, no zlib.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mds/util/files.h"  // MappedFile, AtomicOutput

namespace mds::ckpt {

// zlib's CRC-32 (reflected polynomial 0xEDB88320): PCLMUL folding on x86-64 CPUs that have it,
// else slicing-by-8. `crc` is the value so far, so
// crc32(b, crc32(a)) == crc32(a + b), as zlib's crc32() composes.
std::uint32_t crc32(std::span<const std::byte> bytes, std::uint32_t crc = 0);

// One central-directory entry, with the data position taken from its local header.
struct ZipEntry {
    std::string name;
    std::uint64_t header_offset = 0;    // local file header
    std::uint64_t data_offset = 0;      // header_offset + 30 + local name + local extra
    std::uint64_t size = 0;             // uncompressed bytes
    std::uint64_t compressed_size = 0;  // bytes at data_offset (== size when stored)
    std::uint16_t method = 0;           // 0 stored, 8 deflate, ...
    std::uint16_t flags = 0;            // general purpose bit flags (bit 0: encrypted)
    std::uint32_t crc32 = 0;            // as recorded in the central directory
};

// A mapped zip file whose central directory has been validated: end of central directory found
// (searching backwards over a comment), ZIP64 records used when present, every entry's local
// header signature and name match the central directory, every entry's bytes lie inside the file
// before the central directory and no two entries overlap; names are unique. Errors are
// mds::Error naming the file, the entry and the byte offset. Data is never copied.
class ZipArchive {
public:
    explicit ZipArchive(const std::string& path);

    const std::string& path() const { return file_.path(); }
    std::span<const std::byte> file_bytes() const { return file_.bytes(); }
    const std::vector<ZipEntry>& entries() const { return entries_; }  // central directory order
    std::span<const std::byte> comment() const { return comment_; }
    bool zip64() const { return zip64_; }  // the archive has a ZIP64 end of central directory

    const ZipEntry* find(std::string_view name) const;  // nullptr if absent
    const ZipEntry& at(std::string_view name) const;    // error naming the file if absent
    // The bytes of a stored entry, pointing into the map. A compressed or encrypted entry is an
    // error naming it (torch.save never compresses).
    std::span<const std::byte> data(const ZipEntry& entry) const;
    // Recomputes the CRC-32 of a stored entry; a mismatch is an error naming the entry.
    void verify_crc(const ZipEntry& entry) const;
    void verify_all_crcs() const;

    // torch conventions. The archive folder as PyTorch's reader finds it: the first entry's name
    // up to its first '/' (an error when there are no entries or the first has no '/').
    const std::string& prefix() const;
    bool has_record(std::string_view name) const;  // "<prefix>/<name>" exists
    const ZipEntry& record_entry(std::string_view name) const;
    // The bytes of "<prefix>/<name>", e.g. "data.pkl", "data/0", "version", "byteorder".
    std::span<const std::byte> record(std::string_view name) const;
    // The record names below the prefix ("data.pkl", "data/0", ...), in central directory order.
    std::vector<std::string> record_names() const;

private:
    std::string where(const ZipEntry& e) const;

    MappedFile file_;
    std::vector<ZipEntry> entries_;
    std::map<std::string, std::size_t, std::less<>> index_;
    std::span<const std::byte> comment_;
    bool zip64_ = false;
    std::optional<std::string> prefix_;  // unset: not a torch archive (prefix() throws)
    std::string prefix_error_;
};

struct ZipWriterOptions {
    // Write every central directory entry with a ZIP64 extra field (its 32-bit size and offset
    // fields saturated) and the ZIP64 end records even when nothing needs them: tests of the ZIP64
    // paths without 4 GiB files. Local headers and data descriptors stay as miniz writes them (ZIP64
    // only where the size or offset needs it), so torch.load's offset calculation still holds.
    bool force_zip64 = false;
};

// Writes a zip file through an AtomicOutput: it appears under its final name only when finish()
// succeeds; destroying an unfinished writer removes the temporary. Records are stored (method 0)
// with their data aligned to 64 bytes by an extra field with header id 0x4246 ("FB"), local
// header CRC and sizes zero and a data descriptor after each non-empty record (so records stream:
// the CRC-32 is computed while writing), a fixed DOS timestamp (1980-01-01 00:00) and no
// attributes, so the same records always give the same bytes. ZIP64 extra fields are written for
// entries whose size or header offset reach 0xFFFFFFFF, ZIP64 end records when the central
// directory's offset or size reach 0xFFFFFFFF or there are 65535 entries or more; the local
// header layout matches miniz's, which torch.load's storage-offset calculation assumes.
class ZipWriter {
public:
    static constexpr std::uint64_t kAlignment = 64;

    explicit ZipWriter(std::string path, ZipWriterOptions options = {});
    ~ZipWriter();
    ZipWriter(const ZipWriter&) = delete;
    ZipWriter& operator=(const ZipWriter&) = delete;

    const std::string& path() const { return out_.final_path(); }
    std::uint64_t bytes_written() const { return out_.bytes_written(); }

    // A whole record, from one span or from several written one after the other.
    void add_record(std::string_view name, std::span<const std::byte> bytes);
    void add_record(std::string_view name, std::string_view bytes);
    void add_record_pieces(std::string_view name, std::span<const std::span<const std::byte>> pieces);
    // A record streamed in chunks: begin_record declares its size, write() appends (any number of
    // calls, at most `size` bytes in all), end_record() checks that exactly `size` were written.
    void begin_record(std::string_view name, std::uint64_t size);
    void write(std::span<const std::byte> chunk);
    void end_record();

    struct Record {
        std::string name;
        std::uint64_t header_offset = 0, size = 0;
        std::uint32_t crc32 = 0;
    };
    bool contains(std::string_view name) const { return names_.count(name) != 0; }
    const std::vector<Record>& records() const { return records_; }  // completed, in file order
    // Writes the central directory and the end records, then renames the file into place.
    void finish(std::string_view comment = {});

private:
    struct Open {
        std::string name;
        std::uint64_t header_offset, size, written = 0;
        std::uint32_t crc32 = 0;
    };
    bool entry_zip64(std::uint64_t header_offset, std::uint64_t size) const;

    AtomicOutput out_;
    ZipWriterOptions options_;
    std::vector<Record> records_;
    std::map<std::string, std::size_t, std::less<>> names_;
    std::optional<Open> open_;
    bool finished_ = false;
};

// torch.save's conventions on top of ZipWriter: every record goes under "<archive_name>/", and
// finish() adds the records torch 2.x writes besides data.pkl and data/<key>: "byteorder"
// ("little"), ".storage_alignment" ("64"), "version" ("3\n") and ".data/serialization_id" (40
// digits; deterministic here, derived from the names and CRC-32s, where torch's is partly random).
// ".format_version" is left to the caller: torch.load takes "1" as a promise that data/<key>
// records follow one another in the order the pickle first uses them, and only the caller knows
// that (torch 2.11 writes data.pkl, .format_version, .storage_alignment, byteorder, data/0..,
// version, .data/serialization_id). finish() requires a data.pkl record.
class TorchZipWriter {
public:
    // The automatic records; add_record of one of these names is an error.
    static constexpr std::string_view kAutomaticRecords[] = {"byteorder", ".storage_alignment", "version",
                                                             ".data/serialization_id"};

    TorchZipWriter(std::string path, std::string archive_name, ZipWriterOptions options = {});
    // The archive name torch.save uses for a path: the basename without its last extension
    // ("dir/mp_rank_00_model_states.pt" -> "mp_rank_00_model_states"). File objects get "archive".
    static std::string archive_name_for(const std::string& path);
    static bool is_automatic_record(std::string_view name);

    const std::string& archive_name() const { return archive_name_; }
    void add_record(std::string_view name, std::span<const std::byte> bytes);
    void add_record(std::string_view name, std::string_view bytes);
    void begin_record(std::string_view name, std::uint64_t size);
    void write(std::span<const std::byte> chunk) { zip_.write(chunk); }
    void end_record();
    void finish();
    ZipWriter& zip() { return zip_; }

private:
    std::string full_name(std::string_view name) const;

    ZipWriter zip_;
    std::string archive_name_;
};

}  // namespace mds::ckpt
