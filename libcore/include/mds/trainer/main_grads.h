// bf16 training's main gradients: each parameter's gradient summed over the step's micro batches in
// fp32, as the real program does it. DeepSpeed's BF16_Optimizer (BigScience's bf16 runs, tr11-176B) adds
// every micro batch's bf16 gradient into fp32 buffers from a hook on each parameter and all-reduces those
// buffers; without --deepspeed, Megatron's local DDP does the same into param.main_grad, as bf16 forces
// accumulate_allreduce_grads_in_fp32. A bf16 sum loses the small terms to the large ones: its error grows
// with the number of micro batches (tr11-176B-ml.slurm: 256 per step).
//
// One contiguous fp32 buffer with a view per parameter. Once autograd has accumulated a micro batch's
// gradient into a parameter's .grad, a hook on the parameter adds it into the parameter's view and drops
// the .grad: the next micro batch's backward hands its gradient over without an add, and no bf16
// gradient outlives its micro batch. The data-parallel all-reduce (GradientReducer), the tied-embedding
// sum (finalize_model_grads), the norm, clipping and the optimizer step (AdamOptimizer) then read the views.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "mds/model/gpt_model.h"

namespace mds::trainer {

class MainGrads {
public:
    // `params` must outlive this; every parameter gets a post-accumulation hook (removed by the destructor),
    // so no other hook may be set on them (GradientReducer listens through set_listener instead).
    explicit MainGrads(std::vector<model::Parameter>& params);
    ~MainGrads();
    MainGrads(const MainGrads&) = delete;
    MainGrads& operator=(const MainGrads&) = delete;

    // Zeros for the next step (one fill of the flat buffer) and no .grad left on any parameter.
    void zero();
    // One fp32 view per parameter, in parameter order, shaped as the parameter; and the buffer they share.
    const std::vector<at::Tensor>& grads() const;
    const at::Tensor& flat() const;
    // The range of the flat buffer that holds parameters first..last (inclusive, first <= last): their views,
    // end to end.
    at::Tensor range(std::size_t first, std::size_t last) const;
    // The view of `param` (one of the parameters, by identity); throws mds::Error for another tensor.
    const at::Tensor& of(const at::Tensor& param) const;
    // Called with the parameter's index after each micro batch's gradient of it was added (empty: none).
    void set_listener(std::function<void(std::size_t)> listener);

private:
    struct Impl;
    std::shared_ptr<Impl> impl_;  // shared with the hooks on the parameters
};

}  // namespace mds::trainer
