// The 3D parallel layout of a training: which global rank holds which tensor-, data- and
// pipeline-parallel coordinate, and the process groups built from them — the order of Megatron's
// initialize_model_parallel (BigScience's Megatron-DeepSpeed) and of DeepSpeed's
// PipeModelDataParallelTopology(num_pp, num_mp, num_dp), which agree:
//   rank = pp · (DP · TP) + dp · TP + tp
// so the TP ranks of a model replica are neighbours (one node, NVLink), data-parallel peers are TP
// apart, and pipeline stages are DP · TP apart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mds::dist {

struct Coordinates {
    int tp = 0;
    int dp = 0;
    int pp = 0;
};

class ParallelLayout {
public:
    // Throws mds::UsageError when world_size is not a multiple of tp × pp (naming the three and the
    // nearest sizes that work) or a degree is < 1.
    ParallelLayout(int world_size, int tensor_parallel, int pipeline_parallel);

    int world_size() const { return world_; }
    int tp() const { return tp_; }
    int pp() const { return pp_; }
    int dp() const { return dp_; }

    int rank_of(Coordinates c) const { return c.pp * dp_ * tp_ + c.dp * tp_ + c.tp; }
    Coordinates coordinates(int rank) const;

    // The groups containing `rank`, each a sorted list of global ranks.
    std::vector<int> tensor_group(int rank) const;    // same dp, pp
    std::vector<int> data_group(int rank) const;      // same tp, pp
    std::vector<int> pipeline_group(int rank) const;  // same tp, dp: stage 0 … PP-1
    std::vector<int> model_group(int rank) const;     // same dp: one model replica (TP × PP ranks)
    // The first and last stage of rank's pipeline (one rank when PP = 1): the ranks holding the
    // tied word embeddings, whose gradients are summed between them.
    std::vector<int> embedding_group(int rank) const;

    // Every group of one kind, in Megatron's creation order (all ranks take part in creating
    // every group, so the order must be the same everywhere).
    std::vector<std::vector<int>> all_tensor_groups() const;
    std::vector<std::vector<int>> all_data_groups() const;
    std::vector<std::vector<int>> all_pipeline_groups() const;
    std::vector<std::vector<int>> all_embedding_groups() const;

    bool is_first_stage(int rank) const { return coordinates(rank).pp == 0; }
    bool is_last_stage(int rank) const { return coordinates(rank).pp == pp_ - 1; }

private:
    int world_, tp_, pp_, dp_;
};

}  // namespace mds::dist
