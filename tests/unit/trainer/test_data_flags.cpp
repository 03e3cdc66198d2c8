// Issue 18's data flags on the trainer side: --dataloader-type's two samplers (Megatron's
// MegatronPretrainingSampler and MegatronPretrainingRandomSampler, megatron/data/data_samplers.py)
// and --eod-mask-loss's loss mask (get_ltor_masks_and_position_ids). The permutations below are
// torch 2.11's: torch.randperm(10, generator=torch.Generator().manual_seed(e)) for e = 0, 1.
#include <doctest/doctest.h>

// After doctest: LibTorch defines its own CHECK (glog style), so this file spells DOCTEST_CHECK.
#include <ATen/ATen.h>

#include <vector>

#include "mds/trainer/micro_batches.h"
#include "mds/util/error.h"

using namespace mds::trainer;
using Ids = std::vector<std::int64_t>;

TEST_CASE("single sampler: rank r of micro batch at position p takes [p + r·mbs, + mbs)") {
    const PretrainingSampler r0(DataloaderType::Single, 100, 2, 3, 0), r2(DataloaderType::Single, 100, 2, 3, 2);
    DOCTEST_CHECK(r0.micro_batch(0) == Ids{0, 1});
    DOCTEST_CHECK(r2.micro_batch(0) == Ids{4, 5});
    DOCTEST_CHECK(r2.micro_batch(18) == Ids{22, 23});
    // The same as micro_batch_first_sample (the trainer's older arithmetic).
    DOCTEST_CHECK(r2.micro_batch(100 + 3 * 6)[0] == micro_batch_first_sample(100, 3, 2, 3, 2));
}

TEST_CASE("cyclic sampler: per-rank buckets shuffled with torch.randperm seeded by the epoch") {
    // 21 samples, mbs 2, DP 2: 20 used per epoch (the last 21 % 4 dropped), buckets of 10: rank 0 [0, 10),
    // rank 1 [10, 20). Epoch 0's permutation (seed 0): 4 1 7 5 3 9 0 8 6 2; epoch 1's (seed 1): 5 6 1 2 0 8 9 3 7 4.
    const PretrainingSampler r0(DataloaderType::Cyclic, 21, 2, 2, 0), r1(DataloaderType::Cyclic, 21, 2, 2, 1);
    DOCTEST_CHECK(r0.micro_batch(0) == Ids{4, 1});
    DOCTEST_CHECK(r1.micro_batch(0) == Ids{14, 11});
    DOCTEST_CHECK(r0.micro_batch(4) == Ids{7, 5});  // position 4 = offset 2 in the bucket
    DOCTEST_CHECK(r1.micro_batch(16) == Ids{16, 12});
    // Position 20 starts epoch 1; a resume in the middle of it lands on the same entries.
    DOCTEST_CHECK(r0.micro_batch(20) == Ids{5, 6});
    DOCTEST_CHECK(r1.micro_batch(24) == Ids{11, 12});
    const PretrainingSampler fresh(DataloaderType::Cyclic, 21, 2, 2, 1);
    DOCTEST_CHECK(fresh.micro_batch(24) == Ids{11, 12});
    // Back to epoch 0 after 1 (the cache follows the epoch asked for).
    DOCTEST_CHECK(r0.micro_batch(8) == Ids{3, 9});
    // Fewer samples than one micro batch per rank: an error naming the flag.
    DOCTEST_CHECK_THROWS_WITH_AS(PretrainingSampler(DataloaderType::Cyclic, 3, 2, 2, 0),
                                 doctest::Contains("--dataloader-type cyclic"), mds::UsageError);
    DOCTEST_CHECK(dataloader_type("cyclic") == DataloaderType::Cyclic);
    DOCTEST_CHECK_THROWS_AS(dataloader_type("random"), mds::UsageError);
}

TEST_CASE("--eod-mask-loss: 0 where the input token is EOD, cut with the curriculum length") {
    // Two samples of 6 tokens (seq 5); EOD id 0 at input positions 2 and 4 of the first, position 0 of the second,
    // and as the last LABEL of the second (not masked: BMD masks the tokens).
    const auto batch = at::tensor(std::vector<std::int64_t>{5, 6, 0, 7, 0, 8, 0, 3, 4, 5, 6, 0}, at::kLong).view({2, 6});
    const auto in = micro_batch_inputs(batch, 5, std::int64_t{0});
    REQUIRE(in.loss_mask.defined());
    DOCTEST_CHECK((in.loss_mask.scalar_type() == at::kFloat));
    const auto want = at::tensor(std::vector<float>{1, 1, 0, 1, 0, 0, 1, 1, 1, 1}).view({2, 5});
    DOCTEST_CHECK(in.loss_mask.equal(want));
    DOCTEST_CHECK(in.labels[1][4].item<std::int64_t>() == 0);
    const auto cut = micro_batch_inputs(batch, 3, std::int64_t{0});
    DOCTEST_CHECK(cut.loss_mask.equal(want.narrow(1, 0, 3)));
    // Without the flag no mask: every position counts (the model's unmasked mean).
    DOCTEST_CHECK(!micro_batch_inputs(batch, 5, std::nullopt).loss_mask.defined());
    // micro_batch from explicit ids (the sampler's).
    const Sampler sample = [](std::int64_t n) { return std::vector<std::int64_t>(3, n); };
    const auto b = micro_batch(sample, Ids{7, 2}, 2, at::kCPU);
    DOCTEST_CHECK(b[0][0].item<std::int64_t>() == 7);
    DOCTEST_CHECK(b[1][2].item<std::int64_t>() == 2);
}

TEST_CASE("--reset-position-ids: positions restart after each EOD token, cut with the curriculum length") {
    // The batch above: EOD id 0 at input positions 2 and 4 of the first sample, 0 of the second (two EODs in a
    // row restart twice; the EOD keeps its document's count).
    const auto batch = at::tensor(std::vector<std::int64_t>{5, 6, 0, 7, 0, 8, 0, 3, 4, 5, 6, 0}, at::kLong).view({2, 6});
    const auto in = micro_batch_inputs(batch, 5, std::nullopt, std::int64_t{0});
    REQUIRE(in.position_ids.defined());
    DOCTEST_CHECK((in.position_ids.scalar_type() == at::kLong));
    const auto want = at::tensor(std::vector<std::int64_t>{0, 1, 2, 0, 1, 0, 0, 1, 2, 3}, at::kLong).view({2, 5});
    DOCTEST_CHECK(in.position_ids.equal(want));
    DOCTEST_CHECK(!in.loss_mask.defined());
    DOCTEST_CHECK(micro_batch_inputs(batch, 3, std::nullopt, std::int64_t{0}).position_ids.equal(want.narrow(1, 0, 3)));
    // Without the flag: undefined (the model's 0 … s-1); the same ids as ltor_masks_and_position_ids'.
    DOCTEST_CHECK(!micro_batch_inputs(batch, 5, std::int64_t{0}).position_ids.defined());
    DOCTEST_CHECK(ltor_masks_and_position_ids(in.tokens, 0, true, false).position_ids.equal(want));
}

// --sft: a packed row [6 7 8 | 3 4 5 | pad] (prompt 6 7, answer 8; prompt 3 4, answer 5), seq 6.
TEST_CASE("sft batch: positions restart per example, the loss stays inside examples (answers only on request)") {
    mds::data::PackedSample row;
    row.tokens = {6, 7, 8, 3, 4, 5, 0};
    row.segment_ids = {1, 1, 1, 2, 2, 2, 0};
    row.is_input = {1, 1, 0, 1, 1, 0, 0};
    SftBatchOptions all;
    auto in = sft_micro_batch_inputs({row}, 6, 6, all, at::kCPU);
    const auto ids = [](const at::Tensor& t) { return Ids(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + t.numel()); };
    const auto floats = [](const at::Tensor& t) { return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel()); };
    DOCTEST_CHECK(ids(in.tokens) == Ids{6, 7, 8, 3, 4, 5});
    DOCTEST_CHECK(ids(in.labels) == Ids{7, 8, 3, 4, 5, 0});
    DOCTEST_CHECK(ids(in.position_ids) == Ids{0, 1, 2, 0, 1, 2});
    DOCTEST_CHECK(ids(in.segment_ids) == Ids{1, 1, 1, 2, 2, 2});
    // 8 -> 3 crosses into the next example, 5 -> pad into padding: never counted.
    DOCTEST_CHECK(floats(in.loss_mask) == std::vector<float>{1, 1, 0, 1, 1, 0});
    SftBatchOptions targets;
    targets.loss_on_targets_only = true;
    DOCTEST_CHECK(floats(sft_micro_batch_inputs({row}, 6, 6, targets, at::kCPU).loss_mask) == std::vector<float>{0, 1, 0, 0, 1, 0});
    SftBatchOptions eod;
    eod.eod_mask_id = 7;  // no loss where the input token is 7
    DOCTEST_CHECK(floats(sft_micro_batch_inputs({row}, 6, 6, eod, at::kCPU).loss_mask) == std::vector<float>{1, 0, 0, 1, 1, 0});
    // The curriculum's shorter length cuts every field alike.
    auto cut = sft_micro_batch_inputs({row}, 6, 4, all, at::kCPU);
    DOCTEST_CHECK(ids(cut.labels) == Ids{7, 8, 3, 4});
    DOCTEST_CHECK(ids(cut.position_ids) == Ids{0, 1, 2, 0});
    // A row of another length is an error naming the lengths.
    row.is_input.pop_back();
    DOCTEST_CHECK_THROWS_WITH_AS(sft_micro_batch_inputs({row}, 6, 6, all, at::kCPU), doctest::Contains("expected 7 of each"),
                                 mds::Error);
}
