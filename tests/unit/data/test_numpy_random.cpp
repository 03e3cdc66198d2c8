// numpy legacy RandomState (specs/data.md §4.7): vectors from numpy's tests/test_randomstate.py.
#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include "mds/data/numpy_random.h"
#include "mds/util/error.h"

using mds::data::NumpyRandomState;

TEST_CASE("RandomState(1234567890).random_sample matches numpy's published values") {
    NumpyRandomState rng(1234567890);
    CHECK(rng.random_sample() == doctest::Approx(0.61879477158567997).epsilon(1e-15));
    CHECK(rng.random_sample() == doctest::Approx(0.59162362775974664).epsilon(1e-15));
    CHECK(rng.random_sample() == doctest::Approx(0.88868358904449662).epsilon(1e-15));
}

TEST_CASE("RandomState(1234567890).shuffle of [1..9, 0]") {
    NumpyRandomState rng(1234567890);
    std::vector<int> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 0};
    rng.shuffle(x);
    CHECK(x == std::vector<int>{0, 1, 9, 6, 2, 4, 5, 8, 7, 3});
}

TEST_CASE("RandomState(1234567890).permutation(10)") {
    NumpyRandomState rng(1234567890);
    CHECK(rng.permutation(10) == std::vector<std::int64_t>{9, 0, 8, 5, 1, 3, 4, 7, 6, 2});
}

TEST_CASE("seed 1234 shuffle of arange(100000): first 8") {
    NumpyRandomState rng(1234);
    std::vector<std::uint32_t> a(100000);
    std::iota(a.begin(), a.end(), 0u);
    rng.shuffle(a);
    CHECK(std::vector<std::uint32_t>(a.begin(), a.begin() + 8) ==
          std::vector<std::uint32_t>{13504, 72599, 42217, 97650, 99120, 13165, 56244, 72729});
}

TEST_CASE("random_interval equals numpy's masked bounded draws (RandomState.randint)") {
    // Legacy randint(0, high) draws with the same mask rejection on the same bit generator:
    // np.random.RandomState(1).randint(0, 1000, size=5) and randint(0, 2**33 + 5, size=5, dtype=np.int64)
    // (numpy 2.4.6). The second confirms that next64 puts the first 32-bit draw in the high half.
    NumpyRandomState a(1);
    std::vector<std::uint64_t> small;
    for (int i = 0; i < 5; ++i) small.push_back(a.random_interval(999));
    CHECK(small == std::vector<std::uint64_t>{37, 235, 908, 72, 767});
    NumpyRandomState b(1);
    std::vector<std::uint64_t> big;
    for (int i = 0; i < 5; ++i) big.push_back(b.random_interval((1ULL << 33) + 4));
    CHECK(big == std::vector<std::uint64_t>{8577843435ULL, 4005303368ULL, 1703301249ULL, 1666063943ULL, 7171504636ULL});
}

TEST_CASE("the element type does not change the draws") {
    std::vector<std::int32_t> a(1000);
    std::vector<std::int64_t> b(1000);
    std::iota(a.begin(), a.end(), 0);
    std::iota(b.begin(), b.end(), 0);
    NumpyRandomState r1(7), r2(7);
    r1.shuffle(a);
    r2.shuffle(b);
    CHECK(std::equal(a.begin(), a.end(), b.begin()));
    CHECK(r1.next32() == r2.next32());
}

TEST_CASE("random_interval stays in range and uses the mask") {
    NumpyRandomState rng(42);
    CHECK(rng.random_interval(0) == 0);
    for (int i = 0; i < 1000; ++i) CHECK(rng.random_interval(5) <= 5);
    // Beyond 32 bits the 64-bit path is taken (two draws per attempt).
    for (int i = 0; i < 100; ++i) CHECK(rng.random_interval(0x1'0000'0005ULL) <= 0x1'0000'0005ULL);
    // A power-of-two-minus-one bound never rejects: exactly one draw, masked.
    NumpyRandomState a(3), b(3);
    CHECK(a.random_interval(255) == (b.next32() & 255u));
}

TEST_CASE("shuffle of 0 or 1 element draws nothing") {
    NumpyRandomState a(5), b(5);
    std::vector<int> one = {1};
    std::vector<int> none;
    a.shuffle(one);
    a.shuffle(none);
    CHECK(a.next32() == b.next32());
}

TEST_CASE("seed range") {
    CHECK(mds::data::check_numpy_seed(0) == 0u);
    CHECK(mds::data::check_numpy_seed(4294967295LL) == 4294967295u);
    CHECK_THROWS_AS(mds::data::check_numpy_seed(-1), mds::Error);
    CHECK_THROWS_AS(mds::data::check_numpy_seed(4294967296LL), mds::Error);
}
