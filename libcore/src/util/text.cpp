// Trimming, case mapping, byte counts and Python's float repr (text.h).
#include "mds/util/text.h"

#include <charconv>  // to_chars: shortest round-trip digits
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace mds {
namespace {

// std::isspace and std::tolower / std::toupper in the "C" locale, whatever the process's locale.
constexpr bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
constexpr char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
constexpr char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }

// `v` scaled down by `step` until it is below it (at most to the last unit), printed with
// `decimals` past the first unit.
std::string scaled(double v, double step, const char* const (&units)[6], int decimals) {
    int u = 0;
    while (v >= step && u < 5) {
        v /= step;
        ++u;
    }
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.*f %s", u == 0 ? 0 : decimals, v, units[u]);
    return buf;
}

}  // namespace

std::string format_fixed(double v, int decimals) {
    const int n = std::snprintf(nullptr, 0, "%.*f", decimals, v);
    if (n <= 0) return {};
    std::string out(static_cast<std::size_t>(n) + 1, '\0');
    std::snprintf(out.data(), out.size(), "%.*f", decimals, v);
    out.resize(static_cast<std::size_t>(n));
    return out;
}

std::string trim(std::string_view s) {
    std::size_t b = 0, e = s.size();
    while (b < e && is_ascii_space(s[b])) ++b;
    while (e > b && is_ascii_space(s[e - 1])) --e;
    return std::string(s.substr(b, e - b));
}

std::string to_lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = ascii_lower(c);
    return out;
}

std::string to_upper(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = ascii_upper(c);
    return out;
}

std::string format_bytes(double bytes) {
    static const char* const kUnits[6] = {"B", "kB", "MB", "GB", "TB", "PB"};
    return scaled(bytes, 1000.0, kUnits, 2);
}

std::string format_bytes_iec(std::uint64_t bytes) {
    static const char* const kUnits[6] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    return scaled(static_cast<double>(bytes), 1024.0, kUnits, 1);
}

std::string python_float_repr(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    const std::string sci(buf, r.ptr);  // "-1.2345e-05": shortest digits that round-trip
    const std::size_t e = sci.find('e');
    const int exp10 = std::stoi(sci.substr(e + 1));
    const bool negative = sci[0] == '-';
    std::string digits;
    for (std::size_t i = negative ? 1 : 0; i < e; ++i)
        if (sci[i] != '.') digits += sci[i];
    std::string out = negative ? "-" : "";
    if (exp10 < -4 || exp10 >= 16) {
        out += digits[0];
        if (digits.size() > 1) {
            out += '.';
            out.append(digits, 1, std::string::npos);
        }
        out += exp10 < 0 ? "e-" : "e+";
        const std::string e_digits = std::to_string(std::abs(exp10));
        if (e_digits.size() < 2) out += '0';
        return out + e_digits;
    }
    if (exp10 < 0) return out + "0." + std::string(static_cast<std::size_t>(-exp10 - 1), '0') + digits;
    const auto int_digits = static_cast<std::size_t>(exp10 + 1);
    if (digits.size() <= int_digits) return out + digits + std::string(int_digits - digits.size(), '0') + ".0";
    return out + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

}  // namespace mds
