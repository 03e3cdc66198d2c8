#include <doctest/doctest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "mds/ckpt/tp_reshard.h"
#include "mds/util/error.h"

using namespace mds::ckpt;

namespace {

std::vector<float> iota_floats(std::size_t n) {
    std::vector<float> v(n);
    std::iota(v.begin(), v.end(), 0.0f);
    return v;
}

std::vector<float> shard_floats(const TpLayout& l, const std::vector<float>& g, const std::vector<std::int64_t>& shape, int tp, int r) {
    const auto bytes = tp_shard(l, std::as_bytes(std::span<const float>(g)), shape, 4, tp, r);
    std::vector<float> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
}

}  // namespace

TEST_CASE("TP layouts by parameter name") {
    CHECK(tp_layout("word_embeddings.weight", false).rule == TpRule::ColumnParallel);
    CHECK(tp_layout("self_attention.dense.weight", false).rule == TpRule::RowParallel);
    CHECK(tp_layout("self_attention.dense.bias", false).rule == TpRule::Replicated);
    CHECK(tp_layout("mlp.dense_h_to_4h.weight", true).sub_params == 2);
    CHECK(tp_layout("mlp.dense_h_to_4h.weight", false).sub_params == 1);
    CHECK(tp_layout("mlp.dense_4h_to_h.weight", true).sub_params == 1);
    CHECK(tp_shard_shape(tp_layout("mlp.dense_4h_to_h.weight", false), {8, 32}, 4, "x") == std::vector<std::int64_t>{8, 8});
    CHECK(tp_shard_shape(tp_layout("input_layernorm.weight", false), {8}, 4, "x") == std::vector<std::int64_t>{8});
    CHECK_THROWS_WITH_AS(tp_shard_shape(tp_layout("mlp.dense_h_to_4h.weight", true), {12, 8}, 4, "layer_03: h4h"),
                         doctest::Contains("layer_03: h4h"), mds::Error);  // 6 rows per GLU half do not split 4 ways
}

TEST_CASE("split then merge gives the global tensor back, for every rule") {
    const std::vector<std::int64_t> shape{8, 6};
    const auto g = iota_floats(48);
    for (const char* name : {"self_attention.query_key_value.weight", "self_attention.dense.weight", "mlp.dense_h_to_4h.weight"})
        for (int tp : {1, 2, 4}) {
            const auto l = tp_layout(name, true);
            std::vector<std::vector<float>> slices;
            for (int r = 0; r < tp; ++r) slices.push_back(shard_floats(l, g, shape, tp, r));
            if (l.rule == TpRule::RowParallel && tp == 4) continue;  // 6 columns do not split 4 ways
            CHECK(tp_merge_fp32(l, slices, tp_shard_shape(l, shape, tp, name)) == g);
        }
    // Dim 1: rank 1 of 2 holds columns 3..5 of every row.
    CHECK(shard_floats(tp_layout("mlp.dense_4h_to_h.weight", false), iota_floats(12), {2, 6}, 2, 1) == std::vector<float>{3, 4, 5, 9, 10, 11});
    // GLU: rank r of 2 holds [A_r; B_r] of the global [A; B].
    CHECK(shard_floats(tp_layout("mlp.dense_h_to_4h.bias", true), iota_floats(8), {8}, 2, 1) == std::vector<float>{2, 3, 6, 7});
}

TEST_CASE("replicated slices: equal ones come back bit for bit, differing ones are averaged in fp32") {
    const auto l = tp_layout("input_layernorm.weight", false);
    const std::vector<float> a{0.1f, 0.2f, 0.3f};
    CHECK(tp_merge_fp32(l, {a, a, a}, {3}) == a);
    const auto m = tp_merge_fp32(l, {a, {0.3f, 0.2f, 0.1f}}, {3});
    CHECK(m == std::vector<float>{(0.1f + 0.3f) / 2, (0.2f + 0.2f) / 2, (0.3f + 0.1f) / 2});
}

TEST_CASE("GLU rows of a plain concatenation are regrouped into [A; B]") {
    // 2 ranks, 2 rows per half: [A0 A0 B0 B0 A1 A1 B1 B1] -> [A0 A0 A1 A1 B0 B0 B1 B1]
    std::vector<std::byte> rows(8);
    const unsigned char in[] = {0, 1, 10, 11, 2, 3, 12, 13};
    for (int i = 0; i < 8; ++i) rows[static_cast<std::size_t>(i)] = std::byte{in[i]};
    glu_rows_to_global(rows, 8, 1, 2);
    const unsigned char want[] = {0, 1, 2, 3, 10, 11, 12, 13};
    for (int i = 0; i < 8; ++i) CHECK(rows[static_cast<std::size_t>(i)] == std::byte{want[i]});
}

TEST_CASE("fused QKV rows move to the [heads, 3, d] order of checkpoint_version 2") {
    // 2 heads, d = 1: version 0 stores [3, np, d] = q0 q1 k0 k1 v0 v1; version 1.0 [np, d, 3] = q0 k0 v0 q1 k1 v1.
    auto to_bytes = [](std::vector<unsigned char> v) {
        std::vector<std::byte> b;
        for (auto x : v) b.push_back(std::byte{x});
        return b;
    };
    const auto want = to_bytes({0, 1, 2, 10, 11, 12});  // q0 k0 v0 q1 k1 v1 as head*10 + c
    auto v0 = to_bytes({0, 10, 1, 11, 2, 12});
    qkv_rows_to_v2(v0, 2, 1, 0.0);
    CHECK(v0 == want);
    auto v1 = to_bytes({0, 1, 2, 10, 11, 12});
    qkv_rows_to_v2(v1, 2, 1, 1.0);
    CHECK(v1 == want);
    auto v3 = to_bytes({5, 4, 3, 2, 1, 0});
    qkv_rows_to_v2(v3, 2, 1, 3.0);
    CHECK(v3 == to_bytes({5, 4, 3, 2, 1, 0}));
}

TEST_CASE("vocabulary padding follows Megatron's rule and re-pads with zeros") {
    CHECK(padded_vocab_size(50257, 128, 1, 0) == 50304);
    CHECK(padded_vocab_size(50257, 128, 4, 0) == 50688);
    CHECK(padded_vocab_size(250680, 128, 4, 250880) == 250880);
    CHECK_THROWS_AS(padded_vocab_size(300, 128, 1, 256), mds::Error);
    std::vector<std::byte> data(6 * 2, std::byte{7});  // 6 rows of 2 bytes
    std::vector<std::int64_t> shape{6, 2};
    repad_vocab_rows(data, shape, 2, 4, 8);
    CHECK(shape[0] == 8);
    REQUIRE(data.size() == 16);
    for (std::size_t i = 0; i < 16; ++i) CHECK(data[i] == (i < 8 ? std::byte{7} : std::byte{0}));
    repad_vocab_rows(data, shape, 2, 3, 4);
    CHECK(shape[0] == 4);
    CHECK(data.size() == 8);
    CHECK(data[5] == std::byte{7});
    CHECK(data[6] == std::byte{0});
}
