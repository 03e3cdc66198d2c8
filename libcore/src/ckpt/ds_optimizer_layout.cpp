// DeepSpeed's flat optimizer layout (ds_optimizer_layout.h).
#include "mds/ckpt/ds_optimizer_layout.h"

#include <algorithm>
#include <string>

#include "mds/util/error.h"

namespace mds::ckpt {

std::vector<DsParamGroup> megatron_param_groups(const std::vector<std::size_t>& params, const std::vector<bool>& weight_decay,
                                                int group_count) {
    if (group_count != 2 && group_count != 3)
        throw Error(std::to_string(group_count) + " optimizer parameter groups; Megatron makes 2 or 3");
    if (weight_decay.size() != params.size())
        throw Error("weight-decay flags for " + std::to_string(weight_decay.size()) + " of " + std::to_string(params.size()) +
                    " parameters");
    std::vector<std::size_t> wd, no_wd;
    for (std::size_t i = 0; i < params.size(); ++i) (weight_decay[i] ? wd : no_wd).push_back(params[i]);
    if (group_count == 2) return {{wd, true}, {no_wd, false}};
    const auto half = static_cast<std::ptrdiff_t>(wd.size() / 2);
    return {{{wd.begin(), wd.begin() + half}, true}, {{wd.begin() + half, wd.end()}, true}, {no_wd, false}};
}

namespace {

// Each rank's fragments of a group whose offsets, numel and partition are set.
void cut_partitions(DsFlatGroup& g, const std::vector<std::int64_t>& numel, int dp) {
    g.fragments.assign(static_cast<std::size_t>(dp), {});
    for (std::size_t k = 0; k < g.params.size(); ++k) {
        const std::int64_t pos = g.offsets[k], n = numel[g.params[k]];
        for (int r = 0; r < dp; ++r) {
            const std::int64_t lo = std::max(pos, r * g.partition), hi = std::min(pos + n, (r + 1) * g.partition);
            if (hi > lo) g.fragments[static_cast<std::size_t>(r)].push_back({g.params[k], lo - pos, hi - lo, lo - r * g.partition});
        }
    }
}

}  // namespace

std::vector<DsFlatGroup> ds_optimizer_layout(const std::vector<DsParamGroup>& groups, const std::vector<std::int64_t>& numel,
                                             int dp) {
    if (dp < 1) throw Error("optimizer layout over " + std::to_string(dp) + " data-parallel ranks");
    const std::int64_t align = 2 * static_cast<std::int64_t>(dp);
    std::vector<DsFlatGroup> out;
    for (const auto& group : groups) {
        DsFlatGroup g;
        g.params = group.params;
        g.weight_decay = group.weight_decay;
        for (auto i : g.params) {
            if (i >= numel.size())
                throw Error("optimizer group names parameter " + std::to_string(i) + " of " + std::to_string(numel.size()));
            g.offsets.push_back(g.numel);
            g.numel += numel[i];
        }
        g.padding = (align - g.numel % align) % align;
        g.partition = (g.numel + g.padding) / dp;
        cut_partitions(g, numel, dp);
        out.push_back(std::move(g));
    }
    return out;
}

std::int64_t DsFlatGroup::data_in_partition(int rank) const {
    return std::clamp<std::int64_t>(numel - rank * partition, 0, partition);
}

std::vector<std::pair<int, DsFragment>> DsFlatGroup::pieces_of(std::size_t k) const {
    std::vector<std::pair<int, DsFragment>> out;
    if (partition == 0) return out;
    const std::size_t param = params.at(k);
    for (auto r = static_cast<std::size_t>(offsets.at(k) / partition); r < fragments.size(); ++r) {
        const auto& frags = fragments[r];
        const auto it = std::find_if(frags.begin(), frags.end(), [&](const DsFragment& f) { return f.param == param; });
        if (it == frags.end()) break;
        out.emplace_back(static_cast<int>(r), *it);
    }
    return out;
}

bool ds_partitions_optimizer_states(std::int64_t zero_stage, bool bf16) { return zero_stage == 1 || bf16; }

}  // namespace mds::ckpt
