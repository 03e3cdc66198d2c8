// --cpu-optimizer (AdamOptimizer's host offload): the states are separate host tensors, and the
// steps give the same parameters, gradient norms and states as the optimizer without offload.
#include <doctest/doctest.h>

// After doctest: LibTorch defines its own CHECK (glog style), so this file spells DOCTEST_CHECK.
#include <ATen/ATen.h>

#include <vector>

#include "mds/model/gpt_model.h"
#include "mds/optim/optimizer_config.h"
#include "mds/trainer/optimizer.h"
#include "adam_support.h"
#include "tiny_gpt.h"

using namespace mds::trainer;
using mds::trainer_test::adam_config;
using mds::trainer_test::fill_grads;

namespace {

bool same_storage(const at::Tensor& a, const at::Tensor& b) { return a.storage().is_alias_of(b.storage()); }

void check_identical_runs(mds::model::Precision precision, double loss_scale) {
    auto config = tiny_gpt();
    config.precision = precision;
    mds::model::GptModel device_model(config, c10::Device(at::kCPU), 42);
    mds::model::GptModel host_model(config, c10::Device(at::kCPU), 42);
    AdamOptimizer on_device(device_model.parameters(), adam_config());
    AdamOptimizer on_host(host_model.parameters(), adam_config(), nullptr, /*host_offload=*/true);
    DOCTEST_CHECK(!on_device.offloaded());
    DOCTEST_CHECK(on_host.offloaded());
    // The host path keeps its own fp32 copies: never the parameters themselves (fp32 training
    // without offload updates the parameters in place).
    for (std::size_t i = 0; i < host_model.parameters().size(); ++i) {
        const auto& master = on_host.master_params()[i];
        DOCTEST_CHECK(master.device().is_cpu());
        DOCTEST_CHECK((master.scalar_type() == at::kFloat));
        DOCTEST_CHECK(!same_storage(master, host_model.parameters()[i].tensor));
        DOCTEST_CHECK(on_host.exp_avg()[i].device().is_cpu());
    }
    for (int step = 1; step <= 4; ++step) {
        fill_grads(device_model, step);
        fill_grads(host_model, step);
        if (loss_scale != 1.0) {
            for (auto* m : {&device_model, &host_model})
                for (auto& p : m->parameters()) p.tensor.mutable_grad().mul_(loss_scale);
        }
        const auto a = on_device.step(1e-3, 0.1, loss_scale, loss_scale != 1.0, true);
        const auto b = on_host.step(1e-3, 0.1, loss_scale, loss_scale != 1.0, true);
        DOCTEST_CHECK(a.grad_norm == b.grad_norm);
        DOCTEST_CHECK(a.num_zeros == b.num_zeros);
        DOCTEST_CHECK(a.skipped == b.skipped);
        DOCTEST_CHECK(a.grad_norm > 1.0);  // clipping acted
    }
    for (std::size_t i = 0; i < host_model.parameters().size(); ++i) {
        const auto& name = host_model.parameters()[i].full_name();
        INFO(name);
        DOCTEST_CHECK(at::equal(device_model.parameters()[i].tensor, host_model.parameters()[i].tensor));
        DOCTEST_CHECK(at::equal(on_device.master_params()[i], on_host.master_params()[i]));
        DOCTEST_CHECK(at::equal(on_device.exp_avg()[i], on_host.exp_avg()[i]));
        DOCTEST_CHECK(at::equal(on_device.exp_avg_sq()[i], on_host.exp_avg_sq()[i]));
    }
    DOCTEST_CHECK(on_device.params_norm() == on_host.params_norm());
    // The updates reached the model: the parameters moved away from their initial values.
    mds::model::GptModel initial(config, c10::Device(at::kCPU), 42);
    DOCTEST_CHECK(!at::equal(initial.parameters()[0].tensor, host_model.parameters()[0].tensor));
}

}  // namespace

TEST_CASE("cpu optimizer: fp32 steps on host copies equal the in-place steps") {
    check_identical_runs(mds::model::Precision::FP32, 1.0);
}

TEST_CASE("cpu optimizer: bf16 model, fp32 host masters, same result as the device masters") {
    check_identical_runs(mds::model::Precision::BF16, 1.0);
}

TEST_CASE("cpu optimizer: fp16 with a loss scale, unscaled on the host") {
    check_identical_runs(mds::model::Precision::FP16, 1024.0);
}

TEST_CASE("cpu optimizer: a checkpoint's state loads into the host copies and reaches the model") {
    auto config = tiny_gpt();
    mds::model::GptModel source(config, c10::Device(at::kCPU), 42);
    AdamOptimizer trained(source.parameters(), adam_config());
    fill_grads(source, 1);
    trained.step(1e-3, 0.1, 1.0, false, false);

    mds::model::GptModel target(config, c10::Device(at::kCPU), 7);
    AdamOptimizer offloaded(target.parameters(), adam_config(), nullptr, true);
    offloaded.load_state(trained.master_params(), trained.exp_avg(), trained.exp_avg_sq(), trained.steps_taken());
    for (std::size_t i = 0; i < target.parameters().size(); ++i) {
        DOCTEST_CHECK(at::equal(target.parameters()[i].tensor, source.parameters()[i].tensor));
        DOCTEST_CHECK(at::equal(offloaded.exp_avg_sq()[i], trained.exp_avg_sq()[i]));
    }
    // The next step from the same state is the same step.
    fill_grads(source, 2);
    fill_grads(target, 2);
    trained.step(1e-3, 0.1, 1.0, false, false);
    offloaded.step(1e-3, 0.1, 1.0, false, false);
    for (std::size_t i = 0; i < target.parameters().size(); ++i)
        DOCTEST_CHECK(at::equal(target.parameters()[i].tensor, source.parameters()[i].tensor));
    // The checkpoint view (one partition of one) is cut from the host states.
    const auto part = offloaded.state_partition(0, 1);
    DOCTEST_CHECK(!part.slices.empty());
    DOCTEST_CHECK(part.slices[0][0].master.device().is_cpu());
}
