#include "mds/util/int_range.h"

#include <cmath>
#include <limits>

namespace mds {

std::optional<std::int64_t> parse_whole_number(std::string_view s, bool python_underscores) {
    if (s.empty()) return std::nullopt;
    std::int64_t v = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        // Python's int(): one '_' between two digits.
        if (python_underscores && c == '_' && i > 0 && i + 1 < s.size() && s[i - 1] != '_' && s[i + 1] >= '0' &&
            s[i + 1] <= '9')
            continue;
        if (c < '0' || c > '9') return std::nullopt;
        const int d = c - '0';
        if (v > (std::numeric_limits<std::int64_t>::max() - d) / 10) return std::nullopt;
        v = v * 10 + d;
    }
    return v;
}

std::string whole_number_problem(std::string_view s) {
    if (s.empty()) return "is missing";
    std::string quoted(1, '\'');  // by append: g++ 12 -O3 -Werror=restrict misreads "'" + std::string
    quoted.append(s).push_back('\'');
    // Digits only yet not read: the value is what does not fit.
    if (s.find_first_not_of("0123456789") == std::string_view::npos)
        return quoted + " is too large (at most " + std::to_string(std::numeric_limits<std::int64_t>::max()) + ")";
    return quoted + " is not a whole number";
}

IntRangeParse parse_int_range(std::string_view text, bool single_allowed, bool python_underscores) {
    IntRangeParse out;
    const auto number = [&](std::string_view part, std::int64_t& value, const char* what) {
        const auto v = parse_whole_number(part, python_underscores);
        if (!v) {
            out.problem = what + whole_number_problem(part);
            return false;
        }
        value = *v;
        return true;
    };
    const auto dash = text.find('-');
    if (dash == std::string_view::npos && single_allowed) {
        if (number(text, out.range.first, text.empty() ? "a number " : "")) out.range.last = out.range.first;
        return out;
    }
    if (dash == std::string_view::npos || text.find('-', dash + 1) != std::string_view::npos) {
        out.problem = "expected two whole numbers joined by one '-'";
        return out;
    }
    if (!number(text.substr(0, dash), out.range.first, "the range start ") ||
        !number(text.substr(dash + 1), out.range.last, "the range end "))
        return out;
    if (out.range.last < out.range.first)
        out.problem = "the range ends (" + std::to_string(out.range.last) + ") before it starts (" +
                      std::to_string(out.range.first) + ")";
    return out;
}

std::optional<std::int64_t> truncate_to_int64(double v) {
    // -2^63 is exact in a double; 2^63 is the first value past INT64_MAX. NaN fails both tests.
    constexpr double kLimit = 9223372036854775808.0;
    if (!(v >= -kLimit && v < kLimit)) return std::nullopt;
    return static_cast<std::int64_t>(v);
}

std::optional<std::int64_t> exact_int64(double v) {
    const auto i = truncate_to_int64(v);
    if (!i || static_cast<double>(*i) != v) return std::nullopt;
    return i;
}

}  // namespace mds
