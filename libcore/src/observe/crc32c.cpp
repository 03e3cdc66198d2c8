// CRC-32C: a slicing-by-8 table version and an SSE4.2 version chosen once at run time.
#include "mds/observe/crc32c.h"

#include <array>
#include <cstring>  // memcpy

namespace mds::observe {

namespace {

constexpr std::uint32_t kPolyReflected = 0x82F63B78u;

// tables[k][b]: CRC of byte b followed by k zero bytes, so eight bytes fold in one step.
constexpr std::array<std::array<std::uint32_t, 256>, 8> make_tables() {
    std::array<std::array<std::uint32_t, 256>, 8> t{};
    for (std::uint32_t b = 0; b < 256; ++b) {
        std::uint32_t c = b;
        for (int i = 0; i < 8; ++i) c = (c & 1u) ? (c >> 1) ^ kPolyReflected : c >> 1;
        t[0][b] = c;
    }
    for (std::size_t k = 1; k < 8; ++k)
        for (std::size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
    return t;
}

constexpr auto kTables = make_tables();

std::uint32_t load_le32(const unsigned char* p) {
    return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
           static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MDS_CRC32C_HW 1
__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(const unsigned char* p, std::size_t n,
                                                              std::uint32_t crc) {
    std::uint64_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        std::uint64_t v;
        std::memcpy(&v, p, 8);  // x86 is little-endian, as the CRC's byte order wants
        c = __builtin_ia32_crc32di(c, v);
    }
    auto c32 = static_cast<std::uint32_t>(c);
    for (; n > 0; --n, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
    return ~c32;
}

bool detect_sse42() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

std::uint32_t crc32c_portable(const void* data, std::size_t n, std::uint32_t crc) {
    const auto* p = static_cast<const unsigned char*>(data);
    std::uint32_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        const std::uint32_t lo = load_le32(p) ^ c;
        const std::uint32_t hi = load_le32(p + 4);
        c = kTables[7][lo & 0xFFu] ^ kTables[6][(lo >> 8) & 0xFFu] ^ kTables[5][(lo >> 16) & 0xFFu] ^
            kTables[4][lo >> 24] ^ kTables[3][hi & 0xFFu] ^ kTables[2][(hi >> 8) & 0xFFu] ^
            kTables[1][(hi >> 16) & 0xFFu] ^ kTables[0][hi >> 24];
    }
    for (; n > 0; --n, ++p) c = (c >> 8) ^ kTables[0][(c ^ *p) & 0xFFu];
    return ~c;
}

bool crc32c_hardware_available() {
#ifdef MDS_CRC32C_HW
    static const bool available = detect_sse42();
    return available;
#else
    return false;
#endif
}

std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc) {
#ifdef MDS_CRC32C_HW
    if (crc32c_hardware_available()) return crc32c_sse42(static_cast<const unsigned char*>(data), n, crc);
#endif
    return crc32c_portable(data, n, crc);
}

}  // namespace mds::observe
