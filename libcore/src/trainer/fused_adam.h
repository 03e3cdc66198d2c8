// mds-train --adam-step-fusion: AdamOptimizer's step of a bf16 model through kernels/adam.h — its CUDA kernels on
// a GPU, its CPU reference on the CPU. The model's bf16 gradients go straight into the update: no fp32 copy of
// them, and the masters go back into the model in the same pass.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/adam.h"

namespace mds::trainer {

// Empty when the fused step can update a model whose first parameter is `p`, else why not (a dtype other than
// bf16, a device other than the CPU or CUDA, CUDA without kernels/ built).
std::string fused_adam_unsupported(const at::Tensor& p);

class FusedAdam {
public:
    // One entry per parameter: the model's bf16 parameter (its .grad is read at each call), its fp32 master and
    // moments (contiguous, of the parameter's size), whether weight decay applies. The tensors must outlive this.
    FusedAdam(std::vector<at::Tensor> params, std::vector<at::Tensor> master, std::vector<at::Tensor> exp_avg,
              std::vector<at::Tensor> exp_avg_sq, const std::vector<bool>& decay);

    // Per parameter, Σ (g · grad_scale)² over its gradient: [n] fp64 on the parameters' device. A parameter
    // without a gradient gets a zero one first.
    at::Tensor grad_sumsq(float grad_scale);
    // The update (kernels::AdamHyper; weight_decay[0] for the decay group, [1] for the rest).
    void step(const kernels::AdamHyper& h);

private:
    // The table of pointers, uploaded again when a gradient tensor moved (the first call, or after something
    // replaced a .grad).
    void refresh();
    bool cuda() const;

    std::vector<at::Tensor> params_, master_, exp_avg_, exp_avg_sq_;
    std::vector<std::int32_t> group_;
    std::vector<kernels::AdamChunk> chunks_;
    std::vector<std::int64_t> first_;
    std::vector<kernels::AdamTensor> table_;
    at::Tensor dev_table_, dev_chunks_, dev_first_, chunk_sums_;  // on the device (CUDA only)
};

}  // namespace mds::trainer
