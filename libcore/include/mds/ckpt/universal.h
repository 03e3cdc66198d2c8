// The universal per-parameter optimizer layout (specs/checkpoints.md §5.2, §6.5): the BF16
// optimizer shards of a DeepSpeed pipeline checkpoint (bf16_zero_pp_rank_{dp}_mp_rank_{mp}_optim_
// states.pt: flat fp32 partitions with param_slice_mappings) read back as one global fp32 tensor per
// parameter and state (fp32 master, exp_avg, exp_avg_sq): fragments joined in DP order into each TP
// slice, slices merged over TP by the weights' rules. And DeepSpeed's universal checkpoint files
// written from those tensors (zero/<name>/<state>.pt as ds_to_universal writes them).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mds/ckpt/pickle.h"
#include "mds/ckpt/torch_file.h"
#include "mds/ckpt/tp_reshard.h"  // TpLayout

namespace mds::ckpt {

enum class OptimState { FP32, ExpAvg, ExpAvgSq };
inline constexpr OptimState kOptimStates[] = {OptimState::FP32, OptimState::ExpAvg, OptimState::ExpAvgSq};
const char* optim_state_name(OptimState s);  // "fp32", "exp_avg", "exp_avg_sq": universal file names

// DeepSpeed's name of a parameter of the pipeline module (§5.1): the tied embedding's under
// "tied_modules.embed.", the others under their global layer index ("3.input_layernorm.weight").
std::string ds_param_name(int layer, const std::string& name, int embedding_layer);

// (numel, start) of one param_slice_mappings entry of a BF16 optimizer file: DeepSpeed's
// fragment_address, a dataclass rebuilt with its __dict__ (or a plain dict / (numel, start) tuple).
// Throws mds::Error naming `where` when it is none of these.
std::pair<std::int64_t, std::int64_t> ds_fragment_address(const PyValue& v, const std::string& where);

// The BF16 optimizer files of one checkpoint tag, all opened (mapped) at once.
class Bf16OptimizerShards {
public:
    // Opens the files of `tp` × `pp` model-parallel ranks and every data-parallel rank found.
    // Errors name the file: a missing rank, fp16 ZeRO files (zero_pp_rank_*: another layout),
    // missing keys, group counts or sizes that disagree. `verify`: CRC-32 checks (TorchFile).
    Bf16OptimizerShards(const std::string& dir, int tp, int pp, bool verify = true);

    int dp() const { return dp_; }
    int groups() const { return groups_; }
    // The optimizer group of every parameter (stage-0 copy for the tied embedding).
    const std::map<std::string, int>& group_of() const { return group_of_; }
    // The file of a rank, as read.
    const TorchFile& file(int pp, int tp, int dp) const;
    const PyValue& optimizer_state_dict(int pp, int tp, int dp) const;

    // The global fp32 tensor of one state of parameter `name`: for each TP rank its fragments
    // joined in DP order into a slice of `slice_shape`, fused-QKV rows normalised from
    // `qkv_version` (with `heads` global heads), then the slices merged by `layout`. The
    // pipeline-replicated tied embedding is read from stage 0 only, as ds_to_universal does.
    // `reserve_numel` leaves room for the caller to grow the tensor in place (vocabulary re-pad).
    std::vector<float> global_state(const std::string& name, OptimState state, const TpLayout& layout,
                                    const std::vector<std::int64_t>& slice_shape, double qkv_version, std::int64_t heads,
                                    std::size_t reserve_numel = 0) const;

private:
    struct File {
        std::unique_ptr<TorchFile> file;
        std::array<std::vector<TorchTensor>, 3> states;  // per OptimState, per group: the flat partition
    };
    struct Fragment {
        int dp = 0;
        std::int64_t start = 0, numel = 0;
    };
    struct Param {
        int pp = 0, group = 0;
        std::vector<std::vector<Fragment>> per_tp;
    };
    const File& at(int pp, int tp, int dp) const;

    std::string dir_;
    int tp_ = 0, pp_ = 0, dp_ = 0, groups_ = 0;
    std::vector<File> files_;  // index (pp * tp + tp_rank) * dp + dp_rank
    std::map<std::string, Param> params_;
    std::map<std::string, int> group_of_;
};

// What a universal state file says about how its tensor was merged.
struct UniversalParamInfo {
    TpLayout layout;
    bool vocab_stripped = false;  // word_embeddings cut to original_vocab_size ('vocab_tensor': True)
};
// Writes `<param_dir>/<state>.pt`: torch.save({'cat_dim': d (concatenated params),
// 'param_n_sub_params': 2 (GLU), 'vocab_tensor': True (stripped vocabulary), 'param': fp32 tensor})
// as DeepSpeed's ds_to_universal does (keys in its order).
void write_universal_state(const std::string& param_dir, OptimState state, std::span<const float> data,
                           const std::vector<std::int64_t>& shape, const UniversalParamInfo& info);

}  // namespace mds::ckpt
