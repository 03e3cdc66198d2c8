// Trimming, case mapping and byte counts (text.h).
#include "mds/util/text.h"

#include <cstdio>

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

}  // namespace mds
