// A model on disk as one list of global tensors in a stable order, each loaded on demand, for tools
// that walk two models side by side (mds-ckpt-diff). Two kinds of folders:
//   - a DeepSpeed pipeline checkpoint (any TP / PP / DP; specs/checkpoints.md §1, §4, §5): every
//     parameter merged over its TP shards (DsCheckpoint::Layer::merge), and on request the optimizer
//     states per parameter (fp32 master, exp_avg, exp_avg_sq) and the optimizer step, from BF16
//     optimizer files (Bf16OptimizerShards) or ZeRO stage 1/2 files of fp16 / fp32 runs (cut by
//     DeepSpeed's flat layout, ds_optimizer_layout.h, of the mp_rank files' param_shapes);
//   - a Hugging Face GPT2 / BLOOM folder (config.json + safetensors or pytorch_model.bin, sharded or
//     not): every tensor renamed and laid out back to Megatron's form, the inverse of mds-ckpt-to-hf.
// Names are position based, so that checkpoints with other layer numbering or parallelism line up:
// "embedding.<name>" (the first layer file), "layers.<i>.<name>" (block i), "final_layernorm.<name>"
// (the last layer file); optimizer states append ":fp32", ":exp_avg" or ":exp_avg_sq"; the step is
// "optimizer.step".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mds/ckpt/ds_checkpoint.h"  // GlobalTensor

namespace mds::ckpt {

struct MergedTensorInfo {
    std::string name;  // position-based name (see above)
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    std::string where;  // the file (or files) it comes from, for messages
};

// Two copies of one tied parameter inside one checkpoint that must be equal: the word embedding
// that DeepSpeed's TiedLayerSpec keeps on the first and on the last pipeline stage (§9).
struct TiedPair {
    std::string name;                // "tied_modules.embed.word_embeddings.weight:fp32 (TP rank 0)"
    std::string first_where, last_where;
    std::function<GlobalTensor()> load_first, load_last;
};

class MergedTensors {
public:
    virtual ~MergedTensors() = default;
    // Opens `path`: a Hugging Face folder (holding config.json) or a DeepSpeed checkpoint (a root
    // with `latest`, or a global_step folder). `optimizer`: also list the optimizer states (a
    // DeepSpeed checkpoint with BF16 or ZeRO stage 1/2 optimizer files; anything else is an
    // mds::Error). `verify`: CRC-32 checks of what is read (TorchFile). Errors name the file and
    // what was expected.
    static std::unique_ptr<MergedTensors> open(const std::string& path, bool optimizer, bool verify = true);

    virtual std::string kind() const = 0;  // "deepspeed" or "huggingface"
    virtual std::string directory() const = 0;
    virtual const std::vector<MergedTensorInfo>& tensors() const = 0;
    // Tensor `index` of tensors(), merged and in Megatron's layout. Files stay open between calls
    // for neighbours, so walking tensors() in order opens each file about once.
    virtual GlobalTensor load(std::size_t index) = 0;
    // The vocabulary size before padding, when the folder records it (checkpoint_info).
    virtual std::optional<std::int64_t> original_vocab_size() const { return std::nullopt; }
    // The tied copies the folder holds twice (empty when it holds none); with `optimizer_states`
    // also exp_avg / exp_avg_sq, else the fp32 masters only.
    virtual std::vector<TiedPair> tied_pairs(bool optimizer_states) const {
        (void)optimizer_states;
        return {};
    }
    // Notes for the user about what was left out or how names were mapped, one line each.
    virtual std::vector<std::string> notes() const { return {}; }
};

}  // namespace mds::ckpt
