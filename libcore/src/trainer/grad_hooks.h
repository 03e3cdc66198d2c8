// The trainer's one hook per parameter after autograd has accumulated its gradient (LibTorch keeps one such hook
// per tensor): GradientReducer's, or MainGrads' when bf16 keeps fp32 main gradients (the reducer then listens
// through MainGrads). `fire(k)` runs with parameter k's index; the caller keeps what it needs alive (a weak_ptr).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "mds/model/gpt_model.h"

namespace mds::trainer {

void set_gradient_hooks(std::vector<model::Parameter>& params, const std::function<void(std::size_t)>& fire);
void clear_gradient_hooks(std::vector<model::Parameter>& params);

}  // namespace mds::trainer
