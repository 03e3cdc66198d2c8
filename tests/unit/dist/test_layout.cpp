// The 3D layout (mds/dist/layout.h) on BigScience's shapes. The group lists below were written from
// Megatron's initialize_model_parallel docstring example (16 GPUs, TP 2, PP 4: tensor groups
// [g0,g1] …, pipeline groups [g0,g4,g8,g12] …, data groups [g0,g2] …); the full cross-check against
// megatron-core and DeepSpeed's topology is tests/crosscheck/test_dist_layout.py.
#include <doctest/doctest.h>

#include <array>
#include <set>
#include <vector>

#include "mds/dist/layout.h"
#include "mds/util/error.h"

using namespace mds::dist;
using G = std::vector<int>;

TEST_CASE("Megatron's docstring example: 16 GPUs, TP 2, PP 4") {
    const ParallelLayout l(16, 2, 4);
    CHECK(l.dp() == 2);
    CHECK(l.all_tensor_groups() == std::vector<G>{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}});
    CHECK(l.all_data_groups() == std::vector<G>{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}});
    CHECK(l.all_pipeline_groups() == std::vector<G>{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}});
    CHECK(l.all_embedding_groups() == std::vector<G>{{0, 12}, {1, 13}, {2, 14}, {3, 15}});
    CHECK(l.model_group(6) == G{2, 3, 6, 7, 10, 11, 14, 15});
    const auto c = l.coordinates(11);
    CHECK(c.tp == 1);
    CHECK(c.dp == 1);
    CHECK(c.pp == 2);
    CHECK(l.is_last_stage(13));
    CHECK(l.is_first_stage(3));
}

TEST_CASE("every rank once in every kind of group, coordinates round-trip") {
    for (const auto& [w, tp, pp] : std::vector<std::array<int, 3>>{{1, 1, 1}, {8, 2, 2}, {12, 2, 3}, {384, 4, 12}, {512, 4, 32}}) {
        const ParallelLayout l(w, tp, pp);
        for (int r = 0; r < w; ++r) REQUIRE(l.rank_of(l.coordinates(r)) == r);
        for (const auto& all : {l.all_tensor_groups(), l.all_data_groups(), l.all_pipeline_groups()}) {
            std::multiset<int> seen;
            for (const auto& g : all) seen.insert(g.begin(), g.end());
            REQUIRE(seen.size() == static_cast<std::size_t>(w));
            REQUIRE(std::set<int>(seen.begin(), seen.end()).size() == static_cast<std::size_t>(w));
        }
    }
}

TEST_CASE("BLOOM-176B: 384 GPUs at TP 4, PP 12 give DP 8") {
    const ParallelLayout l(384, 4, 12);
    CHECK(l.dp() == 8);
    CHECK(l.embedding_group(0) == G{0, 352});
    CHECK(l.pipeline_group(5).size() == 12);
}

TEST_CASE("sizes that do not divide are refused with the nearest that do") {
    CHECK_THROWS_WITH_AS(ParallelLayout(10, 2, 4), doctest::Contains("launch 8 or 16 processes"), mds::UsageError);
    CHECK_THROWS_WITH_AS(ParallelLayout(3, 2, 2), doctest::Contains("launch 4 processes"), mds::UsageError);
    CHECK_THROWS_AS(ParallelLayout(4, 0, 1), mds::UsageError);
    CHECK_THROWS_AS(ParallelLayout(8, 2, 2).coordinates(8), mds::Error);
}
