#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "mds/ckpt/partition.h"
#include "mds/util/error.h"

using namespace mds::ckpt;
using V = std::vector<int>;
using W = std::vector<std::int64_t>;

TEST_CASE("partition_uniform: the remainder goes first (dp) or last (bisect, DeepSpeed 0.6.5)") {
    CHECK(partition_uniform(10, 3, PartitionAlgorithm::Dp) == V{0, 4, 7, 10});
    CHECK(partition_uniform(10, 3, PartitionAlgorithm::Bisect) == V{0, 3, 6, 10});
    CHECK(partition_uniform(2, 4, PartitionAlgorithm::Dp) == V{0, 1, 2, 2, 2});
    CHECK(partition_uniform(2, 4, PartitionAlgorithm::Bisect) == V{0, 1, 2, 2, 2});
    CHECK_THROWS_AS(partition_uniform(3, 0, PartitionAlgorithm::Dp), mds::Error);
}

TEST_CASE("partition_balanced: DeepSpeed's answers, quirks included") {
    // DeepSpeed's own unit test (tests/unit/runtime/utils/test_partition.py) expectations for the dp version.
    CHECK(partition_balanced(W{1, 1, 1, 1}, 4, PartitionAlgorithm::Dp) == V{0, 1, 2, 3, 4});
    const auto five = partition_balanced(W{1, 1, 1, 1, 1}, 4, PartitionAlgorithm::Dp);
    CHECK((five == V{0, 1, 2, 3, 5} || five == V{0, 2, 3, 4, 5}));
    // v0.6.5 accepts an empty first part when the first item outweighs the bottleneck (weights[-1] read).
    CHECK(partition_balanced(W{5, 1, 1}, 2, PartitionAlgorithm::Bisect) == V{0, 0, 3});
    CHECK(partition_balanced(W{5, 1, 1}, 2, PartitionAlgorithm::Dp) == V{0, 1, 3});
    // BMD's GPTModelPipe, 4 blocks over 3 stages, 'type:transformer': the two generations differ.
    const W blocks{0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0};
    CHECK(partition_balanced(blocks, 3, PartitionAlgorithm::Dp) == V{0, 5, 6, 11});
    CHECK(partition_balanced(blocks, 3, PartitionAlgorithm::Bisect) == V{0, 4, 5, 11});
    CHECK_THROWS_AS(partition_balanced(W{1, -1, 1}, 2, PartitionAlgorithm::Dp), mds::Error);
}

TEST_CASE("GPTModelPipe's spec list is rebuilt from the layer indices on disk") {
    // BMD: _to_float16, embed, lambda, blocks 3..4, lambda, final norm 6, tied head, float16_to_fp32.
    const auto bmd = gpt_pipe_specs({1, 3, 4, 6}, true);
    REQUIRE(bmd.size() == 9);
    CHECK(bmd[0].type_name == "_to_float16");
    CHECK((bmd[1].type_name == "EmbeddingPipe" && bmd[1].layer == 1 && bmd[1].tied_embedding));
    CHECK(bmd[2].type_name == "<lambda>");
    CHECK((bmd[3].type_name == "ParallelTransformerLayerPipe" && bmd[3].layer == 3));
    CHECK((bmd[6].type_name == "MixedFusedLayerNorm" && bmd[6].layer == 6));
    CHECK((bmd[7].type_name == "EmbeddingPipe" && bmd[7].layer == -1 && bmd[7].tied_embedding));
    CHECK(bmd[8].type_name == "float16_to_fp32");
    // MMD after 53db2b14: no transpose lambdas; fp32: no final cast.
    const auto mmd = gpt_pipe_specs({1, 2, 3, 4}, false);
    REQUIRE(mmd.size() == 6);
    CHECK(mmd[2].type_name == "ParallelTransformerLayerPipe");
    CHECK(mmd[4].type_name == "MixedFusedLayerNorm");
    CHECK_THROWS_AS(gpt_pipe_specs({1, 3, 5, 7}, true), mds::Error);  // blocks must be contiguous
    CHECK_THROWS_AS(gpt_pipe_specs({1, 7}, true), mds::Error);
}

TEST_CASE("partition methods weigh the spec list as PipelineModule does") {
    auto specs = gpt_pipe_specs({1, 3, 4, 5, 6, 8}, true);  // 4 blocks, 11 entries
    CHECK(partition_pipe_specs(specs, "type:transformer", 2, PartitionAlgorithm::Dp) == V{0, 5, 11});
    CHECK(partition_pipe_specs(specs, "TYPE:Transformer", 2, PartitionAlgorithm::Dp) == V{0, 5, 11});  // lower-cased
    CHECK(partition_pipe_specs(specs, "uniform", 2, PartitionAlgorithm::Dp) == V{0, 6, 11});
    for (auto& s : specs) s.parameters = s.type_name == "ParallelTransformerLayerPipe" ? 10 : s.tied_embedding ? 25 : 0;
    CHECK(partition_pipe_specs(specs, "parameters", 2, PartitionAlgorithm::Dp).size() == 3);
    CHECK_THROWS_WITH_AS(partition_pipe_specs(specs, "type:nothing", 2, PartitionAlgorithm::Dp), doctest::Contains("matches no layer"), mds::Error);
    CHECK_THROWS_WITH_AS(partition_pipe_specs(specs, "profile", 2, PartitionAlgorithm::Dp), doctest::Contains("not supported"), mds::Error);
    CHECK_THROWS_AS(partition_pipe_specs(specs, "type:(", 2, PartitionAlgorithm::Dp), mds::Error);
    CHECK(parse_partition_algorithm("bisect") == PartitionAlgorithm::Bisect);
    CHECK_FALSE(parse_partition_algorithm("greedy"));
}

TEST_CASE("gpt_stage_cuts: blocks, embedding and output layer per stage, as mds-train and its planner cut them") {
    // 3 blocks over 2 stages ('type:transformer', DeepSpeed's current partition_uniform-like answer).
    const auto three = gpt_stage_cuts(3, 2, "type:transformer", false, 0, 0, 0);
    REQUIRE(three.size() == 2);
    CHECK((three[0].first_block == 0 && three[0].end_block == 2 && three[0].embedding && !three[0].output_layer));
    CHECK((three[1].first_block == 2 && three[1].end_block == 3 && three[1].final_norm && three[1].output_layer));
    // BLOOM: 70 blocks, 12 stages, the two embeddings weighted like a block: 6 slots per stage, so
    // 5 blocks beside the embedding on the first stage and beside the output layer on the last.
    const auto bloom = gpt_stage_cuts(70, 12, "type:transformer|embedding", true, 0, 0, 0);
    REQUIRE(bloom.size() == 12);
    CHECK(bloom[0].end_block - bloom[0].first_block == 5);
    CHECK(bloom[11].end_block - bloom[11].first_block == 5);
    std::int64_t total = 0;
    for (std::size_t s = 0; s < bloom.size(); ++s) {
        total += bloom[s].end_block - bloom[s].first_block;
        if (s > 0) CHECK(bloom[s].first_block == bloom[s - 1].end_block);
    }
    CHECK(total == 70);
    // 'parameters': the embedding (1000) and the output layer's copy (1000) weigh on both ends, the
    // final norm (1) on the last: the smallest bottleneck is 1020 | 1021, two blocks each.
    const auto heavy = gpt_stage_cuts(4, 2, "parameters", false, 1000, 10, 1);
    CHECK((heavy[0].first_block == 0 && heavy[0].end_block == 2 && heavy[0].embedding && !heavy[0].final_norm));
    CHECK((heavy[1].first_block == 2 && heavy[1].end_block == 4 && heavy[1].final_norm && heavy[1].output_layer));
    // Three stages of 'parameters' with a light embedding: the blocks are spread, none left empty.
    const auto light = gpt_stage_cuts(6, 3, "parameters", false, 5, 10, 1);
    CHECK((light[0].end_block == 2 && light[1].first_block == 2 && light[1].end_block == 4 && light[2].end_block == 6));
    CHECK_THROWS_AS(gpt_stage_cuts(4, 2, "type:nothing-matches", false, 0, 0, 0), mds::Error);
}
