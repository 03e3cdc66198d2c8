// numpy's legacy `np.random.RandomState`, bit-exact for what Megatron's GPTDataset draws from it:
// seeding, the bounded integer `random_interval`, and `shuffle`/`permutation` of 1-D arrays
// (specs/data.md §4.7). RandomState is frozen by numpy's compatibility policy, so this stream is
// the same for every numpy version.
#pragma once

#include <cstdint>
#include <random>  // std::mt19937: same seeding (init_genrand) and tempering as numpy's mt19937
#include <span>
#include <utility>  // std::swap
#include <vector>

namespace mds::data {

class NumpyRandomState {
public:
    // RandomState(seed) for an int seed in [0, 2^32-1] (numpy raises ValueError outside; callers
    // validate user input with check_numpy_seed first).
    explicit NumpyRandomState(std::uint32_t seed) : mt_(seed) {}

    std::uint32_t next32() { return static_cast<std::uint32_t>(mt_()); }
    // numpy's mt19937_next64: first draw in the high half. The C source leaves the evaluation order
    // of its two calls unspecified; numpy's builds draw the high half first (checked against
    // RandomState.randint beyond 2^32, test_numpy_random.cpp). Only arrays of > 2^32 elements use it.
    std::uint64_t next64() {
        std::uint64_t hi = next32();
        return hi << 32 | next32();
    }
    // random_sample(): a double in [0, 1) from 53 random bits (used by the numpy test vectors).
    double random_sample();

    // Uniform integer in [0, max] by mask-and-reject (numpy distributions.c random_interval; the
    // same as randomkit's rk_interval): a 32-bit draw while max fits in 32 bits, 64-bit beyond.
    std::uint64_t random_interval(std::uint64_t max);

    // RandomState.shuffle(x) for a 1-D array: Fisher-Yates from the end, no draw for i == 0, and a
    // swap even when j == i. The element type does not affect the draws.
    template <class T>
    void shuffle(std::span<T> x) {
        for (std::size_t i = x.size(); i-- > 1;) {
            auto j = static_cast<std::size_t>(random_interval(i));
            std::swap(x[i], x[j]);
        }
    }
    template <class T>
    void shuffle(std::vector<T>& x) {
        shuffle(std::span<T>(x));
    }

    // RandomState.permutation(n): arange(n), then shuffle.
    std::vector<std::int64_t> permutation(std::size_t n);

private:
    std::mt19937 mt_;
};

// Throws mds::Error unless 0 <= seed <= 2^32-1 (numpy: "Seed must be between 0 and 2**32 - 1").
std::uint32_t check_numpy_seed(std::int64_t seed);

}  // namespace mds::data
