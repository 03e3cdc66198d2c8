// The optimizer step of a Megatron-DeepSpeed training on one process: fp32 master weights for
// fp16/bf16 models (Megatron's Float16OptimizerWithFloat16Params, DeepSpeed's BF16 optimizer),
// gradient unscaling with the non-finite check that skips fp16 overflow steps, global-norm
// clipping (clip_grad_norm_fp32), the "num zeros" count, and AdamW with decoupled weight decay as
// apex FusedAdam(adam_w_mode=True) computes it:
//   m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²;  p -= lr · (m/(1-β1ᵗ) / (sqrt(v/(1-β2ᵗ)) + ε) + wd·p)
// in two parameter groups, as Megatron's get_param_groups: weight decay for weight matrices and
// embeddings, none for biases and LayerNorm parameters.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "mds/model/gpt_model.h"
#include "mds/optim/optimizer_config.h"

namespace mds::trainer {

struct StepResult {
    bool skipped = false;      // non-finite gradients (fp16 overflow): no update
    double grad_norm = 0;      // before clipping; NaN/Inf when the gradients are
    std::int64_t num_zeros = -1;  // zero gradient elements, when asked for
};

class AdamOptimizer {
public:
    // `params` must outlive the optimizer. SGD is not implemented (an error names --optimizer).
    AdamOptimizer(std::vector<model::Parameter>& params, const optim::OptimizerConfig& config);

    void zero_grad();
    // One step from the gradients accumulated in the model parameters, which were computed on a
    // loss multiplied by `loss_scale` (1 without fp16). `check_finite` enables the overflow check
    // (fp16); the step is then skipped when a gradient is Inf/NaN.
    StepResult step(double lr, double weight_decay, double loss_scale, bool check_finite, bool count_zeros);

    // L2 norm of all master parameters (Megatron's calc_params_l2_norm), for --log-params-norm.
    double params_norm() const;
    std::int64_t steps_taken() const { return steps_; }

    // Optimizer state, for checkpoints: fp32 master copies (aliases of the parameters in fp32
    // training), Adam's first and second moments, in parameter order.
    const std::vector<at::Tensor>& master_params() const { return master_; }
    const std::vector<at::Tensor>& exp_avg() const { return exp_avg_; }
    const std::vector<at::Tensor>& exp_avg_sq() const { return exp_avg_sq_; }
    // Restores a checkpoint's state: one fp32 tensor per parameter (in parameter order, same shapes)
    // for the masters and both moments, and Adam's step count. The parameters get the masters,
    // rounded to their dtype. Throws mds::Error naming the parameter on a shape mismatch.
    void load_state(const std::vector<at::Tensor>& master, const std::vector<at::Tensor>& exp_avg,
                    const std::vector<at::Tensor>& exp_avg_sq, std::int64_t steps);

private:
    std::vector<model::Parameter>& params_;
    optim::OptimizerConfig config_;
    bool separate_master_ = false;
    std::vector<at::Tensor> master_, exp_avg_, exp_avg_sq_;
    std::vector<at::Tensor> master_grad_;  // fp32 copies (fp16/bf16), or the parameters' .grad (fp32)
    std::vector<std::size_t> decay_, no_decay_;  // indices of the two parameter groups
    std::vector<at::Tensor> step_decay_, step_no_decay_;  // the fused kernel's step counters
    std::int64_t steps_ = 0;
};

}  // namespace mds::trainer
