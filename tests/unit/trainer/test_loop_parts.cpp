#include <doctest/doctest.h>

// After doctest: LibTorch defines its own CHECK (glog style), so this file spells DOCTEST_CHECK.
#include <ATen/ATen.h>

#include <csignal>

#include "mds/flags/train_args.h"
#include "mds/trainer/comm.h"
#include "mds/trainer/micro_batches.h"
#include "mds/trainer/stop_conditions.h"
#include "mds/util/error.h"

using namespace mds::trainer;

TEST_CASE("should_stop: the end of the iterations (--train-iters, or --train-samples as iterations)") {
    const mds::flags::ExitArgs exit;  // no exit flags
    const StopInputs quiet;
    DOCTEST_CHECK(should_stop(exit, 1, 4 * 1, 3, quiet) == Stop::Continue);
    DOCTEST_CHECK(should_stop(exit, 2, 4 * 2, 3, quiet) == Stop::Continue);
    DOCTEST_CHECK(should_stop(exit, 3, 4 * 3, 3, quiet) == Stop::Finished);
    DOCTEST_CHECK(should_stop(exit, 5, 4 * 5, 3, quiet) == Stop::Finished);  // resumed past the end
    DOCTEST_CHECK(stop_reason(Stop::Finished, quiet) == "finished");
    DOCTEST_CHECK(stop_reason(Stop::Continue, quiet).empty());
}

TEST_CASE("should_stop: --exit-interval, counted on the iteration number, wins over the end") {
    mds::flags::ExitArgs exit;
    exit.exit_interval = 4;
    const StopInputs quiet;
    DOCTEST_CHECK(should_stop(exit, 3, 4 * 3, 10, quiet) == Stop::Continue);
    DOCTEST_CHECK(should_stop(exit, 4, 4 * 4, 10, quiet) == Stop::ExitInterval);
    DOCTEST_CHECK(should_stop(exit, 8, 4 * 8, 10, quiet) == Stop::ExitInterval);
    DOCTEST_CHECK(should_stop(exit, 8, 4 * 8, 8, quiet) == Stop::ExitInterval);  // no final validation then
    DOCTEST_CHECK(stop_reason(Stop::ExitInterval, quiet) == "exit interval");
    exit.exit_interval = 0;  // 0: off
    DOCTEST_CHECK(should_stop(exit, 4, 4 * 4, 10, quiet) == Stop::Continue);
}

TEST_CASE("should_stop: --exit-duration-in-mins once the minutes exceed it") {
    mds::flags::ExitArgs exit;
    exit.exit_duration_in_mins = 2;
    StopInputs in;
    in.minutes = 2.0;
    DOCTEST_CHECK(should_stop(exit, 1, 4 * 1, 10, in) == Stop::Continue);
    in.minutes = 2.01;
    DOCTEST_CHECK(should_stop(exit, 1, 4 * 1, 10, in) == Stop::ExitDuration);
    DOCTEST_CHECK(stop_reason(Stop::ExitDuration, in) == "exit duration");
}

TEST_CASE("should_stop: signal first, then kill switch, duration, interval (Megatron's order)") {
    mds::flags::ExitArgs exit;
    exit.exit_interval = 1;
    exit.exit_duration_in_mins = 0;
    exit.kill_switch_path = "/nonexistent";
    StopInputs in;
    in.minutes = 5;
    DOCTEST_CHECK(should_stop(exit, 1, 4 * 1, 10, in) == Stop::ExitDuration);
    in.kill_switch = true;
    DOCTEST_CHECK(should_stop(exit, 1, 4 * 1, 10, in) == Stop::KillSwitch);
    DOCTEST_CHECK(stop_reason(Stop::KillSwitch, in) == "kill switch");
    in.signal = SIGUSR1;
    DOCTEST_CHECK(should_stop(exit, 1, 4 * 1, 10, in) == Stop::Signal);
    DOCTEST_CHECK(stop_reason(Stop::Signal, in) == "SIGUSR1");
    in.signal = SIGTERM;
    DOCTEST_CHECK(stop_reason(Stop::Signal, in) == "SIGTERM");
}

TEST_CASE("agree_on_stop on one process keeps what this rank saw") {
    const auto comm = Communicator::single_process();
    StopInputs mine;
    mine.signal = SIGINT;
    mine.kill_switch = true;
    mine.minutes = 1.0 / 3.0;
    const auto agreed = agree_on_stop(mine, *comm);
    DOCTEST_CHECK(agreed.signal == SIGINT);
    DOCTEST_CHECK(agreed.kill_switch);
    DOCTEST_CHECK(agreed.minutes == mine.minutes);
    const auto none = agree_on_stop(StopInputs{}, *comm);
    DOCTEST_CHECK(none.signal == 0);
    DOCTEST_CHECK(!none.kill_switch);
}

TEST_CASE("micro batches: Megatron's pretraining sampler's slice per data-parallel rank") {
    // Global batch at sample 100, mbs 2, DP 3: micro batch j covers [100 + 6j, 106 + 6j); rank r takes 2 from 100 + 6j + 2r.
    DOCTEST_CHECK(micro_batch_first_sample(100, 0, 2, 3, 0) == 100);
    DOCTEST_CHECK(micro_batch_first_sample(100, 0, 2, 3, 2) == 104);
    DOCTEST_CHECK(micro_batch_first_sample(100, 1, 2, 3, 0) == 106);
    DOCTEST_CHECK(micro_batch_first_sample(100, 3, 2, 3, 1) == 120);
    // One process: consecutive micro batches.
    DOCTEST_CHECK(micro_batch_first_sample(7, 2, 4, 1, 0) == 15);
}

TEST_CASE("micro batches: [mbs, seq + 1] tokens, tokens and labels shifted by one, cut to the curriculum length") {
    // Sample n is n*10, n*10 + 1, ... (seq + 1 = 5 tokens).
    const Sampler sample = [](std::int64_t n) {
        std::vector<std::int64_t> s;
        for (std::int64_t i = 0; i < 5; ++i) s.push_back(n * 10 + i);
        return s;
    };
    const auto b = micro_batch(sample, 3, 2, 4, at::kCPU);
    REQUIRE(b.dim() == 2);
    REQUIRE(b.size(0) == 2);
    REQUIRE(b.size(1) == 5);
    DOCTEST_CHECK((b.scalar_type() == at::kLong));
    DOCTEST_CHECK(b[0][0].item<std::int64_t>() == 30);
    DOCTEST_CHECK(b[1][4].item<std::int64_t>() == 44);
    const auto [tokens, labels] = tokens_and_labels(b, 4);
    DOCTEST_CHECK(tokens.equal(b.narrow(1, 0, 4)));
    DOCTEST_CHECK(labels[0][0].item<std::int64_t>() == 31);
    DOCTEST_CHECK(labels[1][3].item<std::int64_t>() == 44);
    const auto [short_tokens, short_labels] = tokens_and_labels(b, 2);
    DOCTEST_CHECK(short_tokens.size(0) == 2);
    DOCTEST_CHECK(short_tokens.size(1) == 2);
    DOCTEST_CHECK(short_labels[1][1].item<std::int64_t>() == 42);
    // A sample of another length names itself.
    DOCTEST_CHECK_THROWS_WITH_AS(micro_batch(sample, 0, 1, 6, at::kCPU), "sample 0 has 5 tokens, expected 7", mds::Error);
}
