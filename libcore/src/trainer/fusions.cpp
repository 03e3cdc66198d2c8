#include "fusions.h"

#include "fused_adam.h"
#include "mds/model/fused_cross_entropy.h"
#include "mds/model/fused_layer_norm.h"
#include "mds/model/fused_linear.h"

namespace mds::trainer {

Fusions fusions_for(const flags::TrainArgs& args, const c10::Device& device, std::vector<std::string>* by_default) {
    const auto& o = args.optimizer;
    const auto dtype = o.fp16 ? at::kHalf : o.bf16 ? at::kBFloat16 : at::kFloat;
    // Whether `flag` is on: as given, else `applies` on a GPU.
    const auto decide = [&](const std::string& flag, bool given_value, bool applies) {
        if (args.flags_given.count(flag) > 0 || args.flags_given.count("--no-" + flag.substr(2)) > 0) return given_value;
        if (!device.is_cuda() || !applies) return false;
        if (by_default) by_default->push_back(flag);
        return true;
    };
    Fusions f;
    f.cross_entropy = decide("--cross-entropy-loss-fusion", args.model.cross_entropy_loss_fusion,
                             args.parallel.tensor_model_parallel_size == 1 &&
                                 model::fused_cross_entropy_unsupported(device, dtype).empty());
    f.adam_step = decide("--adam-step-fusion", o.adam_step_fusion,
                         !args.parallel.host_optimizer() && fused_adam_unsupported(device, dtype).empty());
    f.layernorm_backward = decide("--layernorm-backward-fusion", args.model.layernorm_backward_fusion,
                                  model::fused_layer_norm_unsupported(device, dtype).empty());
    f.bias_grad = decide("--bias-grad-fusion", args.model.bias_grad_fusion,
                         model::fused_linear_unsupported(device, dtype).empty());
    // Off unless given until their CUDA paths have run on a GPU; then `applies` becomes their *_unsupported() test.
    f.gradient_accumulation = decide("--gradient-accumulation-fusion", args.model.gradient_accumulation_fusion, false);
    f.residual_layernorm = decide("--residual-layernorm-fusion", args.model.residual_layernorm_fusion, false);
    f.gelu_epilogue = decide("--gelu-epilogue-fusion", args.model.gelu_epilogue_fusion, false);
    return f;
}

}  // namespace mds::trainer
