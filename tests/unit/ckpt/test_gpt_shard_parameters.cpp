// Parameters per tensor-parallel rank of GPTModelPipe's pieces (mds/ckpt/partition.h
// gpt_shard_parameters), worked out by hand from the tensor shapes of Megatron's split.
#include <doctest/doctest.h>

#include <cstdint>

#include "mds/ckpt/partition.h"

using namespace mds::ckpt;

TEST_CASE("gpt_shard_parameters: tr1-13B at TP 2 (h 5120, f 20480, V 50432, 2048 positions)") {
    const auto n = gpt_shard_parameters(5120, 20480, 50432, 2048, false, 2);
    // Split: QKV 3h² + 3h, dense h², h→4h h·f + f, 4h→h f·h = 314,608,640, halved; whole: dense
    // bias, 4h→h bias and two LayerNorms, 6h = 30,720.
    CHECK(n.block == 157'304'320 + 30'720);
    // V·h / 2 + P·h.
    CHECK(n.embedding == 129'105'920 + 10'485'760);
    CHECK(n.final_norm == 10'240);
    // At TP 1 a block is 12h² + 13h.
    const auto one = gpt_shard_parameters(5120, 20480, 50432, 2048, false, 1);
    CHECK(one.block == 12 * 5120LL * 5120 + 13 * 5120);
    CHECK(one.embedding == 50432LL * 5120 + 2048LL * 5120);
}

TEST_CASE("gpt_shard_parameters: BLOOM-style (ALiBi, embedding LayerNorm) at TP 4, tensor by tensor") {
    // h 64, f 256, V 1024, t 4. Per rank: input LayerNorm 2·64, QKV (3·64/4)·64 + 3·64/4 = 3120,
    // dense 64·64/4 + 64 = 1088, post-attention LayerNorm 128, h→4h 64·64 + 64 = 4160,
    // 4h→h 64·64 + 64 = 4160: 12,784.
    const auto n = gpt_shard_parameters(64, 256, 1024, 0, true, 4);
    CHECK(n.block == 128 + 3120 + 1088 + 128 + 4160 + 4160);
    // Word embeddings 256 rows × 64, embedding LayerNorm 128, no position table.
    CHECK(n.embedding == 256 * 64 + 128);
    CHECK(n.final_norm == 128);
}
