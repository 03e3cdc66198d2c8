#include "mds/dist/layout.h"

#include <string>

#include "mds/util/error.h"

namespace mds::dist {

ParallelLayout::ParallelLayout(int world_size, int tensor_parallel, int pipeline_parallel)
    : world_(world_size), tp_(tensor_parallel), pp_(pipeline_parallel), dp_(0) {
    if (world_ < 1) throw UsageError("the world size must be at least 1, got " + std::to_string(world_));
    if (tp_ < 1) throw UsageError("--tensor-model-parallel-size must be at least 1, got " + std::to_string(tp_));
    if (pp_ < 1) throw UsageError("--pipeline-model-parallel-size must be at least 1, got " + std::to_string(pp_));
    const int model = tp_ * pp_;
    if (world_ % model != 0) {
        const int below = world_ / model * model, above = (world_ / model + 1) * model;
        std::string msg = "world size " + std::to_string(world_) + " is not divisible by --tensor-model-parallel-size (" +
                          std::to_string(tp_) + ") x --pipeline-model-parallel-size (" + std::to_string(pp_) + ") = " +
                          std::to_string(model) + "; launch ";
        if (below > 0) msg += std::to_string(below) + " or ";
        msg += std::to_string(above) + " processes, or change TP / PP";
        throw UsageError(msg);
    }
    dp_ = world_ / model;
}

Coordinates ParallelLayout::coordinates(int rank) const {
    if (rank < 0 || rank >= world_)
        throw Error("rank " + std::to_string(rank) + " is outside the world of " + std::to_string(world_));
    Coordinates c;
    c.tp = rank % tp_;
    c.dp = rank / tp_ % dp_;
    c.pp = rank / (tp_ * dp_);
    return c;
}

std::vector<int> ParallelLayout::tensor_group(int rank) const {
    auto c = coordinates(rank);
    std::vector<int> g;
    for (c.tp = 0; c.tp < tp_; ++c.tp) g.push_back(rank_of(c));
    return g;
}

std::vector<int> ParallelLayout::data_group(int rank) const {
    auto c = coordinates(rank);
    std::vector<int> g;
    for (c.dp = 0; c.dp < dp_; ++c.dp) g.push_back(rank_of(c));
    return g;
}

std::vector<int> ParallelLayout::pipeline_group(int rank) const {
    auto c = coordinates(rank);
    std::vector<int> g;
    for (c.pp = 0; c.pp < pp_; ++c.pp) g.push_back(rank_of(c));
    return g;
}

std::vector<int> ParallelLayout::model_group(int rank) const {
    const auto c = coordinates(rank);
    std::vector<int> g;
    for (int pp = 0; pp < pp_; ++pp)
        for (int tp = 0; tp < tp_; ++tp) g.push_back(rank_of({tp, c.dp, pp}));
    return g;
}

std::vector<int> ParallelLayout::embedding_group(int rank) const {
    const auto p = pipeline_group(rank);
    if (p.size() == 1) return p;
    return {p.front(), p.back()};
}

std::vector<std::vector<int>> ParallelLayout::all_tensor_groups() const {
    std::vector<std::vector<int>> out;
    for (int first = 0; first < world_; first += tp_) out.push_back(tensor_group(first));
    return out;
}

std::vector<std::vector<int>> ParallelLayout::all_data_groups() const {
    std::vector<std::vector<int>> out;
    for (int pp = 0; pp < pp_; ++pp)
        for (int tp = 0; tp < tp_; ++tp) out.push_back(data_group(rank_of({tp, 0, pp})));
    return out;
}

std::vector<std::vector<int>> ParallelLayout::all_pipeline_groups() const {
    std::vector<std::vector<int>> out;
    for (int first = 0; first < world_ / pp_; ++first) out.push_back(pipeline_group(first));
    return out;
}

std::vector<std::vector<int>> ParallelLayout::all_embedding_groups() const {
    std::vector<std::vector<int>> out;
    for (int first = 0; first < world_ / pp_; ++first) out.push_back(embedding_group(first));
    return out;
}

}  // namespace mds::dist
