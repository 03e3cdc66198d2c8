// Whole numbers and "A-B" ranges as flags spell them: --skip-train-iteration-range 1001-1200,
// mds-sample-text's --iterations 40-45 and --consumed-samples, --save-interval's N@A-B. One reader,
// so each flag takes the same spellings and says the same things about a bad one; the caller adds
// its flag's name and the form it expects.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mds {

// A whole number >= 0 in decimal digits (no sign, no spaces); with `python_underscores`, also
// Python's int() spelling of single '_' between digits ("1_000"). nullopt for anything else and
// past INT64_MAX.
std::optional<std::int64_t> parse_whole_number(std::string_view s, bool python_underscores = false);

// Why `s` is not a whole number, to follow the number's name in an error message: "is missing",
// "'abc' is not a whole number" or "'99999999999999999999' is too large (at most
// 9223372036854775807)". `s` must have failed parse_whole_number.
std::string whole_number_problem(std::string_view s);

struct IntRange {
    std::int64_t first = 0, last = 0;  // first <= last
};

// "A-B" (A <= B), or a bare "A" read as A-A when `single_allowed`. `problem` is empty when `range`
// holds the result; otherwise it says what is wrong ("the range end 'x' is not a whole number",
// "expected two whole numbers joined by one '-'", "the range ends (3) before it starts (7)").
struct IntRangeParse {
    IntRange range;
    std::string problem;
};
IntRangeParse parse_int_range(std::string_view text, bool single_allowed = false, bool python_underscores = false);

// A double read from a file (JSON's 5.0, a pickled float) as an int64, truncated toward zero;
// nullopt for NaN, infinities and values outside [-2^63, 2^63), where static_cast is undefined.
std::optional<std::int64_t> truncate_to_int64(double v);

// The same, for a value that must be whole: nullopt also when `v` has a fraction (5.5).
std::optional<std::int64_t> exact_int64(double v);

}  // namespace mds
