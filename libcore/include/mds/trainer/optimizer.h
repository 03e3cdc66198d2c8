// The optimizer step of a Megatron-DeepSpeed training on one process: fp32 master weights for
// fp16/bf16 models (Megatron's Float16OptimizerWithFloat16Params, DeepSpeed's BF16 optimizer),
// gradient unscaling with the non-finite check that skips fp16 overflow steps, global-norm
// clipping (clip_grad_norm_fp32), the "num zeros" count, and AdamW with decoupled weight decay as
// apex FusedAdam(adam_w_mode=True) computes it:
//   m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²;  p -= lr · (m/(1-β1ᵗ) / (sqrt(v/(1-β2ᵗ)) + ε) + wd·p)
// in two parameter groups, as Megatron's get_param_groups: weight decay for weight matrices and
// embeddings, none for biases and LayerNorm parameters.
//
// ZeRO stage 1 over a data-parallel group of D > 1 ranks: each rank keeps fp32 masters and Adam
// moments for its partition only — elements [r·P, (r+1)·P) of each of BMD's flat parameter groups
// (optimizer_groups), the partitions DeepSpeed's checkpoints hold — updates that partition and
// all-gathers the updated parameters. Every rank has the averaged full gradients (all-reduced by
// the trainer), so the gradient norm, clipping and the update of each element are exactly those of
// one process.
//
// Host offload (--cpu-optimizer, or zero_optimization.offload_optimizer.device "cpu" in the
// DeepSpeed config: ZeRO-Offload's optimizer half): the fp32 masters, Adam moments and step
// counters live in host memory (pinned when the model is on CUDA), with an fp32 host copy of the
// (reduced, unscaled) gradients; the step runs on the host and the updated masters are copied back
// into the device parameters in the model's dtype. The norm, clipping and update are the same
// computation as on the device, so curves agree with those without offload. With ZeRO-1 each rank
// offloads only its partition. On a CPU-only machine "device" and host are both the CPU: the host
// tensors are still separate copies, so that path is what runs and is tested there.
//
// bf16 with fp32 main gradients (main_grads.h; mds-train gives every bf16 run them, as the real program
// accumulates and all-reduces bf16 gradients in fp32): the step reads those in place of fp32 copies of the
// .grad tensors.
//
// --adam-step-fusion (a bf16 model, not offloaded): trainer/fused_adam.h's two passes over the gradients (the
// fp32 main gradients, or the model's bf16 .grad) — their per-parameter sums of squares for the norm, then the
// update that writes the masters, the moments and the model's weights (this rank's fragments with ZeRO-1, then
// the same gather) — instead of torch's fused AdamW and a copy of every master into the model.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "mds/ckpt/ds_optimizer_layout.h"
#include "mds/model/gpt_model.h"
#include "mds/optim/optimizer_config.h"

namespace mds::trainer {

class Communicator;
class FusedAdam;
class MainGrads;

// BMD's optimizer parameter groups (specs/checkpoints.md §5.1) laid out as DeepSpeed lays them
// (ckpt/ds_optimizer_layout.h): weight-decay parameters in module order split into two halves, then
// the no-decay ones; each flat buffer padded to 2 × DP and cut into DP partitions (fragments).
using FlatGroup = ckpt::DsFlatGroup;
using Fragment = ckpt::DsFragment;
std::vector<FlatGroup> optimizer_groups(const std::vector<model::Parameter>& params, std::int64_t dp);

// One data-parallel rank's share of the optimizer state, as a checkpoint file holds it: per flat
// group, the fragments of its partition with fp32 masters and Adam moments (views).
struct StateSlice {
    Fragment where;
    at::Tensor master, exp_avg, exp_avg_sq;
};
struct StatePartition {
    int rank = 0, count = 1;
    std::vector<FlatGroup> groups;
    std::vector<std::int64_t> partition_numel;    // per group
    std::vector<std::vector<StateSlice>> slices;  // per group, in partition order
};

struct StepResult {
    bool skipped = false;      // non-finite gradients (fp16 overflow): no update
    double grad_norm = 0;      // before clipping; NaN/Inf when the gradients are
    std::int64_t num_zeros = -1;  // zero gradient elements, when asked for
};

class AdamOptimizer {
public:
    // `params` must outlive the optimizer. SGD is not implemented (an error names --optimizer).
    // With `zero1` (not null, data-parallel group of more than one rank) the states are partitioned
    // (ZeRO stage 1); the communicator must outlive the optimizer. `host_offload`: the states and the
    // step on the host (see the top of this file).
    // `main_grads` (bf16's fp32 main gradients, main_grads.h; it must outlive the optimizer): the step reads
    // those instead of the parameters' .grad, and zero_grad() zeros them.
    AdamOptimizer(std::vector<model::Parameter>& params, const optim::OptimizerConfig& config,
                  Communicator* zero1 = nullptr, bool host_offload = false, MainGrads* main_grads = nullptr);
    ~AdamOptimizer();

    void zero_grad();
    // One step from the gradients accumulated in the model parameters, which were computed on a
    // loss multiplied by `loss_scale` (1 without fp16). `check_finite` enables the overflow check
    // (fp16); the step is then skipped when a gradient is Inf/NaN.
    StepResult step(double lr, double weight_decay, double loss_scale, bool check_finite, bool count_zeros);

    // L2 norm of all master parameters (Megatron's calc_params_l2_norm), for --log-params-norm.
    // Partitioned: a collective over the data-parallel group.
    double params_norm() const;
    bool partitioned() const { return zero_ != nullptr; }
    bool offloaded() const { return offload_; }
    // Model parallelism: `tp_sum` adds a number over the tensor-parallel group, `pp_sum` over the
    // pipeline (either may be empty). The gradient norm, the zero count and the parameter norm then
    // count the shards of split parameters on every rank, replicated ones once and the last stage's
    // copy of the tied embeddings not at all (Megatron's clip_grad_norm_fp32 over parameters that are
    // neither tensor-parallel duplicates nor shared), summed over the model-parallel ranks.
    void set_model_parallel_sums(std::function<double(double)> tp_sum, std::function<double(double)> pp_sum);
    // Rank `rank` of `count`'s partition of the state. Partitioned (ZeRO-1): this rank's own, and the
    // arguments must name it; else cut from the full state.
    StatePartition state_partition(int rank, int count) const;
    // Elements whose states this rank holds (all of them unless partitioned).
    std::int64_t state_elements() const;
    std::int64_t steps_taken() const { return steps_; }

    // Optimizer state, for checkpoints: fp32 master copies (aliases of the parameters in fp32
    // training), Adam's first and second moments, in parameter order. Not when partitioned (throws).
    const std::vector<at::Tensor>& master_params() const;
    const std::vector<at::Tensor>& exp_avg() const;
    const std::vector<at::Tensor>& exp_avg_sq() const;
    // Restores a checkpoint's state: one fp32 tensor per parameter (in parameter order, same shapes)
    // for the masters and both moments, and Adam's step count (partitioned: this rank keeps its
    // partition). The parameters get the masters, rounded to their dtype. Throws mds::Error naming
    // the parameter on a shape mismatch.
    void load_state(const std::vector<at::Tensor>& master, const std::vector<at::Tensor>& exp_avg,
                    const std::vector<at::Tensor>& exp_avg_sq, std::int64_t steps);

private:
    struct Zero1;
    StepResult step_partitioned(double lr, double weight_decay, double loss_scale, bool check_finite, bool count_zeros);
    // ZeRO-1, after this rank updated its fragments: every rank's partition to every rank.
    void gather_partitions();
    // --adam-step-fusion (fused_adam.h): the norm and the update from the model's bf16 gradients.
    StepResult step_fused(double lr, double weight_decay, double loss_scale, bool check_finite, bool count_zeros);
    // The gradient norm and zero count into `r` from the fp32 unscaled main gradients `norm_of`
    // (and `zeros_of`, the same values in any dtype), in parameter order. Returns the factor the
    // gradients are clipped by (1: none), or nothing when the step is skipped (non-finite, fp16).
    std::optional<double> measure(const std::vector<at::Tensor>& norm_of, const std::vector<at::Tensor>& zeros_of,
                                  bool check_finite, bool count_zeros, StepResult& r) const;
    // The same from the per-parameter sums of squares of those gradients ([n] fp64).
    std::optional<double> measure_squares(const at::Tensor& squares, const std::vector<at::Tensor>& zeros_of,
                                          bool check_finite, bool count_zeros, StepResult& r) const;
    // Σ of per-parameter values ([n] fp64) over the model-parallel ranks (set_model_parallel_sums).
    double model_parallel_total(const at::Tensor& per_param) const;
    // The same from this rank's sums over split and over replicated parameters.
    double model_parallel_total(double sharded, double replicated) const;
    std::int64_t count_zeros_of(const std::vector<at::Tensor>& grads) const;
    // Every parameter's gradient as the step reads it: the main gradients, or the parameters' .grad (zeros
    // given to a parameter without one).
    std::vector<at::Tensor> gradients();

    std::vector<model::Parameter>& params_;
    MainGrads* main_ = nullptr;
    std::unique_ptr<Zero1> zero_;
    std::unique_ptr<FusedAdam> fused_;  // --adam-step-fusion
    std::function<double(double)> tp_sum_, pp_sum_;
    at::Tensor sharded_mask_;  // [n] fp64: 1 for tensor-parallel split parameters
    at::Tensor counted_mask_;  // [n] fp64: 0 for the tied copy of the embeddings, else 1
    optim::OptimizerConfig config_;
    bool separate_master_ = false;
    bool offload_ = false;  // states, gradients' fp32 copies and the step on the host
    std::vector<at::Tensor> master_, exp_avg_, exp_avg_sq_;
    std::vector<at::Tensor> master_grad_;  // fp32 copies (fp16, bf16 without main gradients, offload), or the fp32 gradients
    std::vector<std::size_t> decay_, no_decay_;  // indices of the two parameter groups
    std::vector<at::Tensor> step_decay_, step_no_decay_;  // at::_fused_adamw_'s step counters (none when fused_)
    std::int64_t steps_ = 0;
};

}  // namespace mds::trainer
