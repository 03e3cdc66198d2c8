// The whole of a text read as one number by std::from_chars (no spaces, no '+', nothing after it), as the
// energy sweep reads its plan's values, mds-train's log and emissions.csv.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>

namespace mds::observe {

template <class T>
std::optional<T> whole_text_number(std::string_view s) {
    T v{};
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
}

}  // namespace mds::observe
