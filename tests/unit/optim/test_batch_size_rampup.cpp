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
    CHECK_THROWS_WITH_AS(NumMicroBatchesCalculator(1024, 2, 16, RampupBatchSize{16, 16, 1000}),
                         doctest::Contains("start batch size 16 is not divisible by micro batch size 2 × data "
                                           "parallel size 16 = 32; nearest that work: 32"),
                         mds::UsageError);
    CHECK_THROWS_WITH_AS(NumMicroBatchesCalculator(1024, 1, 32, RampupBatchSize{32, 16, 1000}),
                         doctest::Contains("increment 16 is not divisible"), mds::UsageError);
    CHECK_THROWS_AS(NumMicroBatchesCalculator(16, 1, 1, RampupBatchSize{16, 16, 1000}), mds::UsageError);
    CHECK_THROWS_AS(NumMicroBatchesCalculator(16, 1, 1, RampupBatchSize{32, 16, 1000}), mds::UsageError);
    CHECK_THROWS_AS(NumMicroBatchesCalculator(64, 1, 1, RampupBatchSize{16, 16, 0}), mds::UsageError);
}
