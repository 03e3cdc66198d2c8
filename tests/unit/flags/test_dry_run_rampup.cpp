// mds-train --dry-run with a batch-size ramp-up whose start does not divide by micro batch × DP:
// Megatron checks only the batch size in force, so tr1-13B's "16 16 5_000_000" ramps up on 16 nodes
// (DP 8) and resumes on 64 (DP 32). The plan is made, and says where a from-scratch run would stop.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mds/flags/dry_run.h"
#include "mds/flags/train_args.h"

using namespace mds::flags;

namespace {

DryRunReport plan_tr1(std::int64_t gpus) {
    std::vector<std::string> argv = {
        "mds-train", "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "4", "--num-layers", "40",
        "--hidden-size", "5120", "--ffn-hidden-size", "20480", "--num-attention-heads", "32", "--seq-length", "2048",
        "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--rampup-batch-size", "16", "16",
        "5_000_000", "--global-batch-size", "1024", "--train-samples", "300_000_000", "--fp16", "--lr", "1e-4",
        "--zero-stage", "1", "--dry-run", "--dry-run-vocab-size", "50257"};
    TrainArgs args;
    DryRunOptions options;
    CLI::App app("mds-train");
    add_train_flags(app, args);
    add_dry_run_flags(app, options);
    std::vector<char*> ptrs;
    for (auto& a : argv) ptrs.push_back(a.data());
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
    args.parallel.world_size = gpus;
    resolve_train_args(args);  // accepted at any size, as Megatron's calculator is
    return plan_dry_run(args, options);
}

}  // namespace

TEST_CASE("tr1-13B's ramp-up on 64 nodes: planned, with where a from-scratch run would stop") {
    const DryRunReport ok = plan_tr1(64);  // 16 nodes: DP 8 divides 16, 32, ..., 1024
    CHECK_FALSE(ok.rampup_problem);
    CHECK(format_dry_run(ok).find("started from scratch") == std::string::npos);
    CHECK(dry_run_json(ok)["layout"]["rampup_problem"].is_null());

    const DryRunReport big = plan_tr1(256);  // 64 nodes: DP 32
    CHECK(big.data_parallel_size == 32);
    REQUIRE(big.rampup_problem);
    // 16 fails at once; 16 + 16k divides by 32 only for odd k, and 1008 (k = 62) is in force up to
    // the end of the ramp-up at 5M samples: DP 32 can take over only after the ramp-up.
    CHECK(big.rampup_problem->find("global batch size 16, reached at 0 consumed samples (iteration 1), is not "
                                   "divisible by micro batch size 1 × data parallel size 32 = 32") != std::string::npos);
    CHECK(big.rampup_problem->find("all multiples of 16: use a micro batch size × data parallel size dividing 16, or "
                                   "ramp up on fewer data-parallel ranks and resume on these from 5000528 consumed "
                                   "samples on") != std::string::npos);
    const std::string text = format_dry_run(big);
    CHECK(text.find("  started from scratch on these GPUs: --rampup-batch-size 16 16 5000000: global batch size 16") !=
          std::string::npos);
    CHECK(dry_run_json(big)["layout"]["rampup_problem"] == *big.rampup_problem);
}
