// DeepSpeed's flat optimizer layout (mds/ckpt/ds_optimizer_layout.h): Megatron's parameter groups,
// the padding of each flat group to 2 × DP, the partitions and their fragments, worked out by hand
// (the first case is specs/checkpoints.md §5.2's worked example).
#include <doctest/doctest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "mds/ckpt/ds_optimizer_layout.h"
#include "mds/util/error.h"

using namespace mds::ckpt;

namespace {

std::vector<std::size_t> iota(std::size_t n) {
    std::vector<std::size_t> v(n);
    std::iota(v.begin(), v.end(), std::size_t{0});
    return v;
}

void check_fragment(const DsFragment& f, std::size_t param, std::int64_t offset, std::int64_t length, std::int64_t part_offset) {
    CHECK(f.param == param);
    CHECK(f.offset == offset);
    CHECK(f.length == length);
    CHECK(f.part_offset == part_offset);
}

// BMD GPTModelPipe, L = 2, h = 8, f = 32, V = 64, 16 absolute positions, no embedding LayerNorm,
// TP 1: the parameters of the one stage in traversal order with their sizes and weight decay.
struct Model {
    std::vector<std::int64_t> numel;
    std::vector<bool> decay;
    void add(std::int64_t n, bool d) {
        numel.push_back(n);
        decay.push_back(d);
    }
};
Model spec_example() {
    Model m;
    m.add(512, true);  // 0 word_embeddings
    m.add(128, true);  // 1 position_embeddings
    for (int layer = 0; layer < 2; ++layer) {
        m.add(8, false);    // input_layernorm.weight
        m.add(8, false);    // input_layernorm.bias
        m.add(192, true);   // query_key_value.weight
        m.add(24, false);   // query_key_value.bias
        m.add(64, true);    // dense.weight
        m.add(8, false);    // dense.bias
        m.add(8, false);    // post_attention_layernorm.weight
        m.add(8, false);    // post_attention_layernorm.bias
        m.add(256, true);   // dense_h_to_4h.weight
        m.add(32, false);   // dense_h_to_4h.bias
        m.add(256, true);   // dense_4h_to_h.weight
        m.add(8, false);    // dense_4h_to_h.bias
    }
    m.add(8, false);  // final LayerNorm weight
    m.add(8, false);  // final LayerNorm bias
    return m;
}

}  // namespace

TEST_CASE("megatron_param_groups: three groups split the weight-decay list in halves, two groups do not") {
    const std::vector<std::size_t> params = {10, 11, 12, 13, 14, 15, 16};
    const std::vector<bool> decay = {true, false, true, true, false, true, true};
    const auto three = megatron_param_groups(params, decay, 3);
    REQUIRE(three.size() == 3);
    CHECK(three[0].params == std::vector<std::size_t>{10, 12});  // 5 decay parameters: 5 / 2 = 2 first
    CHECK(three[1].params == std::vector<std::size_t>{13, 15, 16});
    CHECK(three[2].params == std::vector<std::size_t>{11, 14});
    CHECK(three[0].weight_decay);
    CHECK(three[1].weight_decay);
    CHECK_FALSE(three[2].weight_decay);

    const auto two = megatron_param_groups(params, decay, 2);
    REQUIRE(two.size() == 2);
    CHECK(two[0].params == std::vector<std::size_t>{10, 12, 13, 15, 16});
    CHECK(two[1].params == std::vector<std::size_t>{11, 14});
    CHECK_FALSE(two[1].weight_decay);

    CHECK_THROWS_AS(megatron_param_groups(params, decay, 4), mds::Error);
    CHECK_THROWS_AS(megatron_param_groups(params, {true}, 3), mds::Error);
}

TEST_CASE("ds_optimizer_layout: the worked example of specs/checkpoints.md 5.2 (D = 2, no padding)") {
    const Model m = spec_example();
    const auto groups = ds_optimizer_layout(megatron_param_groups(iota(m.numel.size()), m.decay, 3), m.numel, 2);
    REQUIRE(groups.size() == 3);
    CHECK(groups[0].params == std::vector<std::size_t>{0, 1, 4, 6, 10});
    CHECK(groups[1].params == std::vector<std::size_t>{12, 16, 18, 22, 24});
    CHECK(groups[0].numel == 1152);
    CHECK(groups[1].numel == 1024);
    CHECK(groups[2].numel == 224);
    for (const auto& g : groups) CHECK(g.padding == 0);
    CHECK(groups[0].partition == 576);
    CHECK(groups[1].partition == 512);
    CHECK(groups[2].partition == 112);
    CHECK(groups[0].offsets == std::vector<std::int64_t>{0, 512, 640, 832, 896});

    // Group 0: the position embeddings straddle the two partitions.
    const auto& r0 = groups[0].fragments[0];
    REQUIRE(r0.size() == 2);
    check_fragment(r0[0], 0, 0, 512, 0);
    check_fragment(r0[1], 1, 0, 64, 512);
    const auto& r1 = groups[0].fragments[1];
    REQUIRE(r1.size() == 4);
    check_fragment(r1[0], 1, 64, 64, 0);
    check_fragment(r1[1], 4, 0, 192, 64);
    check_fragment(r1[2], 6, 0, 64, 256);
    check_fragment(r1[3], 10, 0, 256, 320);

    // Group 1 splits on a parameter boundary: layer 2's h->4h weight starts rank 1.
    REQUIRE(groups[1].fragments[1].size() == 2);
    check_fragment(groups[1].fragments[1][0], 22, 0, 256, 0);
    check_fragment(groups[1].fragments[1][1], 24, 0, 256, 256);

    // Group 2 (no weight decay): rank 1 starts at layer 2's input LayerNorm bias (flat offset 112).
    check_fragment(groups[2].fragments[1][0], 15, 0, 8, 0);
    CHECK_FALSE(groups[2].weight_decay);

    const auto pieces = groups[0].pieces_of(1);
    REQUIRE(pieces.size() == 2);
    CHECK(pieces[0].first == 0);
    check_fragment(pieces[0].second, 1, 0, 64, 512);
    CHECK(pieces[1].first == 1);
    check_fragment(pieces[1].second, 1, 64, 64, 0);
    CHECK(groups[0].data_in_partition(0) == 576);
    CHECK(groups[0].data_in_partition(1) == 576);
}

TEST_CASE("ds_optimizer_layout: padding to 2 x DP, on the last partition only") {
    // Parameters of 5, 7 and 3 elements over D = 3: 15 elements padded to 18 (a multiple of 6),
    // partitions of 6: [p0 0..5, p1 0..1] [p1 1..7] [p2 0..3, 3 zeros].
    const auto groups = ds_optimizer_layout({{{0, 1, 2}, true}}, {5, 7, 3}, 3);
    REQUIRE(groups.size() == 1);
    const auto& g = groups[0];
    CHECK(g.numel == 15);
    CHECK(g.padding == 3);
    CHECK(g.partition == 6);
    REQUIRE(g.fragments.size() == 3);
    REQUIRE(g.fragments[0].size() == 2);
    check_fragment(g.fragments[0][0], 0, 0, 5, 0);
    check_fragment(g.fragments[0][1], 1, 0, 1, 5);
    REQUIRE(g.fragments[1].size() == 1);
    check_fragment(g.fragments[1][0], 1, 1, 6, 0);
    REQUIRE(g.fragments[2].size() == 1);
    check_fragment(g.fragments[2][0], 2, 0, 3, 0);
    CHECK(g.data_in_partition(0) == 6);
    CHECK(g.data_in_partition(1) == 6);
    CHECK(g.data_in_partition(2) == 3);
    const auto pieces = g.pieces_of(2);
    REQUIRE(pieces.size() == 1);
    CHECK(pieces[0].first == 2);

    // An aligned group gets no padding: 12 elements over D = 3 (a multiple of 6).
    CHECK(ds_optimizer_layout({{{0, 1}, true}}, {5, 7}, 3)[0].padding == 0);
    // D = 1 still aligns to 2: 15 elements get one zero.
    const auto one = ds_optimizer_layout({{{0, 1, 2}, true}}, {5, 7, 3}, 1);
    CHECK(one[0].padding == 1);
    CHECK(one[0].partition == 16);
    CHECK(one[0].fragments[0].size() == 3);
}

TEST_CASE("ds_optimizer_layout: one parameter over every partition, empty groups, empty parameters") {
    // 20 elements over D = 4: padded to 24, four partitions of 6; the parameter's last piece is 2.
    const auto groups = ds_optimizer_layout({{{7}, true}, {{}, true}, {{3, 5}, false}}, {0, 0, 0, 0, 0, 4, 0, 20}, 4);
    REQUIRE(groups.size() == 3);
    const auto& big = groups[0];
    CHECK(big.padding == 4);
    CHECK(big.partition == 6);
    const auto pieces = big.pieces_of(0);
    REQUIRE(pieces.size() == 4);
    for (int r = 0; r < 4; ++r) {
        CHECK(pieces[static_cast<std::size_t>(r)].first == r);
        check_fragment(pieces[static_cast<std::size_t>(r)].second, 7, 6 * r, r == 3 ? 2 : 6, 0);
    }
    CHECK(big.data_in_partition(3) == 2);

    // The empty half of a three-group split: nothing, no padding, nothing on any rank.
    const auto& empty = groups[1];
    CHECK(empty.numel == 0);
    CHECK(empty.padding == 0);
    CHECK(empty.partition == 0);
    REQUIRE(empty.fragments.size() == 4);
    for (const auto& f : empty.fragments) CHECK(f.empty());

    // A parameter without elements (index 3) has no fragment; the 4 elements of index 5 pad to 8.
    const auto& small = groups[2];
    CHECK(small.offsets == std::vector<std::int64_t>{0, 0});
    CHECK(small.padding == 4);
    CHECK(small.partition == 2);
    CHECK(small.pieces_of(0).empty());
    REQUIRE(small.fragments[0].size() == 1);
    check_fragment(small.fragments[0][0], 5, 0, 2, 0);
    check_fragment(small.fragments[1][0], 5, 2, 2, 0);
    CHECK(small.fragments[2].empty());
    CHECK(small.fragments[3].empty());
    CHECK_FALSE(small.weight_decay);

    CHECK_THROWS_AS(ds_optimizer_layout({{{8}, true}}, {1}, 1), mds::Error);
    CHECK_THROWS_AS(ds_optimizer_layout({{{0}, true}}, {1}, 0), mds::Error);
}

TEST_CASE("ds_partitions_optimizer_states: ZeRO stage 1, or bf16 (the BF16 optimizer at stage 0)") {
    CHECK(ds_partitions_optimizer_states(1, false));
    CHECK(ds_partitions_optimizer_states(0, true));
    CHECK(ds_partitions_optimizer_states(1, true));
    CHECK_FALSE(ds_partitions_optimizer_states(0, false));
}
