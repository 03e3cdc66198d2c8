// Ints of any size and the text encodings pickles use (latin-1, UTF-8 with surrogates), shared by
// the value, the reader and the writer (pickle_internal.h); and the Python 2 / 3 names of builtins.
#include <algorithm>

#include "pickle_internal.h"

namespace mds::ckpt::pickle_detail {

namespace {

// Two's-complement negation in place (the length is kept; callers extend first when needed).
void negate(Bytes& b) {
    unsigned carry = 1;
    for (auto& x : b) {
        const unsigned s = static_cast<unsigned>(static_cast<std::uint8_t>(~x)) + carry;
        x = static_cast<std::uint8_t>(s);
        carry = s >> 8;
    }
}

}  // namespace

void trim_twos_complement(Bytes& b) {
    while (b.size() > 1) {
        const std::uint8_t last = b.back(), prev = b[b.size() - 2];
        if ((last == 0x00 && !(prev & 0x80)) || (last == 0xff && (prev & 0x80)))
            b.pop_back();
        else
            break;
    }
    if (b.size() == 1 && b[0] == 0) b.clear();
}

Bytes int64_bytes(std::int64_t v) {
    Bytes b(8);
    auto u = static_cast<std::uint64_t>(v);
    for (int i = 0; i < 8; ++i) b[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(u >> (8 * i));
    trim_twos_complement(b);
    return b;
}

bool is_negative(const Bytes& b) { return !b.empty() && (b.back() & 0x80); }

std::string bytes_decimal(Bytes mag) {  // mag: two's complement, any sign
    const bool neg = is_negative(mag);
    if (neg) {
        mag.push_back(0xff);
        negate(mag);
    }
    std::string digits;
    // Repeated division of the magnitude by 10^9, most significant byte first.
    while (std::any_of(mag.begin(), mag.end(), [](std::uint8_t x) { return x != 0; })) {
        std::uint64_t rem = 0;
        for (std::size_t i = mag.size(); i-- > 0;) {
            const std::uint64_t cur = (rem << 8) | mag[i];
            mag[i] = static_cast<std::uint8_t>(cur / 1000000000u);
            rem = cur % 1000000000u;
        }
        std::string chunk = std::to_string(rem);
        const bool more = std::any_of(mag.begin(), mag.end(), [](std::uint8_t x) { return x != 0; });
        if (more) chunk.insert(0, 9 - chunk.size(), '0');
        digits.insert(0, chunk);
    }
    // Appended, not assigned: GCC 12 at -O3 reports false -Wrestrict warnings for `digits = "0"` and
    // "-" + digits here.
    if (digits.empty()) digits += '0';
    if (neg) digits.insert(0, 1, '-');
    return digits;
}

// Decimal text (optional sign) to two's-complement bytes; false when it is not a decimal.
bool decimal_bytes(std::string_view s, Bytes& out) {
    bool neg = false;
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        s.remove_prefix(1);
    }
    if (s.empty()) return false;
    Bytes mag;  // little-endian magnitude
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        unsigned carry = static_cast<unsigned>(c - '0');
        for (auto& x : mag) {
            const unsigned v = x * 10u + carry;
            x = static_cast<std::uint8_t>(v);
            carry = v >> 8;
        }
        while (carry) {
            mag.push_back(static_cast<std::uint8_t>(carry));
            carry >>= 8;
        }
    }
    mag.push_back(0);  // sign byte
    if (neg) negate(mag);
    trim_twos_complement(mag);
    out = std::move(mag);
    return true;
}

// ---------------------------------------------------------------------------------------------
// Text helpers.

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

std::string latin1_to_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) append_utf8(out, static_cast<std::uint8_t>(c));
    return out;
}

bool decode_utf8(std::string_view s, std::vector<std::uint32_t>* cps) {
    std::size_t i = 0;
    while (i < s.size()) {
        const auto b0 = static_cast<std::uint8_t>(s[i]);
        std::uint32_t cp = 0;
        std::size_t n = 0;
        if (b0 < 0x80) {
            cp = b0;
            n = 1;
        } else if (b0 >= 0xc2 && b0 < 0xe0) {
            cp = b0 & 0x1fu;
            n = 2;
        } else if (b0 >= 0xe0 && b0 < 0xf0) {
            cp = b0 & 0x0fu;
            n = 3;
        } else if (b0 >= 0xf0 && b0 < 0xf5) {
            cp = b0 & 0x07u;
            n = 4;
        } else {
            return false;
        }
        if (i + n > s.size()) return false;
        for (std::size_t k = 1; k < n; ++k) {
            const auto b = static_cast<std::uint8_t>(s[i + k]);
            if ((b & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (b & 0x3fu);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) return false;
        if (cps) cps->push_back(cp);
        i += n;
    }
    return true;
}

// A str whose code points are all below 256, as the latin-1 bytes it encodes to.
bool utf8_to_latin1(std::string_view s, std::string& out) {
    std::vector<std::uint32_t> cps;
    if (!decode_utf8(s, &cps)) return false;
    out.clear();
    for (auto cp : cps) {
        if (cp > 0xff) return false;
        out += static_cast<char>(cp);
    }
    return true;
}

// Python 2 names that protocol 2 writes for Python 3 builtins (CPython's _compat_pickle, the
// one-to-one part), as (Python 3 name, Python 2 name).
constexpr std::pair<const char*, const char*> kBuiltinRenames[] = {
    {"int", "long"}, {"str", "unicode"}, {"range", "xrange"}, {"chr", "unichr"}};

// Python 3 spelling of a global, as CPython's Unpickler with fix_imports reads it.
PyGlobal normalize_global(std::string module, std::string name) {
    if (module == "copy_reg") module = "copyreg";
    if (module == "__builtin__" || module == "builtins") {
        module = "builtins";
        if (name == "basestring") name = "str";
        for (const auto& [py3, py2] : kBuiltinRenames)
            if (name == py2) name = py3;
    }
    return {std::move(module), std::move(name)};
}

// How protocol 2 spells a global: __builtin__.long for builtins.int, copy_reg for copyreg.
std::pair<std::string, std::string> python2_global(const std::string& module, const std::string& name) {
    if (module == "copyreg") return {"copy_reg", name};
    if (module != "builtins") return {module, name};
    for (const auto& [py3, py2] : kBuiltinRenames)
        if (name == py3) return {"__builtin__", py2};
    return {"__builtin__", name};
}

}  // namespace mds::ckpt::pickle_detail
