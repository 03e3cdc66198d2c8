#include "mds/tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <memory>
#include <vector>

namespace mds::tok {

namespace {

struct CodepointRange {
    char32_t first, last;
};

#include "unicode_tables.inc"

// One byte per code point (1.1 MB), built once: the pre-tokenizer asks for every character.
struct ClassTable {
    std::vector<std::uint8_t> cls;
    ClassTable() : cls(0x110000, static_cast<std::uint8_t>(CharClass::Other)) {
        auto fill = [&](const auto& ranges, CharClass c) {
            for (const auto& r : ranges)
                std::fill(cls.begin() + r.first, cls.begin() + r.last + 1, static_cast<std::uint8_t>(c));
        };
        fill(kLetterRanges, CharClass::Letter);
        fill(kNumberRanges, CharClass::Number);
        fill(kSpaceRanges, CharClass::Space);
    }
};

const ClassTable& table() {
    static const ClassTable t;
    return t;
}

}  // namespace

CharClass char_class(char32_t cp) {
    if (cp >= 0x110000) return CharClass::Other;
    return static_cast<CharClass>(table().cls[cp]);
}

std::string_view unicode_tables_source() {
    return "Python regex module 2026.11.15 (see libcore/src/tokenizer/unicode_tables.inc)";
}

}  // namespace mds::tok
