// The median of a few numbers: the loss alerts' trend (observe/loss_alert.cpp) and the straggler
// report's typical rank (observe/straggler.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace mds {

// The middle value, or the mean of the two middle ones for an even count; 0 for none.
inline double median(std::vector<double> values) {
    if (values.empty()) return 0.0;
    const std::size_t mid = values.size() / 2;
    std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
    const double upper = values[mid];
    if (values.size() % 2 == 1) return upper;
    const double lower = *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
    return (lower + upper) / 2.0;
}

}  // namespace mds
