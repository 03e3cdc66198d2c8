#include "mds/ckpt/zip_archive.h"

#include <sys/stat.h>  // stat

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>  // std::snprintf, for hex in messages
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>  // _mm_clmulepi64_si128: the carry-less multiply of the folding CRC-32
#endif

#include "mds/util/error.h"
#include "mds/util/safe_paths.h"  // printable

namespace mds::ckpt {
namespace {

// ---- CRC-32 -------------------------------------------------------------------------------------

// kCrcTables[0] is the classic byte table; kCrcTables[k][b] is the CRC of byte b followed by k
// zero bytes, so eight bytes are folded with eight lookups (slicing-by-8).
constexpr std::array<std::array<std::uint32_t, 256>, 8> make_crc_tables() {
    std::array<std::array<std::uint32_t, 256>, 8> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i)
        for (std::size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
    return t;
}
constexpr auto kCrcTables = make_crc_tables();

// The CRC register (no pre- or post-inversion) after `n` more bytes, eight at a time.
std::uint32_t crc32_register(const std::byte* p, std::size_t n, std::uint32_t c);

#if defined(__x86_64__)
// Folding with carry-less multiplies (the scheme of Intel's "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ"): four 16-byte lanes advance 64 bytes per round, each lane's
// value A = A_hi x^64 + A_lo moved forward by D bits as A_hi (x^(D-32) mod P) + A_lo (x^(D+32) mod
// P), which keeps the CRC of the whole stream unchanged; the last 16 bytes of the folded state go
// through the table code. The constants are derived from the polynomial here, bit-reflected as
// the CRC is, and shifted by one for the reflected product's offset.
constexpr std::uint64_t reflected_x_pow_mod_p(unsigned n) {
    std::uint32_t r = 1;  // x^0, in normal bit order; P = x^32 + 0x04C11DB7
    for (unsigned i = 0; i < n; ++i) r = (r & 0x80000000u) ? (r << 1) ^ 0x04C11DB7u : r << 1;
    std::uint32_t f = 0;
    for (int i = 0; i < 32; ++i)
        if ((r >> i) & 1u) f |= 1u << (31 - i);
    return static_cast<std::uint64_t>(f) << 1;
}

// a (x^D split over k's two halves) + next: one lane moved forward by D bits onto the next data.
__attribute__((target("pclmul,sse2"))) inline __m128i crc32_fold(__m128i a, __m128i k, __m128i next) {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11)), next);
}

__attribute__((target("pclmul,sse2"))) std::uint32_t crc32_clmul(const std::byte* p, std::size_t n, std::uint32_t c) {
    const auto load = [](const std::byte* q) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)); };
    const auto fold = crc32_fold;
    // The register enters as the first four bytes' complement (CRC-32 is linear in them).
    __m128i x[4] = {_mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(c))), load(p + 16), load(p + 32), load(p + 48)};
    constexpr std::uint64_t k480 = reflected_x_pow_mod_p(512 - 32), k544 = reflected_x_pow_mod_p(512 + 32);
    constexpr std::uint64_t k96 = reflected_x_pow_mod_p(128 - 32), k160 = reflected_x_pow_mod_p(128 + 32);
    const __m128i k512 = _mm_set_epi64x(static_cast<long long>(k480), static_cast<long long>(k544));
    std::size_t i = 64;
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 4; ++k) x[k] = fold(x[k], k512, load(p + i + 16 * k));
    const __m128i k128 = _mm_set_epi64x(static_cast<long long>(k96), static_cast<long long>(k160));
    __m128i a = x[0];
    for (int k = 1; k < 4; ++k) a = fold(a, k128, x[k]);
    alignas(16) std::byte rest[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(rest), a);
    return crc32_register(p + i, n - i, crc32_register(rest, 16, 0));
}

bool cpu_has_clmul() {
    static const bool has = __builtin_cpu_supports("pclmul");
    return has;
}
#endif

// ---- little-endian fields -----------------------------------------------------------------------

constexpr std::uint32_t kLocalSig = 0x04034b50;
constexpr std::uint32_t kCentralSig = 0x02014b50;
constexpr std::uint32_t kEndSig = 0x06054b50;
constexpr std::uint32_t kZip64EndSig = 0x06064b50;
constexpr std::uint32_t kZip64LocatorSig = 0x07064b50;
constexpr std::uint32_t kDescriptorSig = 0x08074b50;
constexpr std::size_t kLocalSize = 30, kCentralSize = 46, kEndSize = 22, kZip64EndSize = 56, kZip64LocatorSize = 20;
constexpr std::uint16_t kZip64ExtraId = 0x0001;
constexpr std::uint16_t kPadExtraId = 0x4246;  // "FB", PyTorch's alignment padding
constexpr std::uint32_t kMax32 = 0xFFFFFFFFu;
constexpr std::uint16_t kMax16 = 0xFFFF;

std::uint16_t get16(const std::byte* p) {
    return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) | (std::to_integer<unsigned>(p[1]) << 8));
}
std::uint32_t get32(const std::byte* p) { return get16(p) | (static_cast<std::uint32_t>(get16(p + 2)) << 16); }
std::uint64_t get64(const std::byte* p) { return get32(p) | (static_cast<std::uint64_t>(get32(p + 4)) << 32); }

std::string hex32(std::uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", v);
    return buf;
}

std::string at_offset(std::uint64_t off) { return "offset " + std::to_string(off); }

// Appends little-endian fields to a header being built.
struct Bytes {
    std::string s;
    void u16(std::uint64_t v) {
        for (int i = 0; i < 2; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
    void u32(std::uint64_t v) {
        for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
    void u64(std::uint64_t v) {
        for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
    void str(std::string_view v) { s.append(v); }
};

// 1980-01-01 00:00:00, the earliest valid DOS date: a fixed stamp keeps output reproducible.
constexpr std::uint16_t kDosTime = 0;
constexpr std::uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;
constexpr std::uint16_t kFlagDescriptor = 1 << 3, kFlagUtf8 = 1 << 11;

}  // namespace

namespace {

std::uint32_t crc32_register(const std::byte* p, std::size_t n, std::uint32_t c) {
    const auto& t = kCrcTables;
    while (n >= 8) {
        const std::uint32_t lo = get32(p) ^ c;
        const std::uint32_t hi = get32(p + 4);
        c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
            t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = t[0][(c ^ std::to_integer<std::uint32_t>(*p++)) & 0xff] ^ (c >> 8);
    return c;
}

}  // namespace

// Checkpoints verify every storage they read: at slicing-by-8's ~1.5 GB/s per core that was a
// large part of a conversion; the carry-less fold runs at several GB/s where the CPU has it.
std::uint32_t crc32(std::span<const std::byte> bytes, std::uint32_t crc) {
#if defined(__x86_64__)
    if (bytes.size() >= 256 && cpu_has_clmul()) return ~crc32_clmul(bytes.data(), bytes.size(), ~crc);
#endif
    return ~crc32_register(bytes.data(), bytes.size(), ~crc);
}

// ---- reader -------------------------------------------------------------------------------------

namespace {

// `path` when it names a regular file (through symbolic links); an error otherwise, before anything
// opens it: a FIFO named like a checkpoint file would block the open forever, a device never end.
const std::string& regular_file(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw Error(errno_message("cannot open " + printable(path, 200), errno));
    if (!S_ISREG(st.st_mode)) throw Error(printable(path, 200) + ": not a regular file");
    return path;
}

// Where the central directory lies, as the end records say.
struct CentralDirectory {
    std::uint64_t eocd = 0;    // offset of the end of central directory record
    std::uint64_t offset = 0;  // of the first entry
    std::uint64_t size = 0;    // bytes
    std::uint64_t entries = 0;
    std::uint64_t limit = 0;   // the central directory ends before this (the first end record)
    bool zip64 = false;
};

// End of central directory: the last signature whose comment reaches exactly the end of the file.
std::uint64_t find_end_record(const std::string& path, const std::byte* b, std::uint64_t size) {
    if (size < kEndSize)
        throw Error(path + ": not a zip file: " + std::to_string(size) + " bytes, too short for an end of central directory record");
    const std::uint64_t lowest = size - kEndSize > 0xFFFF ? size - kEndSize - 0xFFFF : 0;
    for (std::uint64_t pos = size - kEndSize + 1; pos-- > lowest;)
        if (get32(b + pos) == kEndSig && pos + kEndSize + get16(b + pos + 20) == size) return pos;
    throw Error(path + ": not a zip file: no end of central directory record");
}

// ZIP64: a locator right before the end record points at the ZIP64 end record, whose 64-bit
// fields replace the saturated 32-bit ones. `disk` and `cd_disk` are the disk numbers it names.
void read_zip64_end(const std::string& path, const std::byte* b, CentralDirectory& cd, std::uint64_t& disk, std::uint64_t& cd_disk,
                    std::uint64_t& n_disk) {
    const std::uint64_t loc = cd.eocd - kZip64LocatorSize;
    const std::uint64_t z = get64(b + loc + 8);
    const std::string zwhere = path + ": ZIP64 end of central directory at " + at_offset(z);
    if (get32(b + loc + 4) != 0 || get32(b + loc + 16) > 1)
        throw Error(path + ": ZIP64 locator at " + at_offset(loc) + ": multi-disk archives are not supported");
    if (z > loc || loc - z < kZip64EndSize) throw Error(zwhere + ": outside the file before its locator at " + at_offset(loc));
    if (get32(b + z) != kZip64EndSig) throw Error(zwhere + ": bad signature " + hex32(get32(b + z)));
    const std::uint64_t rec_size = get64(b + z + 4);
    if (rec_size < kZip64EndSize - 12 || rec_size > loc - z - 12)
        throw Error(zwhere + ": record size " + std::to_string(rec_size) + " does not fit before the locator");
    disk = get32(b + z + 16);
    cd_disk = get32(b + z + 20);
    n_disk = get64(b + z + 24);
    cd.entries = get64(b + z + 32);
    cd.size = get64(b + z + 40);
    cd.offset = get64(b + z + 48);
    cd.limit = z;
    cd.zip64 = true;
}

// The end records, checked: one disk, the central directory inside the file before them, and room
// in it for the entries it claims.
CentralDirectory read_end_records(const std::string& path, const std::byte* b, std::uint64_t size) {
    CentralDirectory cd;
    cd.eocd = find_end_record(path, b, size);
    const std::uint64_t eocd = cd.eocd;
    const std::string eocd_where = path + ": end of central directory at " + at_offset(eocd);
    std::uint64_t disk = get16(b + eocd + 4), cd_disk = get16(b + eocd + 6), n_disk = get16(b + eocd + 8);
    cd.entries = get16(b + eocd + 10);
    cd.size = get32(b + eocd + 12);
    cd.offset = get32(b + eocd + 16);
    cd.limit = eocd;
    if (eocd >= kZip64LocatorSize && get32(b + eocd - kZip64LocatorSize) == kZip64LocatorSig)
        read_zip64_end(path, b, cd, disk, cd_disk, n_disk);
    if (disk != 0 || cd_disk != 0 || n_disk != cd.entries)
        throw Error(eocd_where + ": multi-disk archives are not supported");
    if (cd.offset > cd.limit || cd.size > cd.limit - cd.offset)
        throw Error(eocd_where + ": central directory [" + std::to_string(cd.offset) + ", +" + std::to_string(cd.size) +
                    ") runs past " + at_offset(cd.limit));
    if (cd.entries > cd.size / kCentralSize)
        throw Error(eocd_where + ": " + std::to_string(cd.entries) + " entries cannot fit in a central directory of " +
                    std::to_string(cd.size) + " bytes");
    return cd;
}

// ZIP64 extended information of central directory entry `c`: the 64-bit values of the saturated
// 32-bit fields, in order (size, compressed size, header offset, disk).
void read_zip64_extra(const std::string& ewhere, const std::byte* c, ZipEntry& e, std::uint64_t& disk_start) {
    const std::uint64_t name_len = get16(c + 28), extra_len = get16(c + 30);
    const bool need_size = e.size == kMax32, need_csize = e.compressed_size == kMax32,
               need_offset = e.header_offset == kMax32, need_disk = disk_start == kMax16;
    if (!(need_size || need_csize || need_offset || need_disk)) return;
    const std::byte* x = c + kCentralSize + name_len;
    const std::byte* x_end = x + extra_len;
    while (x_end - x >= 4) {
        const std::uint16_t id = get16(x), len = get16(x + 2);
        if (static_cast<std::uint64_t>(x_end - x - 4) < len) break;
        if (id == kZip64ExtraId) {
            const std::uint64_t need = 8 * (need_size + need_csize + need_offset) + 4 * need_disk;
            if (len < need)
                throw Error(ewhere + ": ZIP64 extra field has " + std::to_string(len) + " bytes, needs " + std::to_string(need));
            const std::byte* v = x + 4;
            if (need_size) e.size = get64(v), v += 8;
            if (need_csize) e.compressed_size = get64(v), v += 8;
            if (need_offset) e.header_offset = get64(v), v += 8;
            if (need_disk) disk_start = get32(v);
            return;
        }
        x += 4 + len;
    }
    throw Error(ewhere + ": saturated size or offset without a ZIP64 extra field");
}

// The local header of `e`: signature, same name and method, and the data right after its extra
// field, all before the central directory. Sets e.data_offset.
void read_local_header(const std::string& ewhere, const std::byte* b, std::uint64_t cd_offset, ZipEntry& e) {
    const std::string lwhere = ewhere + ": local header at " + at_offset(e.header_offset);
    if (e.header_offset > cd_offset || cd_offset - e.header_offset < kLocalSize)
        throw Error(lwhere + ": not inside the file before the central directory at " + at_offset(cd_offset));
    const std::byte* l = b + e.header_offset;
    if (get32(l) != kLocalSig) throw Error(lwhere + ": bad signature " + hex32(get32(l)));
    const std::uint64_t lname_len = get16(l + 26), lextra_len = get16(l + 28);
    if (cd_offset - e.header_offset - kLocalSize < lname_len + lextra_len)
        throw Error(lwhere + ": name and extra field run into the central directory");
    if (lname_len != e.name.size() || std::memcmp(l + kLocalSize, e.name.data(), e.name.size()) != 0)
        throw Error(lwhere + ": name \"" + printable(std::string_view(reinterpret_cast<const char*>(l + kLocalSize), lname_len), 200) +
                    "\" differs from the central directory's");
    if (get16(l + 8) != e.method)
        throw Error(lwhere + ": method " + std::to_string(get16(l + 8)) + " differs from the central directory's " +
                    std::to_string(e.method));
    e.data_offset = e.header_offset + kLocalSize + lname_len + lextra_len;
    if (e.compressed_size > cd_offset - e.data_offset)
        throw Error(ewhere + ": data [" + std::to_string(e.data_offset) + ", +" + std::to_string(e.compressed_size) +
                    ") runs into the central directory at " + at_offset(cd_offset));
}

// Central directory entry `i` at `pos`, checked with its local header; `pos` moves to the next.
ZipEntry read_central_entry(const std::string& path, const std::byte* b, const CentralDirectory& cd, std::uint64_t i,
                            std::uint64_t& pos) {
    const std::uint64_t cd_end = cd.offset + cd.size;
    const std::string cwhere = path + ": central directory entry " + std::to_string(i) + " at " + at_offset(pos);
    if (cd_end - pos < kCentralSize) throw Error(cwhere + ": truncated (central directory ends at " + at_offset(cd_end) + ")");
    const std::byte* c = b + pos;
    if (get32(c) != kCentralSig) throw Error(cwhere + ": bad signature " + hex32(get32(c)));
    ZipEntry e;
    e.flags = get16(c + 8);
    e.method = get16(c + 10);
    e.crc32 = get32(c + 16);
    e.compressed_size = get32(c + 20);
    e.size = get32(c + 24);
    const std::uint64_t name_len = get16(c + 28), extra_len = get16(c + 30), comment_len = get16(c + 32);
    std::uint64_t disk_start = get16(c + 34);
    e.header_offset = get32(c + 42);
    if (cd_end - pos - kCentralSize < name_len + extra_len + comment_len)
        throw Error(cwhere + ": name, extra field and comment run past the central directory end at " + at_offset(cd_end));
    e.name.assign(reinterpret_cast<const char*>(c + kCentralSize), name_len);
    const std::string ewhere = path + ": entry \"" + printable(e.name, 200) + "\" (central directory " + at_offset(pos) + ")";
    read_zip64_extra(ewhere, c, e, disk_start);
    if (disk_start != 0) throw Error(ewhere + ": starts on disk " + std::to_string(disk_start) + " (multi-disk archives are not supported)");
    if (e.method == 0 && e.compressed_size != e.size)
        throw Error(ewhere + ": stored entry with compressed size " + std::to_string(e.compressed_size) + " != size " +
                    std::to_string(e.size));
    read_local_header(ewhere, b, cd.offset, e);
    pos += kCentralSize + name_len + extra_len + comment_len;
    return e;
}

// No two entries may share bytes: [local header, end of data) ranges are disjoint.
void check_disjoint(const std::string& path, const std::vector<ZipEntry>& entries) {
    std::vector<const ZipEntry*> by_offset;
    by_offset.reserve(entries.size());
    for (const auto& e : entries) by_offset.push_back(&e);
    std::sort(by_offset.begin(), by_offset.end(), [](auto* x, auto* y) { return x->header_offset < y->header_offset; });
    for (std::size_t i = 1; i < by_offset.size(); ++i) {
        const ZipEntry& prev = *by_offset[i - 1];
        const ZipEntry& next = *by_offset[i];
        if (prev.data_offset + prev.compressed_size > next.header_offset)
            throw Error(path + ": entry \"" + printable(next.name, 200) + "\" at " + at_offset(next.header_offset) + " overlaps entry \"" +
                        printable(prev.name, 200) + "\" [" + std::to_string(prev.header_offset) + ", " +
                        std::to_string(prev.data_offset + prev.compressed_size) + ")");
    }
}

}  // namespace

ZipArchive::ZipArchive(const std::string& path) : file_(regular_file(path)) {
    const std::byte* b = file_.data();
    const CentralDirectory cd = read_end_records(path, b, file_.size());
    comment_ = file_.bytes().subspan(cd.eocd + kEndSize);
    zip64_ = cd.zip64;

    entries_.reserve(cd.entries);
    std::uint64_t pos = cd.offset;
    for (std::uint64_t i = 0; i < cd.entries; ++i) {
        const std::uint64_t at = pos;
        ZipEntry e = read_central_entry(path, b, cd, i, pos);
        if (!index_.emplace(e.name, entries_.size()).second)
            throw Error(path + ": entry \"" + printable(e.name, 200) + "\" (central directory " + at_offset(at) + "): duplicate entry name");
        entries_.push_back(std::move(e));
    }
    check_disjoint(path, entries_);

    // PyTorchStreamReader::init(): the archive folder is the first entry's name up to its first '/'.
    if (entries_.empty()) {
        prefix_error_ = path + ": not a torch archive: the zip has no entries";
    } else if (auto slash = entries_[0].name.find('/'); slash == std::string::npos) {
        prefix_error_ = path + ": not a torch archive: first entry \"" + printable(entries_[0].name, 200) + "\" is not in a folder";
    } else {
        prefix_ = entries_[0].name.substr(0, slash);
    }
}

std::string ZipArchive::where(const ZipEntry& e) const {
    return path() + ": entry \"" + printable(e.name, 200) + "\" (local header at " + at_offset(e.header_offset) + ")";
}

const ZipEntry* ZipArchive::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &entries_[it->second];
}

const ZipEntry& ZipArchive::at(std::string_view name) const {
    if (const auto* e = find(name)) return *e;
    throw Error(path() + ": no entry \"" + printable(name, 200) + "\"");
}

std::span<const std::byte> ZipArchive::data(const ZipEntry& e) const {
    if (e.flags & 1) throw Error(where(e) + ": encrypted entries are not supported");
    if (e.method != 0)
        throw Error(where(e) + ": compressed with method " + std::to_string(e.method) + (e.method == 8 ? " (deflate)" : "") +
                    "; only stored entries are supported (torch.save never compresses)");
    return file_.bytes().subspan(e.data_offset, e.size);
}

void ZipArchive::verify_crc(const ZipEntry& e) const {
    const std::uint32_t got = crc32(data(e));
    if (got != e.crc32)
        throw Error(where(e) + ": CRC-32 mismatch: central directory says " + hex32(e.crc32) + ", data has " + hex32(got));
}

void ZipArchive::verify_all_crcs() const {
    for (const auto& e : entries_) verify_crc(e);
}

const std::string& ZipArchive::prefix() const {
    if (!prefix_) throw Error(prefix_error_);
    return *prefix_;
}

bool ZipArchive::has_record(std::string_view name) const {
    return prefix_ && find(*prefix_ + "/" + std::string(name)) != nullptr;
}

const ZipEntry& ZipArchive::record_entry(std::string_view name) const {
    const std::string full = prefix() + "/" + std::string(name);
    if (const auto* e = find(full)) return *e;
    throw Error(path() + ": no record \"" + printable(name, 200) + "\" (entry \"" + printable(full, 200) + "\")");
}

std::span<const std::byte> ZipArchive::record(std::string_view name) const { return data(record_entry(name)); }

std::vector<std::string> ZipArchive::record_names() const {
    const std::string p = prefix() + "/";
    std::vector<std::string> names;
    for (const auto& e : entries_)
        if (e.name.size() > p.size() && e.name.compare(0, p.size(), p) == 0) names.push_back(e.name.substr(p.size()));
    return names;
}

// ---- writer -------------------------------------------------------------------------------------

ZipWriter::ZipWriter(std::string path, ZipWriterOptions options) : out_(std::move(path)), options_(options) {}

ZipWriter::~ZipWriter() = default;  // an unfinished AtomicOutput removes its temporary

bool ZipWriter::entry_zip64(std::uint64_t header_offset, std::uint64_t size) const {
    return header_offset >= kMax32 || size >= kMax32;
}

void ZipWriter::add_record(std::string_view name, std::span<const std::byte> bytes) {
    begin_record(name, bytes.size());
    write(bytes);
    end_record();
}

void ZipWriter::add_record(std::string_view name, std::string_view bytes) {
    add_record(name, std::as_bytes(std::span<const char>(bytes.data(), bytes.size())));
}

void ZipWriter::add_record_pieces(std::string_view name, std::span<const std::span<const std::byte>> pieces) {
    std::uint64_t total = 0;
    for (const auto& p : pieces) total += p.size();
    begin_record(name, total);
    for (const auto& p : pieces) write(p);
    end_record();
}

void ZipWriter::begin_record(std::string_view name, std::uint64_t size) {
    const std::string where = path() + ": record \"" + std::string(name) + "\"";
    if (finished_) throw Error(where + ": the archive is already finished");
    if (open_) throw Error(where + ": record \"" + open_->name + "\" is still open");
    if (name.empty() || name.size() > kMax16) throw Error(where + ": name must have 1 to 65535 bytes");
    if (names_.count(name)) throw Error(where + ": duplicate record name");

    // miniz's local header, which torch.load's offset calculation (serialization.py _get_offset)
    // assumes: CRC and sizes zero (they follow in a data descriptor), then a ZIP64 extra field with
    // the sizes if size >= 0xFFFFFFFF and the header offset if it is >= 0xFFFFFFFF, then the "FB"
    // padding field (at least its 4-byte header) up to the next 64-byte boundary.
    const std::uint64_t offset = out_.bytes_written();
    const bool big_size = size >= kMax32;  // not forced: local headers stay as miniz writes them
    const bool big_offset = offset >= kMax32;
    Bytes z64;
    if (big_size || big_offset) {
        z64.u16(kZip64ExtraId);
        z64.u16(8 * (2 * big_size + big_offset));
        if (big_size) z64.u64(size), z64.u64(size);
        if (big_offset) z64.u64(offset);
    }
    const std::uint64_t start = offset + kLocalSize + name.size() + z64.s.size() + 4;
    const std::uint64_t pad = (kAlignment - start % kAlignment) % kAlignment;
    Bytes h;
    h.u32(kLocalSig);
    h.u16(entry_zip64(offset, size) ? 45 : 20);
    h.u16(kFlagUtf8 | (size > 0 ? kFlagDescriptor : 0));
    h.u16(0);  // stored
    h.u16(kDosTime);
    h.u16(kDosDate);
    h.u32(0);                       // CRC-32: in the data descriptor
    h.u32(big_size ? kMax32 : 0);   // compressed size: in the descriptor (or the ZIP64 field)
    h.u32(big_size ? kMax32 : 0);   // size
    h.u16(name.size());
    h.u16(z64.s.size() + 4 + pad);
    h.str(name);
    h.str(z64.s);
    h.u16(kPadExtraId);
    h.u16(pad);
    h.s.append(pad, 'Z');
    out_.write(h.s);
    open_ = Open{std::string(name), offset, size};
}

void ZipWriter::write(std::span<const std::byte> chunk) {
    if (!open_) throw Error(path() + ": write() outside begin_record()/end_record()");
    if (chunk.size() > open_->size - open_->written)
        throw Error(path() + ": record \"" + open_->name + "\": " + std::to_string(open_->written + chunk.size()) +
                    " bytes written, more than the declared " + std::to_string(open_->size));
    open_->crc32 = crc32(chunk, open_->crc32);
    out_.write(chunk.data(), chunk.size());
    open_->written += chunk.size();
}

void ZipWriter::end_record() {
    if (!open_) throw Error(path() + ": end_record() without begin_record()");
    if (open_->written != open_->size)
        throw Error(path() + ": record \"" + open_->name + "\": " + std::to_string(open_->written) + " bytes written, " +
                    std::to_string(open_->size) + " declared");
    if (open_->size > 0) {  // miniz writes no descriptor after an empty record
        Bytes d;
        d.u32(kDescriptorSig);
        d.u32(open_->crc32);
        if (entry_zip64(open_->header_offset, open_->size)) {
            d.u64(open_->size);
            d.u64(open_->size);
        } else {
            d.u32(open_->size);
            d.u32(open_->size);
        }
        out_.write(d.s);
    }
    names_.emplace(open_->name, records_.size());
    records_.push_back({open_->name, open_->header_offset, open_->size, open_->crc32});
    open_.reset();
}

void ZipWriter::finish(std::string_view comment) {
    if (finished_) throw Error(path() + ": finish() called twice");
    if (open_) throw Error(path() + ": finish() with record \"" + open_->name + "\" still open");
    if (comment.size() > kMax16) throw Error(path() + ": zip comment longer than 65535 bytes");
    const std::uint64_t cd_offset = out_.bytes_written();
    for (const auto& r : records_) {
        const bool big_size = options_.force_zip64 || r.size >= kMax32;
        const bool big_offset = options_.force_zip64 || r.header_offset >= kMax32;
        Bytes z64;
        if (big_size || big_offset) {
            z64.u16(kZip64ExtraId);
            z64.u16(8 * (2 * big_size + big_offset));
            if (big_size) z64.u64(r.size), z64.u64(r.size);
            if (big_offset) z64.u64(r.header_offset);
        }
        const std::uint16_t version = big_size || big_offset ? 45 : 20;
        Bytes c;
        c.u32(kCentralSig);
        c.u16(version);  // made by: MS-DOS attributes (none), spec version
        c.u16(version);
        c.u16(kFlagUtf8 | (r.size > 0 ? kFlagDescriptor : 0));
        c.u16(0);
        c.u16(kDosTime);
        c.u16(kDosDate);
        c.u32(r.crc32);
        c.u32(big_size ? kMax32 : r.size);
        c.u32(big_size ? kMax32 : r.size);
        c.u16(r.name.size());
        c.u16(z64.s.size());
        c.u16(0);  // comment
        c.u16(0);  // disk
        c.u16(0);  // internal attributes
        c.u32(0);  // external attributes
        c.u32(big_offset ? kMax32 : r.header_offset);
        c.str(r.name);
        c.str(z64.s);
        out_.write(c.s);
    }
    const std::uint64_t cd_size = out_.bytes_written() - cd_offset;
    const std::uint64_t n = records_.size();
    const bool zip64 = options_.force_zip64 || n >= kMax16 || cd_offset >= kMax32 || cd_size >= kMax32;
    Bytes e;
    if (zip64) {
        const std::uint64_t z = out_.bytes_written();
        e.u32(kZip64EndSig);
        e.u64(kZip64EndSize - 12);
        e.u16(45);
        e.u16(45);
        e.u32(0);
        e.u32(0);
        e.u64(n);
        e.u64(n);
        e.u64(cd_size);
        e.u64(cd_offset);
        e.u32(kZip64LocatorSig);
        e.u32(0);
        e.u64(z);
        e.u32(1);
    }
    e.u32(kEndSig);
    e.u16(0);
    e.u16(0);
    e.u16(zip64 && (options_.force_zip64 || n >= kMax16) ? kMax16 : n);
    e.u16(zip64 && (options_.force_zip64 || n >= kMax16) ? kMax16 : n);
    e.u32(zip64 && (options_.force_zip64 || cd_size >= kMax32) ? kMax32 : cd_size);
    e.u32(zip64 && (options_.force_zip64 || cd_offset >= kMax32) ? kMax32 : cd_offset);
    e.u16(comment.size());
    e.str(comment);
    out_.write(e.s);
    out_.commit();
    finished_ = true;
}

// ---- torch conventions --------------------------------------------------------------------------

TorchZipWriter::TorchZipWriter(std::string path, std::string archive_name, ZipWriterOptions options)
    : zip_(std::move(path), options), archive_name_(std::move(archive_name)) {
    if (archive_name_.empty() || archive_name_.find('/') != std::string::npos)
        throw Error(zip_.path() + ": archive name \"" + archive_name_ + "\" must be non-empty and without '/'");
}

std::string TorchZipWriter::archive_name_for(const std::string& path) {
    // PyTorchStreamWriter's basename(): strip directories, then the last extension.
    std::string base = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
    if (auto dot = base.find_last_of('.'); dot != std::string::npos) base.resize(dot);
    return base;
}

bool TorchZipWriter::is_automatic_record(std::string_view name) {
    return std::find(std::begin(kAutomaticRecords), std::end(kAutomaticRecords), name) != std::end(kAutomaticRecords);
}

std::string TorchZipWriter::full_name(std::string_view name) const {
    if (is_automatic_record(name))
        throw Error(zip_.path() + ": record \"" + std::string(name) + "\" is written by TorchZipWriter::finish() itself");
    return archive_name_ + "/" + std::string(name);
}

void TorchZipWriter::add_record(std::string_view name, std::span<const std::byte> bytes) {
    zip_.add_record(full_name(name), bytes);
}

void TorchZipWriter::add_record(std::string_view name, std::string_view bytes) {
    zip_.add_record(full_name(name), bytes);
}

void TorchZipWriter::begin_record(std::string_view name, std::uint64_t size) { zip_.begin_record(full_name(name), size); }

void TorchZipWriter::end_record() { zip_.end_record(); }

void TorchZipWriter::finish() {
    const std::string p = archive_name_ + "/";
    if (!zip_.contains(p + "data.pkl")) throw Error(zip_.path() + ": no data.pkl record; torch.load needs one");
    zip_.add_record(p + "byteorder", std::string_view("little"));
    zip_.add_record(p + ".storage_alignment", std::to_string(ZipWriter::kAlignment));
    zip_.add_record(p + "version", std::string_view("3\n"));
    // torch's id is two 20-digit numbers, the first combined from the records' CRC-32s
    // (c10::hash_combine), the second random; ours derives the second from names and sizes.
    std::uint64_t h1 = 0, h2 = 0xcbf29ce484222325ULL;
    for (const auto& r : zip_.records()) {
        h1 ^= r.crc32 + 0x9e3779b9ULL + (h1 << 6) + (h1 >> 2);
        for (char ch : r.name + "\n" + std::to_string(r.size)) h2 = (h2 ^ static_cast<unsigned char>(ch)) * 0x100000001b3ULL;
    }
    char id[48];
    std::snprintf(id, sizeof id, "%020llu%020llu", static_cast<unsigned long long>(h1), static_cast<unsigned long long>(h2));
    zip_.add_record(p + ".data/serialization_id", std::string_view(id, 40));
    zip_.finish();
}

}  // namespace mds::ckpt
