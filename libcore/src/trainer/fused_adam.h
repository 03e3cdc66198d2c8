// mds-train --adam-step-fusion: AdamOptimizer's step of a bf16 model through kernels/adam.h — its CUDA kernels on
// a GPU, its CPU reference on the CPU. The gradients (fp32 main gradients, or the model's bf16 .grad) go straight
// into the update: no fp32 copy of them, and the masters go back into the model in the same pass.
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
// The same for a model of `dtype` on `device`.
std::string fused_adam_unsupported(const c10::Device& device, c10::ScalarType dtype);

// What one entry of the update covers: elements [offset, offset + length) of parameter `param`'s flat view (all of
// it unpartitioned, a ZeRO fragment partitioned), with its fp32 master and moments of `length` elements each.
struct FusedAdamSlice {
    std::size_t param = 0;
    std::int64_t offset = 0, length = 0;
    at::Tensor master, exp_avg, exp_avg_sq;
    bool decay = true;
};

class FusedAdam {
public:
    // The norm over every parameter's whole gradient (`params`, the model's bf16 parameters, whose .grad is read
    // at each call); the update over `slices` (this rank's partition: every parameter whole, or its fragments).
    // The tensors must outlive this.
    FusedAdam(std::vector<at::Tensor> params, std::vector<FusedAdamSlice> slices);
    // Unpartitioned: one slice per parameter, with its master and moments (of the parameter's size).
    FusedAdam(std::vector<at::Tensor> params, const std::vector<at::Tensor>& master, const std::vector<at::Tensor>& exp_avg,
              const std::vector<at::Tensor>& exp_avg_sq, const std::vector<bool>& decay);

    // Read the gradients from these fp32 tensors (bf16's main gradients, main_grads.h: one per parameter, its
    // size, contiguous, on its device; they must outlive this) instead of the parameters' .grad.
    void use_main_grads(std::vector<at::Tensor> grads);
    // Per parameter, Σ (g · grad_scale)² over its gradient: [n] fp64 on the parameters' device. A parameter
    // without a gradient gets a zero one first.
    at::Tensor grad_sumsq(float grad_scale);
    // The update of the slices (kernels::AdamHyper; weight_decay[0] for the decay group, [1] for the rest).
    void step(const kernels::AdamHyper& h);

private:
    // A table of AdamTensor entries cut into chunks, with its device copies (CUDA only).
    struct Plan {
        std::vector<kernels::AdamChunk> chunks;
        std::vector<std::int64_t> first;
        std::vector<kernels::AdamTensor> table;
        at::Tensor dev_table, dev_chunks, dev_first;
    };
    // The tables of pointers, uploaded again when a gradient tensor moved (the first call, or after something
    // replaced a .grad).
    void refresh();
    void plan(Plan& plan, const std::vector<std::int64_t>& numels, const char* what);
    void set_table(Plan& plan, std::vector<kernels::AdamTensor> table);
    bool cuda() const;

    std::vector<at::Tensor> params_;
    std::vector<at::Tensor> main_grads_;  // empty: the parameters' .grad
    std::vector<FusedAdamSlice> slices_;
    Plan norm_, update_;       // over the whole gradients; over the slices
    at::Tensor chunk_sums_;    // the norm's scratch (CUDA only)
};

}  // namespace mds::trainer
