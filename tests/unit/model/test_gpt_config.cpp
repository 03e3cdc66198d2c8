#include <doctest/doctest.h>

#include <cmath>

#include "mds/model/gpt_config.h"
#include "mds/util/error.h"

using namespace mds::model;

TEST_CASE("ALiBi slopes: powers of two and the interleaved extension") {
    // n = 8: 2^-1 … 2^-8.
    auto s8 = alibi_slopes(8);
    REQUIRE(s8.size() == 8);
    for (int i = 0; i < 8; ++i) CHECK(s8[static_cast<std::size_t>(i)] == doctest::Approx(std::pow(2.0, -(i + 1))));
    // n = 6: the 4-head slopes 2^-2, 2^-4, 2^-6, 2^-8, then odd powers of the 8-head ratio: 2^-1, 2^-3.
    auto s6 = alibi_slopes(6);
    const double expect[6] = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125};
    REQUIRE(s6.size() == 6);
    for (int i = 0; i < 6; ++i) CHECK(s6[static_cast<std::size_t>(i)] == doctest::Approx(expect[i]));
    CHECK(alibi_slopes(112).size() == 112);  // BLOOM-176B
}

TEST_CASE("model config validation names the flag") {
    GptConfig c;
    c.num_layers = 2;
    c.hidden_size = 64;
    c.ffn_hidden_size = 256;
    c.num_attention_heads = 5;
    c.seq_length = 32;
    c.max_position_embeddings = 32;
    c.padded_vocab_size = 128;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("--hidden-size 64 is not divisible by --num-attention-heads 5"),
                         mds::UsageError);
    c.num_attention_heads = 4;
    c.validate();
    c.max_position_embeddings = 16;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("--max-position-embeddings 16 is smaller than --seq-length 32"),
                         mds::UsageError);
    c.position_embedding = PositionEmbedding::Alibi;  // no position table: no limit
    c.validate();
}
