// Tensor-parallel resharding of one global tensor (specs/checkpoints.md §4.2, §4.4, §6.2, §6.3): the
// split of a global tensor into the shards of another TP degree (the inverse of
// DsCheckpoint::Layer::merge), the merge of fp32 slices (optimizer states) by the same rules, GLU's
// dense_h_to_4h as two sub-parameters, fused-QKV row order by checkpoint_version, and the
// vocabulary rows of word_embeddings re-padded for a new TP degree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mds/ckpt/ds_checkpoint.h"  // TpRule

namespace mds::ckpt {

// How one parameter is split over TP ranks: the rule of its name, and for GLU's dense_h_to_4h
// (weight and bias) two sub-parameters [A; B] along dim 0 that are split separately, so that rank
// r holds [A_r; B_r].
struct TpLayout {
    TpRule rule = TpRule::Replicated;
    int sub_params = 1;  // 2 for GLU's dense_h_to_4h
    int dim() const { return rule == TpRule::RowParallel ? 1 : 0; }
};
// The layout of `name` (as inside its layer file); `glu` when args.glu_activation is set.
TpLayout tp_layout(const std::string& name, bool glu);

// The shape of one of `tp` shards of a tensor of `global_shape`. Throws mds::Error naming `what`
// when the split dimension (per sub-parameter) is not divisible by `tp`.
std::vector<std::int64_t> tp_shard_shape(const TpLayout& layout, const std::vector<std::int64_t>& global_shape, int tp,
                                         const std::string& what);

// Shard `rank` of `tp` of a row-major global tensor with elements of `esize` bytes. Replicated
// parameters are copied whole.
std::vector<std::byte> tp_shard(const TpLayout& layout, std::span<const std::byte> global, const std::vector<std::int64_t>& global_shape,
                                std::size_t esize, int tp, int rank);

// The global fp32 tensor of `slices` (one per TP rank, each of `slice_shape`, row-major). Replicated
// slices that are bitwise equal give slice 0 back; differing ones are averaged in fp32 (summed in
// rank order, then divided), as the BLOOM-era universal conversion did.
std::vector<float> tp_merge_fp32(const TpLayout& layout, const std::vector<std::vector<float>>& slices,
                                 const std::vector<std::int64_t>& slice_shape);

// GLU: rows of a plain dim-0 concatenation of `tp` shards [A_0; B_0; A_1; B_1; ...] reordered in
// place to the global [A_0; A_1; ...; B_0; B_1; ...].
void glu_rows_to_global(std::vector<std::byte>& data, std::int64_t rows, std::size_t row_bytes, int tp);

// Fused-QKV rows of one TP partition with `local_heads` heads from the order of checkpoint_version
// `version` ([3, np, d] for 0, [np, d, 3] for 1.0) to [np, 3, d] (2.0 and later: unchanged).
void qkv_rows_to_v2(std::vector<std::byte>& rows, std::int64_t local_heads, std::size_t row_bytes, double version);

// Megatron's padded vocabulary size: pad_vocab_size_to when given (>= the original size), else
// the smallest multiple of divisible_by * tp that holds `original` (specs/checkpoints.md §6.3).
std::int64_t padded_vocab_size(std::int64_t original, std::int64_t divisible_by, int tp, std::int64_t pad_vocab_size_to);

// Rows of a [V, ...] tensor (row-major, `row_bytes` per row) for a new padded size: rows at and past
// `original` become zeros, the tensor is cut or zero-extended to `new_rows`; `shape[0]` follows.
void repad_vocab_rows(std::vector<std::byte>& data, std::vector<std::int64_t>& shape, std::size_t row_bytes, std::int64_t original,
                      std::int64_t new_rows);

}  // namespace mds::ckpt
