// Which of mds-train's fused kernels a run uses (docs/mds-train.md#fused-kernels). Each of --cross-entropy-loss-fusion,
// --adam-step-fusion, --layernorm-backward-fusion and --bias-grad-fusion decides when given, either way (--X on,
// --no-X off; a fusion given on that cannot run is the model's or optimizer's error, as before). Given neither way,
// a fusion is on where the run is on CUDA and the fusion takes it: the kernels built, fp32 or bf16 (the Adam step
// bf16 only, with the optimizer on the GPU), the cross entropy at one tensor-parallel rank. On the CPU they stay
// off unless given: there they are the kernels' references, slower than ATen's.
#pragma once

#include <c10/core/Device.h>

#include <string>
#include <vector>

#include "mds/flags/train_args.h"

namespace mds::trainer {

struct Fusions {
    bool cross_entropy = false, adam_step = false, layernorm_backward = false, bias_grad = false;
    // Only when given: their CUDA paths await a GPU run.
    bool gradient_accumulation = false, residual_layernorm = false, gelu_epilogue = false;
};

// The fusions in effect for `args` on `device`; `by_default` (when not null) gets the flags of those turned on
// because neither form was given, in the order above.
Fusions fusions_for(const flags::TrainArgs& args, const c10::Device& device, std::vector<std::string>* by_default = nullptr);

}  // namespace mds::trainer
