// DeepSpeed's flat optimizer layout of one pipeline stage (specs/checkpoints.md §5.1, §5.2): the
// parameters in Megatron's optimizer groups, each group flattened into one buffer padded to a
// multiple of 2 × DP, and that buffer cut into DP equal partitions, one per data-parallel rank, with
// the fragments of parameters each partition holds. The one description mds-train's ZeRO-1 / BF16
// optimizer (trainer/optimizer.cpp), its checkpoint writer and mds-ckpt-reshape's optimizer files
// (ckpt/optim_reshard.cpp) are cut by: a change here changes every file they write alike.
//
// Worked example (§5.2): group 0 of 1152 elements, D = 2: no padding (1152 = 288 × 4), partitions
// of 576; rank 0 holds word_embeddings (512) whole and the first 64 elements of the position
// embeddings at 512, rank 1 the other 64 of them at 0, then the layer's QKV weight at 64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace mds::ckpt {

// Which parameters an optimizer group holds, in flat order: indices into the caller's parameter list.
struct DsParamGroup {
    std::vector<std::size_t> params;
    bool weight_decay = true;
};

// Megatron's parameter groups (BMD megatron/optimizer/__init__.py
// _get_params_for_weight_decay_optimization) from the parameters in DeepSpeed's traversal order and
// each one's weight-decay flag: 3 groups [weight-decay first half, second half, no weight decay]
// (BMD since 541b967f, 2022-02: the halves avoid an apex crash), or 2 groups [weight decay, none]
// (before). `params[i]` has `weight_decay[i]`; the halves split at (weight-decay count) / 2.
std::vector<DsParamGroup> megatron_param_groups(const std::vector<std::size_t>& params, const std::vector<bool>& weight_decay,
                                                int group_count);

// A piece of one parameter inside one data-parallel rank's partition of a flat group.
struct DsFragment {
    std::size_t param = 0;         // the caller's parameter index
    std::int64_t offset = 0;       // in the flattened parameter
    std::int64_t length = 0;
    std::int64_t part_offset = 0;  // in the partition (fragment_address.start)
};

// One group's flat buffer (DeepSpeed bf16_optimizer.py _setup_for_real_optimizer, utils.py
// align_dense_tensors): the parameters back to back, then `padding` zeros so that numel + padding
// is a multiple of 2 × DP (nccl_start_alignment_factor = 2), cut into DP partitions of `partition`
// elements; rank k holds flat[k·partition, (k+1)·partition), the last one ending with the padding.
struct DsFlatGroup {
    std::vector<std::size_t> params;    // the caller's parameter indices, in flat order
    std::vector<std::int64_t> offsets;  // where each of them starts in the flat buffer
    std::int64_t numel = 0;             // elements of the parameters, padding not included
    std::int64_t padding = 0;
    std::int64_t partition = 0;         // (numel + padding) / DP
    bool weight_decay = true;
    // [rank] → the fragments of that rank's partition, in partition order; a parameter without
    // elements has none.
    std::vector<std::vector<DsFragment>> fragments;

    // Elements of real data (not padding) in rank `rank`'s partition.
    std::int64_t data_in_partition(int rank) const;
    // The fragments of params[k], one per rank that holds a piece of it, in rank order.
    std::vector<std::pair<int, DsFragment>> pieces_of(std::size_t k) const;
};

// The layout of `groups` over `dp` data-parallel ranks; `numel[i]` is the element count of the
// caller's parameter i (only the indices the groups name are read). Throws mds::Error for dp < 1
// or an index past `numel`.
std::vector<DsFlatGroup> ds_optimizer_layout(const std::vector<DsParamGroup>& groups, const std::vector<std::int64_t>& numel,
                                             int dp);

// Whether DeepSpeed partitions the optimizer states over the data-parallel ranks: under ZeRO stage
// 1, and under the BF16_Optimizer that bf16 runs get at ZeRO stage 0 ("bf16 must use z0! it
// implements its own zero stage 1 equivalent", BigScience tr11-176B-ml.slurm).
bool ds_partitions_optimizer_states(std::int64_t zero_stage, bool bf16);

}  // namespace mds::ckpt
