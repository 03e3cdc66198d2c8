// Reading a DeepSpeed pipeline checkpoint as one model (specs/checkpoints.md §1, §4, §6.2): the tag
// folder's layer files found on disk (first = embedding, last = final norm, the rest = blocks, in
// order; no numbering offset is assumed), its TP and PP degrees, Megatron's args from mp_rank_00,
// and each parameter merged over its TP shards into the global tensor, one at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mds/ckpt/pickle.h"
#include "mds/ckpt/safetensors.h"  // DType
#include "mds/ckpt/torch_file.h"

namespace mds::ckpt {

// How Megatron splits a parameter over tensor-parallel ranks, hence how shards merge.
enum class TpRule {
    ColumnParallel,  // shards concatenated along dim 0: vocab- and column-parallel (Megatron's
                     // VocabParallelEmbedding, ColumnParallelLinear): word_embeddings.weight,
                     // query_key_value.*, dense_h_to_4h.*
    RowParallel,     // along dim 1: row-parallel weights (RowParallelLinear): self_attention.dense.weight,
                     // mlp.dense_4h_to_h.weight
    Replicated       // layer norms (incl. the embedding's and the final one), row-parallel biases, positions
};
TpRule tp_rule(const std::string& name);  // by the name inside its layer file

// Step order of tags: by the number after "global_step" (global_step200 before global_step1000,
// which name order would swap), equal numbers by name (global_step1000 before
// global_step1000_universal); names without a number come last, by name.
bool ds_tag_before(std::string_view a, std::string_view b);
// The tag folders of checkpoint root `root` in ds_tag_before order: the folders (or links to
// folders) whose name starts with "global_step" and is a plain folder name (checked_entry_name).
// Every other such name is skipped; `skipped` (when set) gets the reason, one line each. Callers
// that need DeepSpeed's exact "global_step<N>" keep the names parse_ds_tag accepts.
std::vector<std::string> list_ds_tags(const std::string& root, const std::function<void(const std::string&)>& skipped = {});

// A global tensor: dtype, shape and row-major little-endian bytes.
struct GlobalTensor {
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    std::vector<std::byte> data;
};

class DsCheckpoint {
public:
    // `path` is a checkpoint root (holding `latest`) or a global_step<N> folder; `tag` picks a tag
    // of a root (default: the one `latest` names); either is resolved by checked_tag_dir, so it
    // names a folder inside `path`. Errors name the folder and what is missing. `verify`: check
    // the CRC-32 of every pickle and of every storage whose data is used (TorchFile).
    explicit DsCheckpoint(const std::string& path, const std::string& tag = "", bool verify = true);

    const std::string& directory() const { return dir_; }
    int tp() const { return tp_; }
    int pp() const { return pp_; }
    // On-disk layer indices, sorted: front() the embedding, back() the final norm.
    const std::vector<int>& layers() const { return layers_; }
    std::string layer_file(int layer, int tp_rank) const;
    // Megatron's args (the attributes of the Namespace in mp_rank_00) and checkpoint_version.
    const PyDict& args() const;
    const PyValue* arg(const std::string& name) const { return args().find(name); }
    std::int64_t int_arg(const std::string& name) const;  // an error naming it when absent
    double checkpoint_version() const { return checkpoint_version_; }

    // The TP shards of one layer, opened (mapped) together.
    class Layer {
    public:
        const std::vector<std::string>& names() const { return names_; }  // in state-dict order
        // Shape of the merged tensor, from the shards' headers only.
        std::vector<std::int64_t> shape(const std::string& name) const;
        DType dtype(const std::string& name) const;
        // The merged tensor: shards concatenated by tp_rule(name); replicated shards averaged in
        // fp32 and rounded back (identical shards give their value back bit for bit). Fused QKV
        // rows are normalised to the [heads, 3, head_dim] layout of checkpoint_version >= 2.
        GlobalTensor merge(const std::string& name) const;
        // The TP shards of `name` (views into the mapped files, data not yet verified), checked to
        // fit together as merge() checks them: the same dtype, and the same shape except along the
        // dimension tp_rule(name) concatenates. For readers that lay shards out themselves.
        std::vector<TorchTensor> tp_shards(const std::string& name) const;
        // Megatron's checkpoint_version of the args (fused QKV rows: [heads, 3, d] from 2.0 on) and
        // the attention heads over all TP ranks.
        double checkpoint_version() const { return version_; }
        std::int64_t heads() const { return heads_; }

    private:
        friend class DsCheckpoint;
        std::vector<std::unique_ptr<TorchFile>> shards_;
        std::vector<std::string> names_;
        double version_ = 3.0;
        std::int64_t heads_ = 0;
        TorchTensor shard(std::size_t r, const std::string& name) const;
    };
    Layer open_layer(int layer) const;

private:
    std::string dir_;
    int tp_ = 0, pp_ = 0;
    std::vector<int> layers_;
    std::unique_ptr<TorchFile> mp_rank_;
    double checkpoint_version_ = 0;
    bool verify_ = true;
};

}  // namespace mds::ckpt
