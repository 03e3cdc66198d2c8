#include "mds/tokenizer/pretokenizer.h"

#include <array>

#include "mds/tokenizer/unicode.h"

namespace mds::tok {

namespace {

// ASCII classes without a table lookup through the full map.
constexpr std::array<CharClass, 128> make_ascii() {
    std::array<CharClass, 128> a{};
    for (int c = 0; c < 128; ++c) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            a[c] = CharClass::Letter;
        else if (c >= '0' && c <= '9')
            a[c] = CharClass::Number;
        else if ((c >= 0x09 && c <= 0x0D) || c == ' ')
            a[c] = CharClass::Space;
        else
            a[c] = CharClass::Other;
    }
    return a;
}
constexpr auto kAscii = make_ascii();

// Class of the code point at p; sets `next` past it.
inline CharClass class_at(const char* p, const char* end, const char*& next) {
    auto c = static_cast<unsigned char>(*p);
    if (c < 0x80) {
        next = p + 1;
        return kAscii[c];
    }
    next = p;
    return char_class(next_codepoint(next, end));
}

// End of the run of `cls` starting at p.
inline const char* run_end(const char* p, const char* end, CharClass cls) {
    while (p < end) {
        const char* n;
        if (class_at(p, end, n) != cls) break;
        p = n;
    }
    return p;
}

void gpt2(std::string_view text, std::vector<std::string_view>& out) {
    const char* p = text.data();
    const char* const end = p + text.size();
    auto emit = [&](const char* a, const char* b) { out.emplace_back(a, static_cast<std::size_t>(b - a)); };
    while (p < end) {
        // 's 't 're 've 'm 'll 'd: ASCII apostrophe and lower case only.
        if (*p == '\'' && p + 1 < end) {
            char c1 = p[1];
            int len = 0;
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
                len = 2;
            else if (p + 2 < end && ((c1 == 'r' && p[2] == 'e') || (c1 == 'v' && p[2] == 'e') || (c1 == 'l' && p[2] == 'l')))
                len = 3;
            if (len) {
                emit(p, p + len);
                p += len;
                continue;
            }
        }
        const char* next;
        CharClass cls = class_at(p, end, next);
        // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional U+0020 then a run of one class.
        if (*p == ' ' && next < end) {
            const char* after;
            CharClass c2 = class_at(next, end, after);
            if (c2 != CharClass::Space) {
                const char* k = run_end(after, end, c2);
                emit(p, k);
                p = k;
                continue;
            }
        }
        if (cls != CharClass::Space) {
            const char* k = run_end(next, end, cls);
            emit(p, k);
            p = k;
            continue;
        }
        // "\s+(?!\S)|\s+": a whitespace run; before a non-space, its last character is left for
        // the next piece (unless the run is a single character).
        const char* last = p;  // start of the last whitespace code point of the run
        const char* k = next;
        while (k < end) {
            const char* n;
            if (class_at(k, end, n) != CharClass::Space) break;
            last = k;
            k = n;
        }
        if (k == end || last == p) {
            emit(p, k);
            p = k;
        } else {
            emit(p, last);
            p = last;
        }
    }
}

// BLOOM: characters excluded from a match besides whitespace.
inline bool bloom_excluded(char32_t cp) {
    switch (cp) {
        case '(': case '|': case ')': case '.': case ',': case '!': case '?':
        case U'…': case U'。': case U'，': case U'、': case U'।': case U'۔': case U'،':
            return true;
        default:
            return false;
    }
}

inline bool bloom_allowed_at(const char* p, const char* end, const char*& next) {
    next = p;
    char32_t cp = next_codepoint(next, end);
    if (bloom_excluded(cp)) return false;
    return (cp < 0x80 ? kAscii[cp] : char_class(cp)) != CharClass::Space;
}

void bloom(std::string_view text, std::vector<std::string_view>& out) {
    const char* p = text.data();
    const char* const end = p + text.size();
    const char* gap = nullptr;  // start of the pending run of unmatched characters
    auto flush_gap = [&](const char* upto) {
        if (gap && gap < upto) out.emplace_back(gap, static_cast<std::size_t>(upto - gap));
        gap = nullptr;
    };
    while (p < end) {
        const char* n;
        const char* start = p;
        bool match = false;
        if (*p == ' ' && p + 1 < end && bloom_allowed_at(p + 1, end, n)) {
            match = true;
        } else if (bloom_allowed_at(p, end, n)) {
            match = true;
        }
        if (match) {
            flush_gap(start);
            const char* k = n;
            while (k < end && bloom_allowed_at(k, end, n)) k = n;
            out.emplace_back(start, static_cast<std::size_t>(k - start));
            p = k;
        } else {
            if (!gap) gap = p;
            next_codepoint(p, end);
        }
    }
    flush_gap(end);
}

}  // namespace

void pretokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& pieces) {
    switch (kind) {
        case PreTokenizer::Gpt2: gpt2(text, pieces); break;
        case PreTokenizer::Bloom: bloom(text, pieces); break;
        case PreTokenizer::Whole:
            if (!text.empty()) pieces.push_back(text);
            break;
    }
}

}  // namespace mds::tok
