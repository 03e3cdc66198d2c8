// mds's absolute exits (--exit-iteration, --exit-samples) in the stop decision, and a
// --save-interval schedule in the checkpoint's args Namespace (BMD reads save_interval as an int).
#include <doctest/doctest.h>

// After doctest: LibTorch defines its own CHECK (glog style), so this file spells DOCTEST_CHECK.
#include <csignal>
#include <string>
#include <vector>

#include "../../../libcore/src/trainer/megatron_args.h"  // private to the trainer area
#include "mds/flags/train_args.h"
#include "mds/model/gpt_model.h"
#include "mds/trainer/stop_conditions.h"
#include "tiny_gpt.h"
#include "train_flags_support.h"

using namespace mds::trainer;

TEST_CASE("should_stop: --exit-iteration stops at that iteration and after it, before the end") {
    mds::flags::ExitArgs exit;
    exit.exit_iteration = 7;
    const StopInputs quiet;
    DOCTEST_CHECK(should_stop(exit, 6, 24, 20, quiet) == Stop::Continue);
    DOCTEST_CHECK(should_stop(exit, 7, 28, 20, quiet) == Stop::ExitIteration);
    DOCTEST_CHECK(should_stop(exit, 9, 36, 20, quiet) == Stop::ExitIteration);
    exit.exit_iteration = 20;  // on the last iteration: an exit, no end-of-training validation (as --exit-interval)
    DOCTEST_CHECK(should_stop(exit, 20, 80, 20, quiet) == Stop::ExitIteration);
    DOCTEST_CHECK(stop_reason(Stop::ExitIteration, quiet) == "exit iteration");
    exit.exit_iteration = 30;  // past the end: the end comes first
    DOCTEST_CHECK(should_stop(exit, 20, 80, 20, quiet) == Stop::Finished);
}

TEST_CASE("should_stop: --exit-samples stops after the first iteration whose consumed samples reach it") {
    mds::flags::ExitArgs exit;
    exit.exit_samples = 10;
    const StopInputs quiet;
    DOCTEST_CHECK(should_stop(exit, 2, 9, 100, quiet) == Stop::Continue);
    DOCTEST_CHECK(should_stop(exit, 3, 10, 100, quiet) == Stop::ExitSamples);  // reached exactly
    DOCTEST_CHECK(should_stop(exit, 3, 12, 100, quiet) == Stop::ExitSamples);  // passed within one batch
    DOCTEST_CHECK(stop_reason(Stop::ExitSamples, quiet) == "exit samples");
    exit.exit_iteration = 3;  // both at once: the iteration is checked first
    DOCTEST_CHECK(should_stop(exit, 3, 12, 100, quiet) == Stop::ExitIteration);
}

TEST_CASE("should_stop: the absolute exits come after signal, kill switch, duration and interval") {
    mds::flags::ExitArgs exit;
    exit.exit_iteration = 1;
    exit.exit_samples = 1;
    StopInputs in;
    DOCTEST_CHECK(should_stop(exit, 4, 16, 10, in) == Stop::ExitIteration);
    exit.exit_interval = 4;
    DOCTEST_CHECK(should_stop(exit, 4, 16, 10, in) == Stop::ExitInterval);
    exit.exit_duration_in_mins = 1;
    in.minutes = 2;
    DOCTEST_CHECK(should_stop(exit, 4, 16, 10, in) == Stop::ExitDuration);
    in.kill_switch = true;
    DOCTEST_CHECK(should_stop(exit, 4, 16, 10, in) == Stop::KillSwitch);
    in.signal = SIGUSR1;
    DOCTEST_CHECK(should_stop(exit, 4, 16, 10, in) == Stop::Signal);
}

TEST_CASE("exit_point_reached: a run resumed at or past an absolute exit has nothing to train") {
    mds::flags::ExitArgs exit;
    DOCTEST_CHECK(exit_point_reached(exit, 100, 400) == Stop::Continue);  // no exit flags
    exit.exit_iteration = 7;
    DOCTEST_CHECK(exit_point_reached(exit, 0, 0) == Stop::Continue);
    DOCTEST_CHECK(exit_point_reached(exit, 6, 24) == Stop::Continue);
    DOCTEST_CHECK(exit_point_reached(exit, 7, 28) == Stop::ExitIteration);
    DOCTEST_CHECK(exit_point_reached(exit, 8, 32) == Stop::ExitIteration);
    exit.exit_iteration.reset();
    exit.exit_samples = 30;
    DOCTEST_CHECK(exit_point_reached(exit, 7, 28) == Stop::Continue);
    DOCTEST_CHECK(exit_point_reached(exit, 8, 32) == Stop::ExitSamples);
}

namespace {

// repr() of the Namespace's save_interval in a checkpoint saved at `iteration`.
std::string saved_interval(const mds::flags::TrainArgs& args, std::int64_t iteration) {
    const mds::model::GptModel model(tiny_gpt(false), c10::Device(at::kCPU), 42);
    TrainingProgress p;
    p.iteration = iteration;
    p.consumed_train_samples = 4 * iteration;
    p.train_iters = 20;
    const auto ns = megatron_args(args, model, p);
    for (const auto& [key, value] : ns.namespace_attributes().items())
        if (key.as_str() == "save_interval") return value.repr();
    return "(missing)";
}

}  // namespace

TEST_CASE("megatron_args: save_interval is the int in effect at the saved iteration, None outside every range") {
    const std::vector<std::string> base{"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                        "--seq-length", "64", "--max-position-embeddings", "64", "--train-iters", "20",
                                        "--lr", "1e-3", "--save", "/c"};
    auto with = [&](const std::string& schedule) {
        auto argv = base;
        argv.insert(argv.end(), {"--save-interval", schedule});
        return mds::trainer_test::parse_train_flags(argv);
    };
    const auto plain = with("5");
    DOCTEST_CHECK(saved_interval(plain, 5) == "5");
    DOCTEST_CHECK(saved_interval(plain, 7) == "5");  // an exit's save between two periodic ones
    const auto schedule = with("2@1-6,3@7-12,5");
    DOCTEST_CHECK(saved_interval(schedule, 4) == "2");
    DOCTEST_CHECK(saved_interval(schedule, 9) == "3");
    DOCTEST_CHECK(saved_interval(schedule, 15) == "5");
    const auto ranges_only = with("2@1-6");
    DOCTEST_CHECK(saved_interval(ranges_only, 6) == "2");
    DOCTEST_CHECK(saved_interval(ranges_only, 20) == "None");  // the end-of-training save outside every range
}
