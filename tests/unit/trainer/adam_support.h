// The optimizer tests' shared pieces (test_cpu_optimizer.cpp, test_fused_adam.cpp): an AdamW configuration and
// gradients that differ per step and per parameter.
#pragma once

#include <ATen/ATen.h>

#include "mds/model/gpt_model.h"
#include "mds/optim/optimizer_config.h"

namespace mds::trainer_test {

inline mds::optim::OptimizerConfig adam_config() {
    mds::optim::OptimizerConfig c;
    c.lr = 1e-3;
    c.adam_beta1 = 0.9;
    c.adam_beta2 = 0.95;
    c.adam_eps = 1e-8;
    c.clip_grad = 1.0;
    return c;
}

// Gradients that differ per step and per parameter, large enough that clipping acts, in the parameters' dtype.
inline void fill_grads(mds::model::GptModel& model, int step) {
    int k = 0;
    for (auto& p : model.parameters()) {
        auto g = at::sin(at::arange(p.tensor.numel(), at::TensorOptions().dtype(at::kFloat)) * (0.37 + 0.01 * k) + step)
                     .mul_(0.05 * (1 + k % 3))
                     .view(p.tensor.sizes());
        p.tensor.mutable_grad() = g.to(p.tensor.scalar_type());
        ++k;
    }
}

}  // namespace mds::trainer_test
