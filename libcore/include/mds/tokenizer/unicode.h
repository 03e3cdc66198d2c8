// Code point classes for byte-level BPE pre-tokenization (specs/data.md §3.3): letters (\p{L}),
// numbers (\p{N}), White_Space (\s of the Python regex module) and everything else. The tables are
// generated from the regex module (scripts/gen_unicode_tables.py); unicode_version() says which.
#pragma once

#include <cstdint>
#include <string_view>

namespace mds::tok {

enum class CharClass : std::uint8_t { Other = 0, Letter = 1, Number = 2, Space = 3 };

CharClass char_class(char32_t cp);

// The generator's description (regex module and Unicode data versions).
std::string_view unicode_tables_source();

// Decodes one code point of *valid* UTF-8 at p (p < end), advancing p. Invalid input yields
// U+FFFD and advances one byte, so callers never loop forever on bad bytes.
inline char32_t next_codepoint(const char*& p, const char* end) {
    auto c = static_cast<unsigned char>(*p);
    if (c < 0x80) {
        ++p;
        return c;
    }
    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (len == 0 || end - p < len) {
        ++p;
        return 0xFFFD;
    }
    char32_t cp = c & (0x7F >> len);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(p[k]) & 0x3F);
    p += len;
    return cp;
}

}  // namespace mds::tok
