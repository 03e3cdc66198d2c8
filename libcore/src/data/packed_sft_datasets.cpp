#include "mds/data/packed_sft_datasets.h"

#include <algorithm>
#include <cstdio>  // snprintf
#include <map>

#include "mds/data/blending.h"
#include "mds/data/numpy_random.h"  // check_numpy_seed
#include "mds/util/error.h"

namespace mds::data {

struct PackedSftDatasets::Group {
    std::vector<std::unique_ptr<PackedSftDataset>> members;
    std::vector<double> blend_weights;  // BlendableDataset's (numpy-normalized)
    mutable BlendingIndices blend;      // a prefix of the blending index, grown on demand
};

namespace {

// One dataset to build: which pair, under which name, which documents, how many samples.
struct Planned {
    int split = 0;
    std::size_t group = 0, member = 0;
    const SftPairDataset* pair = nullptr;
    PackedSftDatasetConfig config;
};

std::string join_numbers(const std::vector<std::int64_t>& v, std::size_t most) {
    std::string s;
    for (std::size_t i = 0; i < v.size() && i < most; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    if (v.size() > most) s += ", ...";
    return s;
}

}  // namespace

PackedSftDatasets::~PackedSftDatasets() = default;

PackedSftDatasets::PackedSftDatasets(const PackedSftDatasetsOptions& opt) {
    auto log = [&](const std::string& m) {
        if (opt.log) opt.log(m);
    };
    auto warn = [&](const std::string& m) {
        warnings_.push_back(m);
        log("warning: " + m);
    };
    if (opt.seq_length < 1) throw UsageError("--seq-length must be given and positive");
    if (opt.pad_token < 0)
        throw UsageError("packed fine-tuning data needs the tokenizer's pad token (Megatron-DeepSpeed: tokenizer.pad) "
                         "for the end of each row");
    if (opt.seed < 0 || opt.seed > 0xFFFFFFFFLL)
        throw UsageError("--seed " + std::to_string(opt.seed) + " is out of range: numpy's RandomState takes 0 to 2**32 - 1");
    check_numpy_seed(opt.seed);
    num_samples_ = train_valid_test_num_samples(opt.num_samples);
    train_iters_ = opt.num_samples.train_iters ? *opt.num_samples.train_iters : train_iters_from_samples(opt.num_samples);

    std::map<std::string, const SftPairDataset*> by_prefix;
    auto open = [&](const std::string& prefix) {
        if (auto it = by_prefix.find(prefix); it != by_prefix.end()) return it->second;
        pairs_.push_back(std::make_unique<SftPairDataset>(prefix));
        return by_prefix[prefix] = pairs_.back().get();
    };
    PackedSftDatasetConfig base;
    base.seq_length = opt.seq_length;
    base.seed = opt.seed;
    base.pad_token = opt.pad_token;
    base.read_split_documents = opt.read_split_documents;
    base.verify = opt.verify;

    // Pass 1: open and plan everything, so that a configuration Megatron would reject fails before
    // any index is built. `planned` is in BMD's build order.
    std::vector<Planned> planned;
    auto add_group = [&](int k, const std::string& name, bool blended, std::vector<double> weights) {
        auto& sums = summaries_[static_cast<std::size_t>(k)];
        PackedSftGroupSummary s;
        s.name = name;
        s.split = k;
        s.blended = blended;
        sums.push_back(std::move(s));
        auto g = std::make_unique<Group>();
        if (blended) g->blend_weights = normalize_blend_weights(weights);
        groups_[static_cast<std::size_t>(k)].push_back(std::move(g));
        return sums.size() - 1;
    };
    auto add_member = [&](int k, std::size_t gi, const SftPairDataset* pair, double weight, std::int64_t begin,
                          std::int64_t end, std::int64_t num_samples) {
        auto& s = summaries_[static_cast<std::size_t>(k)][gi];
        PackedSftMemberSummary m;
        m.prefix = pair->prefix();
        m.weight = weight;
        m.examples = pair->size();
        m.doc_begin = begin;
        m.doc_end = end;
        m.first_example = opt.read_split_documents ? begin : 0;
        m.num_samples = num_samples;
        s.members.push_back(m);
        Planned p;
        p.split = k;
        p.group = gi;
        p.member = s.members.size() - 1;
        p.pair = pair;
        p.config = base;
        p.config.name = s.name;
        p.config.doc_begin = begin;
        p.config.doc_end = end;
        p.config.num_samples = num_samples;
        planned.push_back(p);
    };

    if (!opt.data_path.empty()) {
        const DataPath dp = parse_data_path(opt.data_path);
        const auto per = dp.blended ? blended_num_samples(dp.weights, num_samples_)
                                    : std::vector<std::array<std::int64_t, 3>>{num_samples_};
        std::vector<std::array<std::int64_t, 4>> bounds;
        for (const auto& prefix : dp.prefixes) {
            const SftPairDataset* pair = open(prefix);
            // The split counts the targets' sequences (BMD: target_indexed_dataset.sizes.shape[0]).
            bounds.push_back(get_train_valid_test_split(opt.split, pair->size()));
        }
        std::array<std::size_t, 3> group_of{};
        for (int k = 0; k < 3; ++k) {
            const auto ku = static_cast<std::size_t>(k);
            std::size_t present = 0;
            for (const auto& b : bounds) present += b[ku + 1] > b[ku] ? 1 : 0;
            // BlendableDataset(datasets, weights) asserts len(datasets) == len(weights).
            if (dp.blended && present != 0 && present != dp.prefixes.size())
                throw Error(std::string("the ") + kSplitNames[ku] + " split (--split '" + opt.split + "') is empty for some " +
                            "datasets but not all; Megatron-DeepSpeed's BlendableDataset fails on this (AssertionError: " +
                            "num_datasets == len(weights)). Use a split that gives every dataset " + kSplitNames[ku] +
                            " documents, or none");
            group_of[ku] = present ? add_group(k, kSplitNames[ku], dp.blended, dp.weights) : SIZE_MAX;
        }
        // BMD's order: per dataset, train, valid, test.
        for (std::size_t d = 0; d < dp.prefixes.size(); ++d)
            for (int k = 0; k < 3; ++k) {
                const auto ku = static_cast<std::size_t>(k);
                if (group_of[ku] == SIZE_MAX) continue;
                add_member(k, group_of[ku], by_prefix[dp.prefixes[d]], dp.weights[d], bounds[d][ku], bounds[d][ku + 1],
                           per[d][ku]);
            }
    } else if (!opt.groups[0].empty()) {
        if (opt.groups[0].size() != 1)
            throw UsageError(std::string(weighted_split_flag(0)) + ": exactly 1 training dataset group is needed, got " +
                             std::to_string(opt.groups[0].size()));
        for (int k = 0; k < 3; ++k) {
            for (const auto& g : opt.groups[static_cast<std::size_t>(k)]) {
                const std::string what = std::string(weighted_split_flag(k)) + " group '" + g.name + "'";
                const bool blended = g.paths.size() > 1;
                const auto members = weighted_group_members(g, k, num_samples_, what);
                const auto& prefixes = members.prefixes;
                const auto& weights = members.weights;
                const auto& requested = members.num_samples;
                const std::size_t gi = add_group(k, g.name, blended, weights);
                for (std::size_t i = 0; i < prefixes.size(); ++i) {
                    const std::string item = what + ", " + prefixes[i] + " " + g.splits[i];
                    const SftPairDataset* pair = nullptr;
                    try {
                        pair = open(prefixes[i]);
                    } catch (const Error& e) {
                        throw Error(what + ": " + e.what());
                    }
                    const auto range = get_split_by_range(g.splits[i], pair->size(), item);
                    // BMD builds no dataset for an empty range and fails later (len(None), iter(None)).
                    if (range[1] <= range[0])
                        throw Error(item + ": documents [" + std::to_string(range[0]) + ", " + std::to_string(range[1]) +
                                    ") of " + std::to_string(pair->size()) + " is empty; widen the range");
                    add_member(k, gi, pair, weights[i], range[0], range[1], requested[i]);
                }
            }
        }
    } else {
        throw UsageError("no fine-tuning data: give --data-path or --train-weighted-split-paths");
    }

    for (const auto& p : planned)
        if (p.config.doc_begin > 0 && !opt.read_split_documents)
            warn(p.pair->prefix() + " (" + p.config.name + "): documents [" + std::to_string(p.config.doc_begin) + ", " +
                 std::to_string(p.config.doc_end) + "): Megatron-DeepSpeed's DecoderPackedMTFDataset numbers a split's "
                 "examples from 0 and so reads examples [0, " + std::to_string(p.config.doc_end - p.config.doc_begin) +
                 ") instead; so does this run, for the same samples (they overlap the split that starts at document 0)");

    // Pass 2: build what is missing and map the files.
    for (const auto& p : planned) {
        auto& g = *groups_[static_cast<std::size_t>(p.split)][p.group];
        auto& s = summaries_[static_cast<std::size_t>(p.split)][p.group];
        auto& ms = s.members[p.member];
        const std::string what = p.pair->prefix() + " (" + p.config.name + ")";
        if (g.members.size() <= p.member) g.members.resize(p.member + 1);
        g.members[p.member] = std::make_unique<PackedSftDataset>(*p.pair, p.config);
        const PackedSftDataset& ds = *g.members[p.member];
        ms.samples = ds.size();
        ms.epochs = ds.epochs();
        ms.too_long = ds.too_long();
        ms.files = ds.files();
        ms.status = ds.status();
        s.size += ms.samples;
        log(what + ": documents [" + std::to_string(p.config.doc_begin) + ", " + std::to_string(p.config.doc_end) + "), " +
            std::to_string(ms.samples) + " packed rows of " + std::to_string(opt.seq_length + 1) + " tokens for " +
            std::to_string(p.config.num_samples) + " samples requested (index " + packed_index_status_name(ms.status) +
            ": " + ms.files.sample_idx + ")");
        if (!ms.too_long.empty())
            warn(what + ": " + std::to_string(ms.too_long.size()) + " examples longer than a row of " +
                 std::to_string(opt.seq_length + 1) + " tokens are skipped (examples " + join_numbers(ms.too_long, 8) +
                 "), as Megatron-DeepSpeed skips them");
    }
}

const std::vector<PackedSftGroupSummary>& PackedSftDatasets::groups(int split) const {
    if (split < 0 || split > 2) throw Error("split must be 0 (train), 1 (valid) or 2 (test)");
    return summaries_[static_cast<std::size_t>(split)];
}

std::int64_t PackedSftDatasets::size(int split, std::size_t group) const {
    const auto& g = groups(split);
    if (group >= g.size())
        throw Error(std::string("there is no ") + kSplitNames[static_cast<std::size_t>(split)] + " dataset " +
                    std::to_string(group));
    return g[group].size;
}

PackedSample PackedSftDatasets::sample(int split, std::size_t group, std::int64_t n) const {
    const std::int64_t total = size(split, group);
    const auto& s = summaries_[static_cast<std::size_t>(split)][group];
    const Group& g = *groups_[static_cast<std::size_t>(split)][group];
    if (n < 0 || n >= total)
        throw Error("sample " + std::to_string(n) + " of " + kSplitNames[static_cast<std::size_t>(split)] + " dataset '" +
                    s.name + "' is out of range: it has " + std::to_string(total) + " samples");
    std::size_t d = 0;
    std::int64_t i = n;
    if (s.blended) {
        if (static_cast<std::int64_t>(g.blend.dataset_index.size()) <= n) {
            // The first k entries do not depend on the total size: grow by doubling.
            const auto have = static_cast<std::int64_t>(g.blend.dataset_index.size());
            g.blend = build_blending_indices(g.blend_weights, std::min(total, std::max({n + 1, 2 * have, std::int64_t{4096}})));
        }
        d = g.blend.dataset_index[static_cast<std::size_t>(n)];
        i = g.blend.dataset_sample_index[static_cast<std::size_t>(n)];
        if (i >= s.members[d].samples)
            throw Error("sample " + std::to_string(n) + " of '" + s.name + "' is sample " + std::to_string(i) + " of " +
                        s.members[d].prefix + ", which has only " + std::to_string(s.members[d].samples) +
                        " (Megatron-DeepSpeed would fail with IndexError here)");
    }
    return g.members[d]->get(i);
}

std::string format_summary(const PackedSftDatasets& ds) {
    std::string out = "samples requested: train " + std::to_string(ds.num_samples()[0]) + ", valid " +
                      std::to_string(ds.num_samples()[1]) + ", test " + std::to_string(ds.num_samples()[2]) + " (" +
                      std::to_string(ds.train_iters()) + " training iterations)\n";
    for (int k = 0; k < 3; ++k)
        for (const auto& g : ds.groups(k)) {
            out += std::string(kSplitNames[static_cast<std::size_t>(k)]) + " '" + g.name + "': " + std::to_string(g.size) +
                   " packed samples" + (g.blended ? ", blended" : "") + "\n";
            for (const auto& m : g.members) {
                char weight[32];
                std::snprintf(weight, sizeof weight, "%.6g", m.weight);
                out += "  " + m.prefix + (g.blended ? std::string(" (weight ") + weight + ")" : std::string()) +
                       ": documents [" + std::to_string(m.doc_begin) + ", " + std::to_string(m.doc_end) + ") of " +
                       std::to_string(m.examples) + ", examples read from " + std::to_string(m.first_example) + ", " +
                       std::to_string(m.num_samples) + " samples requested, " + std::to_string(m.samples) +
                       " in the index (" + packed_index_status_name(m.status) + ")\n";
                out += "    " + m.files.sample_idx + "\n    " + m.files.shuffle_idx + "\n";
            }
        }
    return out;
}

}  // namespace mds::data
