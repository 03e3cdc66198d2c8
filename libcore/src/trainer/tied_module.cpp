// The last pipeline stage's tied embedding module as DeepSpeed's pipeline engine saves it
// (checkpoint_files.h TiedModule): its extra parameters fetched from the first stage, and the
// optimizer partitions re-cut to DeepSpeed's boundaries with them, exchanged between the
// data-parallel ranks.
#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <utility>

#include "checkpoint_files.h"
#include "mds/trainer/comm.h"
#include "mds/util/error.h"

namespace mds::trainer::checkpoint_detail {

namespace {

// The embedding module's parameters other than the word embeddings, in the model's order.
std::vector<model::Parameter> tied_extras(const model::GptModel& model) {
    const auto& c = model.config();
    std::vector<model::Parameter> out;
    // On the model's device: the pipeline all-reduce below runs there (NCCL wants GPU tensors).
    auto f32 = at::TensorOptions().dtype(at::kFloat).device(model.device());
    if (c.embed_layernorm) {
        out.push_back({model::kEmbeddingLayer, "word_embeddings.norm.weight", at::zeros({c.hidden_size}, f32),
                       model::TpSplit::Replicated, false, true, {}});
        out.push_back({model::kEmbeddingLayer, "word_embeddings.norm.bias", at::zeros({c.hidden_size}, f32),
                       model::TpSplit::Replicated, false, true, {}});
    }
    if (c.position_embedding == model::PositionEmbedding::Absolute)
        out.push_back({model::kEmbeddingLayer, "position_embeddings.weight",
                       at::zeros({c.max_position_embeddings, c.hidden_size}, f32), model::TpSplit::Replicated, true, true, {}});
    return out;
}

}  // namespace

TiedModule tied_module(const model::GptModel& model, Communicator* comm) {
    TiedModule t;
    const auto& params = model.parameters();
    const auto stage = model.pipeline_stage();
    if (!comm || stage.first() || !stage.last()) {
        if (comm && stage.size > 1) {
            // Contribute to the sum: the first stage its values, middle stages zeros.
            auto extras = tied_extras(model);
            std::vector<at::Tensor> values;
            for (auto& e : extras) {
                if (stage.first())
                    for (const auto& p : params)
                        if (p.layer == model::kEmbeddingLayer && p.name == e.name) e.tensor.copy_(p.tensor.detach());
                values.push_back(e.tensor);
            }
            if (!values.empty()) comm->all_reduce_sum(values, Group::Pipeline);
        }
        return t;
    }
    auto extras = tied_extras(model);
    std::vector<at::Tensor> values;
    for (auto& e : extras) values.push_back(e.tensor);
    if (!values.empty()) comm->all_reduce_sum(values, Group::Pipeline);
    for (std::size_t i = 0; i < params.size(); ++i) {
        t.params.push_back(params[i]);
        t.origin.push_back(static_cast<int>(i));
        if (params[i].tied_copy)
            for (auto& e : extras) {
                t.params.push_back(e);
                t.origin.push_back(-1);
            }
    }
    return t;
}

namespace {

using Holders = std::map<std::size_t, std::vector<std::pair<int, Fragment>>>;

// Where each parameter's elements are: [param] -> (rank, fragment); all here when not partitioned.
Holders held_elements(const std::vector<model::Parameter>& params, const StatePartition& mine, bool partitioned, int rank,
                      int count) {
    Holders held;
    if (partitioned) {
        const auto layout = optimizer_groups(params, count);
        for (const auto& group : layout)
            for (int r = 0; r < count; ++r)
                for (const auto& f : group.fragments[static_cast<std::size_t>(r)]) held[f.param].emplace_back(r, f);
    } else {
        for (const auto& group : mine.slices)
            for (const auto& sl : group) held[sl.where.param].emplace_back(rank, sl.where);
    }
    return held;
}

// This rank's own optimizer state (the slices of `mine`, which must outlive it), by parameter.
class LocalState {
public:
    LocalState(const StatePartition& mine, const std::vector<model::Parameter>& params) : params_(params) {
        for (const auto& group : mine.slices)
            for (const auto& sl : group) slices_[sl.where.param].push_back(&sl);
    }
    // Elements [lo, hi) of a parameter's masters (which 0), first (1) or second moments (2).
    at::Tensor piece(std::size_t param, std::int64_t lo, std::int64_t hi, int which) const {
        for (const auto* sl : slices_.at(param))
            if (lo >= sl->where.offset && hi <= sl->where.offset + sl->where.length) {
                const auto& t = which == 0 ? sl->master : which == 1 ? sl->exp_avg : sl->exp_avg_sq;
                return t.reshape({-1}).narrow(0, lo - sl->where.offset, hi - lo);
            }
        throw Error("checkpoint: parameter " + params_[param].full_name() + " elements [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + ") are not in this rank's optimizer partition");
    }

private:
    const std::vector<model::Parameter>& params_;
    std::map<std::size_t, std::vector<const StateSlice*>> slices_;
};

// A range of one parameter that rank `src` holds and rank `dst`'s DeepSpeed partition needs.
struct Piece {
    int src = 0, dst = 0;
    std::size_t fragment = 0;  // which of the target's fragments (its own parameters', in order)
    std::size_t param = 0;
    std::int64_t lo = 0, hi = 0;
};

// Every piece the ranks [first_dst, end_dst) need, in one order all ranks compute alike:
// (source, target, param, range).
std::vector<Piece> plan_pieces(const std::vector<FlatGroup>& ds, const TiedModule& tied, const Holders& held, int first_dst, int end_dst) {
    std::vector<Piece> pieces;
    for (int r = first_dst; r < end_dst; ++r) {
        std::size_t fragment = 0;
        for (const auto& group : ds)
            for (const auto& f : group.fragments[static_cast<std::size_t>(r)]) {
                const int origin = tied.origin[f.param];
                if (origin < 0) continue;
                const auto param = static_cast<std::size_t>(origin);
                if (const auto it = held.find(param); it != held.end())
                    for (const auto& [src, h] : it->second) {
                        const std::int64_t lo = std::max(f.offset, h.offset), hi = std::min(f.offset + f.length, h.offset + h.length);
                        if (hi > lo) pieces.push_back({src, r, fragment, param, lo, hi});
                    }
                ++fragment;
            }
    }
    return pieces;
}

// The exchange: one message each way between two ranks, masters then first then second moments.
// Returns what each peer sent this rank.
std::map<int, at::Tensor> exchange_pieces(const std::vector<Piece>& pieces, const LocalState& local,
                                          const std::vector<model::Parameter>& params, const StatePartition& mine, int rank,
                                          int count, Communicator* comm) {
    std::map<int, at::Tensor> received;
    const auto members = comm->members(Group::Data);
    const auto f32 = mine.slices.empty() || mine.slices[0].empty()
                         ? at::TensorOptions().dtype(at::kFloat).device(params.at(0).tensor.device())
                         : mine.slices[0][0].master.options();
    std::vector<Communicator::Transfer> transfers;
    for (int peer = 0; peer < count; ++peer) {
        if (peer == rank) continue;
        std::vector<at::Tensor> outgoing[3];
        std::int64_t incoming = 0;
        for (const auto& pc : pieces) {
            if (pc.src == rank && pc.dst == peer)
                for (int w = 0; w < 3; ++w) outgoing[w].push_back(local.piece(pc.param, pc.lo, pc.hi, w));
            if (pc.src == peer && pc.dst == rank) incoming += pc.hi - pc.lo;
        }
        if (!outgoing[0].empty()) {
            std::vector<at::Tensor> all;
            for (auto& o : outgoing) all.insert(all.end(), o.begin(), o.end());
            transfers.push_back({at::cat(all), members[static_cast<std::size_t>(peer)], true, 0});
        }
        if (incoming > 0) {
            received[peer] = at::empty({3 * incoming}, f32);
            transfers.push_back({received[peer], members[static_cast<std::size_t>(peer)], false, 0});
        }
    }
    comm->exchange(transfers, Group::Data);
    return received;
}

// This rank's partition, fragment by fragment, into `out` (its groups set): the extra parameters
// from the tied module with zero moments, the rest from the pieces (local or received).
void assemble_partition(StatePartition& out, const std::vector<FlatGroup>& ds, const TiedModule& tied, const std::vector<Piece>& pieces,
                        const std::map<int, at::Tensor>& received, const LocalState& local,
                        const std::vector<model::Parameter>& params) {
    const int rank = out.rank;
    std::map<int, std::int64_t> read, total;  // per source: elements taken so far, and in all
    for (const auto& pc : pieces)
        if (pc.dst == rank && pc.src != rank) total[pc.src] += pc.hi - pc.lo;
    std::size_t next = 0, fragment = 0;
    while (next < pieces.size() && pieces[next].dst != rank) ++next;
    for (std::size_t g = 0; g < out.groups.size(); ++g) {
        out.partition_numel.push_back(out.groups[g].partition);
        out.slices.emplace_back();
        for (const auto& f : ds[g].fragments[static_cast<std::size_t>(rank)]) {
            const int origin = tied.origin[f.param];
            if (origin < 0) {
                const auto v = tied.params[f.param].tensor.reshape({-1}).narrow(0, f.offset, f.length);
                const auto zeros = at::zeros({f.length}, v.options());
                out.slices.back().push_back({f, v, zeros, zeros});
                continue;
            }
            StateSlice sl{f, {}, {}, {}};
            at::Tensor* dst[3] = {&sl.master, &sl.exp_avg, &sl.exp_avg_sq};
            std::vector<at::Tensor> parts[3];
            std::int64_t covered = 0;
            for (; next < pieces.size() && pieces[next].dst == rank && pieces[next].fragment == fragment; ++next) {
                const auto& pc = pieces[next];
                const std::int64_t n = pc.hi - pc.lo;
                for (int w = 0; w < 3; ++w)
                    parts[w].push_back(pc.src == rank ? local.piece(pc.param, pc.lo, pc.hi, w)
                                                      : received.at(pc.src).narrow(0, w * total[pc.src] + read[pc.src], n));
                read[pc.src] += n;
                covered += n;
            }
            if (covered != f.length)
                throw Error("checkpoint: parameter " + params[static_cast<std::size_t>(origin)].full_name() + " has " +
                            std::to_string(covered) + " of " + std::to_string(f.length) + " elements of its DeepSpeed partition");
            for (int w = 0; w < 3; ++w) *dst[w] = parts[w].size() == 1 ? parts[w][0] : at::cat(parts[w]);
            out.slices.back().push_back(sl);
            ++fragment;
        }
    }
}

}  // namespace

StatePartition with_tied_module(const AdamOptimizer& opt, const std::vector<model::Parameter>& params,
                                const TiedModule& tied, int rank, int count, Communicator* comm) {
    StatePartition out;
    out.rank = rank;
    out.count = count;
    out.groups = optimizer_groups(tied.params, count);
    const auto& ds = out.groups;
    const bool partitioned = opt.partitioned() && count > 1;
    const StatePartition mine = partitioned ? opt.state_partition(rank, count) : opt.state_partition(0, 1);
    const Holders held = held_elements(params, mine, partitioned, rank, count);
    const LocalState local(mine, params);
    const int first_dst = partitioned ? 0 : rank, end_dst = partitioned ? count : rank + 1;
    const std::vector<Piece> pieces = plan_pieces(ds, tied, held, first_dst, end_dst);
    std::map<int, at::Tensor> received;
    if (partitioned) received = exchange_pieces(pieces, local, params, mine, rank, count, comm);
    assemble_partition(out, ds, tied, pieces, received, local, params);
    return out;
}

}  // namespace mds::trainer::checkpoint_detail
