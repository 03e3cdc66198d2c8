// --cpu-optimizer / --cpu_torch_adam and the DeepSpeed config's zero_optimization.offload_optimizer
// (docs/cpu-optimizer.md): how they reach TrainArgs, the checkpoint's args, and the --dry-run memory.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mds/flags/deepspeed_config.h"
#include "mds/flags/dry_run.h"
#include "mds/flags/flag_table.h"
#include "mds/flags/train_args.h"
#include "mds/util/error.h"
#include "flag_parse.h"

using namespace mds::flags;
using mds::flags_test::parse;

namespace {

std::vector<std::string> tiny_argv(std::vector<std::string> extra) {
    std::vector<std::string> v{"--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length",
                               "128", "--max-position-embeddings", "128", "--micro-batch-size", "2", "--train-iters",
                               "100", "--lr", "1e-3", "--dry-run-vocab-size", "1000"};
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
}

DeepSpeedConfig offload_config(const std::string& device) {
    return parse_deepspeed_config(
        R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": ")" +
            device + R"(", "pin_memory": true}}, "zero_force_ds_cpu_optimizer": false})",
        "ds_config.json");
}

}  // namespace

TEST_CASE("cpu optimizer flags: --cpu-optimizer is taken, --cpu_torch_adam accepted without effect") {
    TrainArgs args;
    DryRunOptions options;
    parse(args, options, tiny_argv({"--cpu-optimizer", "--cpu_torch_adam"}), 1);
    CHECK(args.parallel.cpu_optimizer);
    CHECK(args.parallel.cpu_torch_adam);
    CHECK(args.parallel.host_optimizer());
    const FlagRow* row = find_flag("--cpu-optimizer");
    REQUIRE(row != nullptr);
    CHECK(row->status == FlagStatus::Supported);
    const FlagRow* torch_row = find_flag("--cpu_torch_adam");
    REQUIRE(torch_row != nullptr);
    CHECK(torch_row->status == FlagStatus::NoEffect);

    TrainArgs plain;
    DryRunOptions plain_options;
    parse(plain, plain_options, tiny_argv({}), 1);
    CHECK_FALSE(plain.parallel.host_optimizer());
}

TEST_CASE("cpu optimizer flags: the DeepSpeed config's offload_optimizer turns the host step on") {
    const auto cpu = offload_config("cpu");
    REQUIRE(cpu.offload_optimizer_device);
    CHECK(*cpu.offload_optimizer_device == "cpu");
    CHECK(cpu.unknown_keys.empty());  // offload_optimizer, pin_memory and zero_force_ds_cpu_optimizer are read
    TrainArgs args;
    args.optimizer.micro_batch_size = 2;
    apply_deepspeed_config(cpu, args);
    CHECK(args.parallel.offload_optimizer);
    CHECK_FALSE(args.parallel.cpu_optimizer);  // the checkpoint's args.cpu_optimizer records the flag only
    CHECK(args.parallel.host_optimizer());

    TrainArgs none;
    apply_deepspeed_config(offload_config("none"), none);
    CHECK_FALSE(none.parallel.host_optimizer());

    std::string error;
    try {
        offload_config("nvme");
    } catch (const mds::Error& e) {
        error = e.what();
    }
    CHECK(error.find("zero_optimization.offload_optimizer.device") != std::string::npos);
    CHECK(error.find("nvme") != std::string::npos);
}

TEST_CASE("cpu optimizer flags: --dry-run puts the optimizer states in host memory") {
    TrainArgs gpu_args, host_args;
    DryRunOptions gpu_options, host_options;
    parse(gpu_args, gpu_options, tiny_argv({"--bf16", "--dry-run-gpus", "8"}), 8);
    parse(host_args, host_options, tiny_argv({"--bf16", "--dry-run-gpus", "8", "--cpu-optimizer"}), 8);
    const DryRunReport on_gpu = plan_dry_run(gpu_args, gpu_options);
    const DryRunReport on_host = plan_dry_run(host_args, host_options);
    const auto& g = on_gpu.stages[0];
    const auto& h = on_host.stages[0];
    CHECK(g.optimizer_bytes == (12 * on_gpu.parameters + 7) / 8);  // ZeRO-1 over DP 8, on the GPU
    CHECK(g.host_optimizer_bytes == 0);
    CHECK(h.optimizer_bytes == 0);
    CHECK(h.host_optimizer_bytes == (16 * on_host.parameters + 7) / 8);  // master, m, v, fp32 grads / DP 8
    CHECK(h.weights_bytes == g.weights_bytes);
    CHECK(h.total_bytes == g.total_bytes - g.optimizer_bytes);
    const std::string text = format_dry_run(on_host);
    CHECK(text.find("host memory per rank (--cpu-optimizer)") != std::string::npos);
    CHECK(format_dry_run(on_gpu).find("host memory") == std::string::npos);
    const auto json = dry_run_json(on_host);
    CHECK(json["layout"]["host_optimizer"] == true);
    CHECK(json["memory"]["stages"][0]["host_optimizer_bytes"] == h.host_optimizer_bytes);
}
