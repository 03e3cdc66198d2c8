// Megatron's num-microbatches calculators (mds/optim/batch_size_rampup.h).
#include <doctest/doctest.h>

#include "mds/optim/batch_size_rampup.h"
#include "mds/util/error.h"

using namespace mds::optim;

TEST_CASE("constant: gbs / (mbs * dp) micro batches") {
    NumMicroBatchesCalculator c(2048, 2, 16);
    CHECK(c.num_micro_batches() == 64);
    c.update(123456789);
    CHECK(c.current_global_batch_size() == 2048);
    CHECK(c.train_iters_for_samples(300'000'000) == 300'000'000 / 2048);
}

TEST_CASE("tr1-13B ramp-up 16 16 5_000_000 to 1024: 79365 samples per increment") {
    NumMicroBatchesCalculator c(1024, 1, 16, RampupBatchSize{16, 16, 5'000'000});
    CHECK(c.rampup_samples_per_increment() == doctest::Approx(5'000'000.0 / 63));
    CHECK(static_cast<long>(c.rampup_samples_per_increment()) == 79365);
    CHECK(c.current_global_batch_size() == 16);
    CHECK(c.num_micro_batches() == 1);
    CHECK(c.global_batch_size_at(79365) == 16);
    CHECK(c.global_batch_size_at(79366) == 32);
    CHECK(c.global_batch_size_at(2 * 79366) == 48);
    CHECK(c.global_batch_size_at(5'000'000) == 1024);  // int(63.0) steps at the very end
    CHECK(c.global_batch_size_at(5'000'001) == 1024);
    c.update(79366);
    CHECK(c.num_micro_batches() == 2);
    // The same flags with --global-batch-size 2048 (127 increments) ramp every 39370 samples.
    NumMicroBatchesCalculator d(2048, 1, 16, RampupBatchSize{16, 16, 5'000'000});
    CHECK(static_cast<long>(d.rampup_samples_per_increment()) == 39370);
}

TEST_CASE("train iterations with ramp-up walk the ramp, then divide by the final gbs") {
    NumMicroBatchesCalculator c(64, 1, 1, RampupBatchSize{16, 16, 96});  // 3 increments, 32 samples each
    // consumed 0:16 16:16 32:32 64:48 (int(64/32)=2) 112 > 96 stop: 4 iterations, 112 samples
    CHECK(c.train_iters_for_samples(1000) == 4 + (1000 - 112) / 64);
    CHECK(c.train_iters_for_samples(50) == 4 + (-62 - 63) / 64);  // Python floor division
}

TEST_CASE("save/load restores the ramp position") {
    NumMicroBatchesCalculator a(1024, 1, 16, RampupBatchSize{16, 16, 5'000'000});
    a.update(1'000'000);
    NumMicroBatchesCalculator b(1024, 1, 16, RampupBatchSize{16, 16, 5'000'000});
    b.load_state(a.state());
    CHECK(b.current_global_batch_size() == a.current_global_batch_size());
    CHECK(b.current_global_batch_size() == 16 + 12 * 16);
}

TEST_CASE("divisibility errors say which numbers would work") {
    CHECK_THROWS_WITH_AS(NumMicroBatchesCalculator(1000, 4, 8),
                         "--global-batch-size 1000 is not divisible by micro batch size 4 × data parallel size 8 = 32; "
                         "nearest that work: 992 or 1024; or keep it with --micro-batch-size one of 1, 5, 25, 125",
                         mds::UsageError);
    CHECK_THROWS_WITH_AS(NumMicroBatchesCalculator(8, 4, 4), doctest::Contains("nearest that work: 16"),
                         mds::UsageError);
    CHECK_THROWS_WITH_AS(NumMicroBatchesCalculator(1024, 1, 1, RampupBatchSize{16, 20, 1000}),
                         doctest::Contains("increments that work: 12, 14, 16, 18, 21, 24; or --global-batch-size "
                                           "1016 or 1036"),
                         mds::UsageError);
    CHECK_THROWS_AS(NumMicroBatchesCalculator(16, 1, 1, RampupBatchSize{16, 16, 1000}), mds::UsageError);
    CHECK_THROWS_AS(NumMicroBatchesCalculator(16, 1, 1, RampupBatchSize{32, 16, 1000}), mds::UsageError);
    CHECK_THROWS_AS(NumMicroBatchesCalculator(64, 1, 1, RampupBatchSize{16, 16, 0}), mds::UsageError);
}

// Megatron checks only the batch size in force at each update (microbatches.py consistency_check):
// BigScience ramped tr1-13B up on 16 nodes (DP 8) and resumed on 64 (DP 32) with the same flags.
TEST_CASE("ramp-up: start and increment need not divide by mbs x dp; the batch in force must") {
    // tr1-13B at 64 nodes: TP 2 x PP 4 -> DP 32, micro batch 1; 16 16 5_000_000 to 1024.
    NumMicroBatchesCalculator c(1024, 1, 32, RampupBatchSize{16, 16, 5'000'000});  // accepted, as Megatron does
    CHECK(c.current_global_batch_size() == 16);
    // From scratch the first step's batch 16 does not divide by 32: refused at the update.
    CHECK_THROWS_WITH_AS(c.update(0),
                         "global batch size 16 in force at 0 consumed samples is not divisible by micro batch size 1 × "
                         "data parallel size 32 = 32 (--rampup-batch-size 16 16 5000000); nearest that work: 32",
                         mds::UsageError);
    // Resumed at 2.6M consumed samples (batch 528 = 33 x 16): 528 is not a multiple of 32 either.
    CHECK_THROWS_AS(c.update(2'600'000), mds::UsageError);
    c.update(2'640'000);  // int(2640000 / 79365.08) = 33 steps: 16 + 33 x 16 = 544 = 17 x 32
    CHECK(c.current_global_batch_size() == 544);
    CHECK(c.num_micro_batches() == 17);
    c.update(5'000'001);
    CHECK(c.num_micro_batches() == 32);
}

TEST_CASE("ramp-up resumed past an indivisible start: every remaining batch size checked up front") {
    // 4 -> 16 in steps of 4 over 48 samples (16 samples per increment), micro batch 1, DP 8 at resume.
    NumMicroBatchesCalculator c(16, 1, 8, RampupBatchSize{4, 4, 48});
    // From 0 the run uses 4 (at 0, 4, 8, 12), 8 (16, 24), 12 (32, 44 -> 56 > 48), then 16: 4 does not divide by 8.
    const auto from_scratch = c.remaining_batch_sizes_problem(0, 0, 100);
    REQUIRE(from_scratch);
    CHECK(*from_scratch ==
          "--rampup-batch-size 4 4 48: global batch size 4, reached at 0 consumed samples (iteration 1), is not "
          "divisible by micro batch size 1 × data parallel size 8 = 8: Megatron checks the batch size in force at "
          "every step and would stop the run there. From 0 consumed samples to its end the run uses global batch "
          "sizes 4 to 16, all multiples of 4: use a micro batch size × data parallel size dividing 4, or ramp up on "
          "fewer data-parallel ranks and resume on these from 56 consumed samples on, where every batch size is "
          "divisible by 8");
    CHECK_THROWS_WITH_AS(c.check_remaining_batch_sizes(0, 0, 100), doctest::Contains("resume on these from 56"),
                         mds::UsageError);
    // Resumed at iteration 7 with 56 consumed samples (the ramp ran on DP 4 or less): only 16 remains.
    CHECK_FALSE(c.remaining_batch_sizes_problem(56, 7, 100));
    CHECK_NOTHROW(c.check_remaining_batch_sizes(56, 7, 100));
    c.update(56);
    CHECK(c.num_micro_batches() == 2);
    // Resumed at 16 (batch 8, then 8, 12 ...): 12 at 32 consumed samples is the first that fails, hours
    // later in a real run, and is named now with where the run would reach it.
    CHECK_THROWS_WITH_AS(c.check_remaining_batch_sizes(16, 4, 100),
                         doctest::Contains("global batch size 12, reached at 32 consumed samples (iteration 7)"),
                         mds::UsageError);
    // A run that ends before reaching 12 never uses it: accepted, as Megatron would run it.
    CHECK_NOTHROW(c.check_remaining_batch_sizes(16, 4, 6));
}

TEST_CASE("ramp-up: an indivisible final global batch size is refused only where the run reaches it") {
    NumMicroBatchesCalculator c(20, 1, 8, RampupBatchSize{8, 4, 24});  // 8, 12, 16, 20
    CHECK_NOTHROW(c.check_remaining_batch_sizes(0, 0, 1));  // one step at batch 8
    CHECK_THROWS_WITH_AS(c.check_remaining_batch_sizes(0, 0, 100),
                         doctest::Contains("the global batch size 20 the ramp-up ends at is not divisible either; "
                                           "nearest that work: 16 or 24"),
                         mds::UsageError);
    CHECK_THROWS_WITH_AS(NumMicroBatchesCalculator(20, 1, 8), doctest::Contains("--global-batch-size 20 is not divisible"),
                         mds::UsageError);
}
