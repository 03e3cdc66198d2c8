// Blending (specs/data.md §4.8).
#include <doctest/doctest.h>

#include <vector>

#include "mds/data/blending.h"
#include "mds/util/error.h"

using namespace mds::data;

TEST_CASE("--data-path parsing and weight normalization") {
    DataPath one = parse_data_path({"/d/p"});
    CHECK_FALSE(one.blended);
    CHECK(one.prefixes == std::vector<std::string>{"/d/p"});
    DataPath two = parse_data_path({"0.3", "/d/a", "0.7", " /d/b "});
    CHECK(two.blended);
    CHECK(two.prefixes == std::vector<std::string>{"/d/a", "/d/b"});
    CHECK(two.weights[0] == 0.3 / (0.3 + 0.7));
    CHECK(two.weights[1] == 0.7 / (0.3 + 0.7));
    DataPath single_weighted = parse_data_path({"1", "/d/a"});
    CHECK(single_weighted.blended);  // BS treats "1 P" as a blend of one dataset (1.005 surplus)
    CHECK_THROWS_AS(parse_data_path({"0.3", "/d/a", "0.7"}), mds::UsageError);
    CHECK_THROWS_AS(parse_data_path({"x", "/d/a", "0.7", "/d/b"}), mds::UsageError);
    CHECK_THROWS_AS(parse_data_path({"0", "/d/a", "0", "/d/b"}), mds::UsageError);
    CHECK_THROWS_AS(parse_data_path({}), mds::UsageError);
}

TEST_CASE("per-dataset sample counts: ceil(val * weight * 1.005)") {
    std::vector<double> w = {0.25, 0.75};
    auto n = blended_num_samples(w, {1000, 100, 10});
    CHECK(n[0] == std::array<std::int64_t, 3>{252, 26, 3});   // 251.25, 25.125, 2.5125
    CHECK(n[1] == std::array<std::int64_t, 3>{754, 76, 8});   // 753.75, 75.375, 7.5375
}

TEST_CASE("numpy_sum is numpy's pairwise sum") {
    std::vector<double> small = {0.1, 0.2, 0.3};
    CHECK(numpy_sum(small) == (0.1 + 0.2) + 0.3);
    // 9 values: ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)) + a8, not left to right.
    std::vector<double> nine = {1e16, 1, -1e16, 1, 1, 1, 1, 1, 1};
    double r = ((1e16 + 1) + (-1e16 + 1)) + ((1.0 + 1) + (1.0 + 1)) + 1;
    CHECK(numpy_sum(nine) == r);
}

TEST_CASE("build_blending_indices follows the weights, ties to the lower index") {
    std::vector<double> w = {0.5, 0.5};
    auto b = build_blending_indices(w, 6);
    CHECK(b.dataset_index == std::vector<std::uint8_t>{0, 1, 0, 1, 0, 1});
    CHECK(b.dataset_sample_index == std::vector<std::int64_t>{0, 0, 1, 1, 2, 2});
    std::vector<double> w3 = {0.2, 0.3, 0.5};
    auto c = build_blending_indices(w3, 10);
    // s=0: errors (x=1) 0.2, 0.3, 0.5 -> 2; s=1: 0.2, 0.3, -0.5 -> 1; s=2: 0.4, -0.4, 0 -> 0 ...
    CHECK(c.dataset_index[0] == 2);
    CHECK(c.dataset_index[1] == 1);
    CHECK(c.dataset_index[2] == 0);
    int counts[3] = {0, 0, 0};
    for (auto d : c.dataset_index) ++counts[d];
    CHECK(counts[0] == 2);
    CHECK(counts[1] == 3);
    CHECK(counts[2] == 5);
    // A prefix of the index does not depend on the size asked for.
    auto d = build_blending_indices(w3, 4);
    CHECK(std::vector<std::uint8_t>(c.dataset_index.begin(), c.dataset_index.begin() + 4) == d.dataset_index);
}
