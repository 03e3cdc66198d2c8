// Internal to mds-ckpt-reshape (reshape.cpp, reshape_plan.cpp, optim_reshard.cpp): the target layout
// worked out before anything is written: every parameter with its source and target shapes, the
// vocabulary sizes, the stages with their parameters in DeepSpeed's traversal order split into the
// optimizer groups (specs/checkpoints.md §5.1, §6).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "mds/ckpt/ds_checkpoint.h"
#include "mds/ckpt/ds_optimizer_layout.h"
#include "mds/ckpt/reshape.h"
#include "mds/ckpt/tp_reshard.h"
#include "mds/ckpt/universal.h"

namespace mds::ckpt::reshape_detail {

struct Param {
    std::string ds_name;                       // "tied_modules.embed.word_embeddings.weight", "3.input_layernorm.weight"
    int layer = 0;                             // on-disk layer index
    std::string name;                          // inside the layer file
    DType dtype = DType::F32;
    std::vector<std::int64_t> source_shape;    // global, as merged from the source
    std::vector<std::int64_t> source_slice;    // one source TP shard
    std::vector<std::int64_t> target_shape;    // global, after the vocabulary re-pad
    std::vector<std::int64_t> target_shard;    // one target TP shard
    TpLayout layout;
    bool vocab = false;                        // word_embeddings.weight: rows re-padded
    bool weight_decay = true;
    std::int64_t shard_numel() const;
};

struct Stage {
    ReshapeStage info;
    std::vector<std::size_t> params;               // into Plan::params, DeepSpeed's traversal order
    std::vector<DsParamGroup> groups;              // the optimizer groups of those (Megatron's split)
    std::vector<std::string> buffer_names;         // persistent buffers (mp_rank 'buffer_names')
};

struct Plan {
    std::unique_ptr<DsCheckpoint> source;
    std::unique_ptr<TorchFile> mp_rank0;             // the source rank-0 engine file, copied into every target one
    std::unique_ptr<Bf16OptimizerShards> optimizer;  // with --with-optimizer
    std::string tag, source_root;
    int tp = 1, pp = 1, dp = 1;                      // target degrees
    int source_dp = 1;
    bool verify = true;                              // ReshapeOptions::verify
    bool glu = false;
    std::int64_t heads = 0;
    std::int64_t source_vocab = 0, target_vocab = 0, original_vocab = 0;
    std::string partition_method;
    std::vector<Param> params;
    std::map<std::string, std::size_t> by_name;
    std::vector<Stage> stages;
    int groups = 3;

    bool vocab_changes() const { return target_vocab != source_vocab; }
};

// DeepSpeed's param_shapes of a target stage: one OrderedDict per optimizer group, parameter name ->
// torch.Size of its target TP shard, in flat-buffer order.
PyValue stage_param_shapes(const Plan& plan, int stage);

// Reads the source, checks the request against it, and lays out the target. Notes (warnings the
// user should see) go to options.note.
Plan make_plan(const std::string& src, const ReshapeOptions& options);

// Target stage `stage`'s optimizer groups laid out over the target DP (DeepSpeed's flat buffers and
// partitions, ds_optimizer_layout.h), with Plan::params indices and target TP shard sizes.
std::vector<DsFlatGroup> stage_optimizer_layout(const Plan& plan, const Stage& stage);

// Writes the BF16 optimizer files of target stage `stage` into `out_dir` (and, when `universal_zero`
// is not empty, each parameter's universal state files under it, once per parameter: the first
// stage to insert its name into `universal_written`, under `universal_mutex`, writes it). Stages
// may run at the same time.
void write_stage_optimizer(const Plan& plan, int stage, const std::string& out_dir, const std::string& universal_zero,
                           std::set<std::string>& universal_written, std::mutex& universal_mutex,
                           const std::function<void(std::uint64_t)>& progress);

// Bytes of the tensors of every target BF16 optimizer file, for the progress total.
std::uint64_t optimizer_bytes(const Plan& plan);

// The parts of a universal checkpoint folder besides the parameters, as ds_to_universal writes
// them: zero/optimizer_state.pt (the optimizer's unsharded keys and param_groups) and the source's
// mp_rank files, copied.
void write_universal_common(const Plan& plan, const std::string& universal_dir);

}  // namespace mds::ckpt::reshape_detail
