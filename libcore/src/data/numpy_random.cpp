#include "mds/data/numpy_random.h"

#include <string>

#include "mds/util/error.h"

namespace mds::data {

double NumpyRandomState::random_sample() {
    // numpy legacy_double / random_standard_uniform: 27 + 26 bits.
    std::uint32_t a = next32() >> 5, b = next32() >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
}

std::uint64_t NumpyRandomState::random_interval(std::uint64_t max) {
    if (max == 0) return 0;
    std::uint64_t mask = max;  // smallest 2^k - 1 >= max
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    std::uint64_t value;
    if (max <= 0xFFFFFFFFULL) {
        while ((value = (next32() & mask)) > max) {
        }
    } else {
        while ((value = (next64() & mask)) > max) {
        }
    }
    return value;
}

std::vector<std::int64_t> NumpyRandomState::permutation(std::size_t n) {
    std::vector<std::int64_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int64_t>(i);
    shuffle(v);
    return v;
}

std::uint32_t check_numpy_seed(std::int64_t seed) {
    if (seed < 0 || seed > 0xFFFFFFFFLL)
        throw Error("seed " + std::to_string(seed) + " is out of range: numpy's RandomState takes a seed between 0 and "
                    "2**32 - 1");
    return static_cast<std::uint32_t>(seed);
}

}  // namespace mds::data
