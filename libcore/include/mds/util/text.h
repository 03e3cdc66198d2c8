// Small text helpers every area needs: ASCII whitespace trimming, ASCII case mapping and byte
// counts written for people. Locale-free on purpose: a tool must accept and print the same bytes
// whatever LANG says. Prefix and suffix tests are std::string_view's starts_with / ends_with
// (C++20): no helper of our own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mds {

// `s` without leading and trailing ASCII whitespace (space, \t, \n, \v, \f, \r: std::isspace in
// the "C" locale).
std::string trim(std::string_view s);
// ASCII letters mapped; every other byte (UTF-8 included) kept as it is.
std::string to_lower(std::string_view s);
std::string to_upper(std::string_view s);

// Python's repr(float): the shortest digits that read back as `value`, in fixed notation for decimal exponents
// in [-4, 16) ("0.0001", "100000.0"), else "1.5e-05" style; "nan", "inf", "-inf". How pandas writes float columns
// (emissions.csv) and how Python shows a pickled float (PyValue::repr, the args as TensorBoard text).
std::string python_float_repr(double value);
// `v` with `decimals` digits after the point, as printf's "%.*f" ("1.25", "-0.50"); any size.
std::string format_fixed(double v, int decimals);

// "999 B", "1.00 kB", "1.54 MB", ... "3000.00 PB": decimal units, two decimals past bytes (progress
// lines, upload summaries).
std::string format_bytes(double bytes);
// "512 B", "1.5 KiB", "2.0 GiB", ... "PiB": binary units, one decimal past bytes (disk usage in
// mds-slurm-status, as `df -h` counts).
std::string format_bytes_iec(std::uint64_t bytes);

}  // namespace mds
