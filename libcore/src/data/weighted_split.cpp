#include "mds/data/weighted_split.h"

#include <algorithm>  // std::max
#include <cmath>      // std::nearbyint
#include <fstream>
#include <map>
#include <sstream>

#include "mds/data/indexed_dataset.h"
#include "mds/util/error.h"

namespace mds::data {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's str.split() (no separator): the words between runs of whitespace.
std::vector<std::string> py_words(std::string_view s) {
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && is_space(s[i])) ++i;
        std::size_t j = i;
        while (j < s.size() && !is_space(s[j])) ++j;
        if (j > i) out.emplace_back(s.substr(i, j - i));
        i = j;
    }
    return out;
}

// Python's str.split(sep).
std::vector<std::string> py_split(std::string_view s, char sep) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (true) {
        const std::size_t k = s.find(sep, start);
        out.emplace_back(s.substr(start, k == std::string_view::npos ? std::string_view::npos : k - start));
        if (k == std::string_view::npos) break;
        start = k + 1;
    }
    return out;
}

std::string strip(std::string_view s) {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return std::string(s);
}

const char* const kFormat = "expected \"NAME: WEIGHT1 START:END PATH1, WEIGHT2 START:END PATH2, ...\" with START < END";

}  // namespace

const char* weighted_split_flag(int split) {
    switch (split) {
        case 0: return "--train-weighted-split-paths";
        case 1: return "--valid-weighted-split-paths";
        case 2: return "--test-weighted-split-paths";
    }
    return "--?-weighted-split-paths";
}

std::vector<WeightedSplitGroup> parse_weighted_split_paths(std::string_view flag, const std::vector<std::string>& values,
                                                           const std::string& where) {
    std::string ctx(flag);
    if (!where.empty()) {
        ctx += " (";
        ctx += where;
        ctx += ")";
    }
    if (flag == "--train-weighted-split-paths" && values.size() != 1)
        throw UsageError(ctx + ": only 1 dataset group is allowed for training, got " + std::to_string(values.size()));
    std::vector<WeightedSplitGroup> groups;
    for (std::size_t v = 0; v < values.size(); ++v) {
        const std::string& value = values[v];
        std::string what = ctx;
        what += ", group ";
        what += std::to_string(v + 1);
        what += " '";
        what += value;
        what += "'";
        const std::size_t colon = value.find(':');
        if (colon == std::string::npos) throw UsageError(what + ": no ':' after the group's name; " + kFormat);
        WeightedSplitGroup g;
        g.name = value.substr(0, colon);
        const std::string rest = strip(std::string_view(value).substr(colon + 1));
        const auto datasets = py_split(rest, ',');
        for (std::size_t d = 0; d < datasets.size(); ++d) {
            const auto words = py_words(datasets[d]);
            std::string item = what;
            item += ", dataset ";
            item += std::to_string(d + 1);
            item += " '";
            item += strip(datasets[d]);
            item += "'";
            if (words.size() != 3)
                throw UsageError(item + ": " + std::to_string(words.size()) + " words instead of 3; " + kFormat);
            const auto range = py_split(words[1], ':');
            if (range.size() != 2) throw UsageError(item + ": the range '" + words[1] + "' is not START:END; " + kFormat);
            double start = 0, end = 0;
            try {
                start = python_float(range[0], item + ": range start");
                end = python_float(range[1], item + ": range end");
            } catch (const UsageError&) {
                throw;
            } catch (const Error& e) {
                throw UsageError(e.what());
            }
            if (!(start < end)) throw UsageError(item + ": the range " + words[1] + " is empty; " + kFormat);
            // BMD asserts END <= 1 when it builds the dataset; a negative START reads documents from the
            // end of the dataset (numpy's negative indices) and then past its sizes array.
            if (end > 1.0) throw UsageError(item + ": the range " + words[1] + " ends after 1 (the whole dataset)");
            if (start < 0.0) throw UsageError(item + ": the range " + words[1] + " starts before 0");
            g.weights.push_back(words[0]);
            g.splits.push_back(words[1]);
            g.paths.push_back(words[2]);
        }
        groups.push_back(std::move(g));
    }
    return groups;
}

std::vector<std::string> read_weighted_split_paths_file(std::string_view flag, const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    const std::string what = std::string(flag) + " " + path;
    if (!in) throw UsageError(what + ": cannot open the file");
    std::stringstream buf;
    buf << in.rdbuf();
    const std::string text = buf.str();
    // Python's readlines(): lines end after '\n' (open() in text mode also ends them at '\r').
    std::vector<std::string> lines;
    std::size_t start = 0;
    for (std::size_t i = 0; i < text.size(); ++i)
        if (text[i] == '\n' || text[i] == '\r') {
            const std::size_t end = (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ? i + 2 : i + 1;
            lines.push_back(text.substr(start, i - start) + "\n");
            start = end;
            i = end - 1;
        }
    if (start < text.size()) lines.push_back(text.substr(start));
    if (lines.size() != 1)
        throw UsageError(what + ": " + std::to_string(lines.size()) +
                         " lines; expected exactly 1 line of double-quoted groups, \"G1\" \"G2\" ..., ending in a newline");
    const std::string& line = lines[0];
    if (line.size() < 3 || line.front() != '"' || line.compare(line.size() - 2, 2, "\"\n") != 0)
        throw UsageError(what + ": line 1 must start with '\"' and end with '\"' and a newline (\"G1\" \"G2\" ...)");
    const std::string inner = line.substr(1, line.size() - 3);
    std::vector<std::string> values;
    std::size_t p = 0;
    while (true) {
        const std::size_t k = inner.find("\" \"", p);
        values.push_back(inner.substr(p, k == std::string::npos ? std::string::npos : k - p));
        if (k == std::string::npos) break;
        p = k + 3;
    }
    return values;
}

std::array<std::int64_t, 2> get_split_by_range(std::string_view range, std::int64_t size, const std::string& what) {
    const auto parts = py_split(range, ':');
    if (parts.size() != 2) throw UsageError(what + ": the range '" + std::string(range) + "' is not START:END");
    double v[2] = {0, 0};
    try {
        for (int i = 0; i < 2; ++i) v[i] = python_float(parts[static_cast<std::size_t>(i)], what + ": range");
    } catch (const UsageError&) {
        throw;
    } catch (const Error& e) {
        throw UsageError(e.what());
    }
    if (!(v[0] <= 1 && v[1] <= 1)) throw UsageError(what + ": the range " + std::string(range) + " goes past 1");
    if (!(v[0] + v[1] > 0.0)) throw UsageError(what + ": the range " + std::string(range) + " has no positive bound");
    // Python round(float): to the nearest integer, halves to even (the default rounding mode).
    return {static_cast<std::int64_t>(std::nearbyint(v[0] * static_cast<double>(size))),
            static_cast<std::int64_t>(std::nearbyint(v[1] * static_cast<double>(size)))};
}

WeightedGroupMembers weighted_group_members(const WeightedSplitGroup& g, int split, const std::array<std::int64_t, 3>& num_samples,
                                            const std::string& what) {
    WeightedGroupMembers m;
    const auto k = static_cast<std::size_t>(split);
    if (g.paths.size() <= 1) {
        m.prefixes = g.paths;
        m.weights.assign(g.paths.size(), 1.0);
        m.num_samples.assign(g.paths.size(), num_samples[k]);
        return m;
    }
    const DataPath dp = weighted_split_data_path(g, what);
    if (dp.prefixes.size() >= 255)
        throw UsageError(what + ": " + std::to_string(dp.prefixes.size()) + " datasets; Megatron's blending takes at most 254");
    m.prefixes = dp.prefixes;
    m.weights = dp.weights;
    for (const auto& per : blended_num_samples(dp.weights, num_samples)) m.num_samples.push_back(per[k]);
    return m;
}

DataPath weighted_split_data_path(const WeightedSplitGroup& g, const std::string& what) {
    DataPath dp;
    dp.blended = true;
    double sum = 0.0;
    for (std::size_t i = 0; i < g.paths.size(); ++i) {
        double w = 0;
        try {
            w = python_float(g.weights[i], what + ": weight of " + g.paths[i]);
        } catch (const UsageError&) {
            throw;
        } catch (const Error& e) {
            throw UsageError(e.what());
        }
        // BMD takes any float; a negative weight only gives nonsense sample counts.
        if (w < 0) throw UsageError(what + ": the weight " + g.weights[i] + " of " + g.paths[i] + " is negative");
        dp.prefixes.push_back(strip(g.paths[i]));
        dp.weights.push_back(w);
        sum += w;  // Python: left to right
    }
    if (!(sum > 0.0)) throw UsageError(what + ": the weights must add up to more than 0");
    for (double& w : dp.weights) w /= sum;
    return dp;
}

// ---- the datasets ----------------------------------------------------------------------------

struct WeightedSplitDatasets::Opened {
    explicit Opened(const std::string& prefix) : indexed(prefix), sizes(indexed.sizes().to_vector()) {}
    IndexedDataset indexed;
    std::vector<std::int32_t> sizes;
};

struct WeightedSplitDatasets::Group {
    struct Member {
        const Opened* data = nullptr;
        IndexPlan plan;
        std::optional<IndexFiles> files;
    };
    std::vector<Member> members;
    std::vector<double> blend_weights;              // BlendableDataset's (numpy-normalized)
    mutable BlendingIndices blend;                  // a prefix of the blending index, grown on demand
};

WeightedSplitDatasets::~WeightedSplitDatasets() = default;

WeightedSplitDatasets::WeightedSplitDatasets(const WeightedSplitOptions& opt) {
    auto log = [&](const std::string& m) {
        if (opt.log) opt.log(m);
    };
    if (opt.seq_length <= 1) throw UsageError("--seq-length must be given and greater than 1");
    if (opt.seed < 0 || opt.seed > 0xFFFFFFFFLL)
        throw UsageError("--seed " + std::to_string(opt.seed) + " is out of range: numpy's RandomState takes 0 to 2**32 - 1");
    if (opt.groups[0].size() != 1)
        throw UsageError(std::string(weighted_split_flag(0)) + ": exactly 1 training dataset group is needed, got " +
                         std::to_string(opt.groups[0].size()));
    const std::uint32_t seed = check_numpy_seed(opt.seed);
    num_samples_ = train_valid_test_num_samples(opt.num_samples);
    train_iters_ = opt.num_samples.train_iters ? *opt.num_samples.train_iters : train_iters_from_samples(opt.num_samples);

    std::map<std::string, const Opened*> by_prefix;
    auto open = [&](const std::string& prefix) {
        auto it = by_prefix.find(prefix);
        if (it != by_prefix.end()) return it->second;
        opened_.push_back(std::make_unique<Opened>(prefix));
        by_prefix[prefix] = opened_.back().get();
        return static_cast<const Opened*>(opened_.back().get());
    };

    // Pass 1: open and plan everything (BMD order: train, valid, test; groups and paths as given),
    // so that a configuration Megatron would reject fails before any index is built.
    for (int k = 0; k < 3; ++k) {
        for (const auto& g : opt.groups[static_cast<std::size_t>(k)]) {
            const std::string what = std::string(weighted_split_flag(k)) + " group '" + g.name + "'";
            WeightedSplitGroupSummary s;
            s.name = g.name;
            s.split = k;
            s.blended = g.paths.size() > 1;
            auto grp = std::make_unique<Group>();
            const auto members = weighted_group_members(g, k, num_samples_, what);
            const auto& prefixes = members.prefixes;
            const auto& weights = members.weights;
            const auto& requested = members.num_samples;
            if (s.blended) grp->blend_weights = normalize_blend_weights(weights);
            for (std::size_t i = 0; i < prefixes.size(); ++i) {
                const std::string item = what + ", " + prefixes[i] + " " + g.splits[i];
                Group::Member m;
                try {
                    m.data = open(prefixes[i]);
                } catch (const Error& e) {
                    throw Error(what + ": " + e.what());
                }
                WeightedSplitMemberSummary ms;
                ms.prefix = prefixes[i];
                ms.weight = weights[i];
                ms.documents = static_cast<std::int64_t>(m.data->sizes.size());
                const auto range = get_split_by_range(g.splits[i], ms.documents, item);
                ms.doc_begin = range[0];
                ms.doc_end = range[1];
                // BMD builds no dataset for an empty range and then fails (BlendableDataset: len(None);
                // a validation group: iter(None)) or, for the training group, silently trains nothing.
                if (ms.doc_end <= ms.doc_begin)
                    throw Error(item + ": documents [" + std::to_string(ms.doc_begin) + ", " + std::to_string(ms.doc_end) +
                                ") of " + std::to_string(ms.documents) + " is empty; widen the range");
                ms.num_samples = requested[i];
                m.plan = plan_index_mappings(m.data->sizes, ms.doc_begin, ms.doc_end, ms.num_samples, opt.seq_length,
                                             prefixes[i] + " (" + g.name + ")", opt.cutoff_last_epoch);
                ms.samples = m.plan.total_samples();
                ms.files = index_cache_paths(prefixes[i], g.name, ms.num_samples, opt.seq_length, opt.seed);
                s.size += ms.samples;
                s.members.push_back(std::move(ms));
                grp->members.push_back(std::move(m));
            }
            summaries_[static_cast<std::size_t>(k)].push_back(std::move(s));
            groups_[static_cast<std::size_t>(k)].push_back(std::move(grp));
        }
    }

    // Pass 2: build what is missing and map the files.
    for (std::size_t k = 0; k < 3; ++k) {
        for (std::size_t gi = 0; gi < groups_[k].size(); ++gi) {
            Group& grp = *groups_[k][gi];
            WeightedSplitGroupSummary& s = summaries_[k][gi];
            log(std::string(kSplitNames[k]) + " group '" + s.name + "': " + std::to_string(s.members.size()) +
                (s.members.size() == 1 ? " dataset, " : " datasets blended, ") + std::to_string(s.size) + " samples");
            for (std::size_t i = 0; i < grp.members.size(); ++i) {
                auto& m = grp.members[i];
                auto& ms = s.members[i];
                log("    " + ms.prefix + ": documents [" + std::to_string(ms.doc_begin) + ", " + std::to_string(ms.doc_end) +
                    ") of " + std::to_string(ms.documents) + ", " + std::to_string(ms.num_samples) + " samples requested");
                if (!index_cache_complete(ms.files)) {
                    save_index_mappings(ms.files, build_index_mappings(m.data->sizes, m.plan, seed));
                    ms.built = true;
                }
                m.files.emplace(ms.files, m.plan, m.data->sizes);
            }
        }
    }
}

const std::vector<WeightedSplitGroupSummary>& WeightedSplitDatasets::groups(int split) const {
    if (split < 0 || split > 2) throw Error("split must be 0 (train), 1 (valid) or 2 (test)");
    return summaries_[static_cast<std::size_t>(split)];
}

std::pair<std::size_t, std::size_t> WeightedSplitDatasets::locate(int split, std::size_t group, std::int64_t n) const {
    const auto& sums = groups(split);
    if (group >= sums.size()) throw Error(std::string(kSplitNames[static_cast<std::size_t>(split)]) + " group " +
                                          std::to_string(group) + " does not exist");
    const Group& grp = *groups_[static_cast<std::size_t>(split)][group];
    const WeightedSplitGroupSummary& s = sums[group];
    if (n < 0 || n >= s.size)
        throw Error("sample " + std::to_string(n) + " of " + kSplitNames[static_cast<std::size_t>(split)] + " group '" +
                    s.name + "' is out of range: it has " + std::to_string(s.size) + " samples");
    std::size_t d = 0;
    auto i = static_cast<std::size_t>(n);
    if (s.blended) {
        if (static_cast<std::int64_t>(grp.blend.dataset_index.size()) <= n) {
            // The first k entries do not depend on the total size: grow by doubling.
            const std::int64_t have = static_cast<std::int64_t>(grp.blend.dataset_index.size());
            const std::int64_t want = std::min(s.size, std::max({n + 1, 2 * have, std::int64_t{4096}}));
            grp.blend = build_blending_indices(grp.blend_weights, want);
        }
        d = grp.blend.dataset_index[static_cast<std::size_t>(n)];
        i = static_cast<std::size_t>(grp.blend.dataset_sample_index[static_cast<std::size_t>(n)]);
        if (static_cast<std::int64_t>(i) >= s.members[d].samples)
            throw Error("sample " + std::to_string(n) + " of group '" + s.name + "' is sample " + std::to_string(i) + " of " +
                        s.members[d].prefix + ", which has only " + std::to_string(s.members[d].samples) +
                        " (Megatron-DeepSpeed would fail with IndexError here)");
    }
    return {d, i};
}

std::vector<std::int64_t> WeightedSplitDatasets::sample(int split, std::size_t group, std::int64_t n) const {
    const auto [d, i] = locate(split, group, n);
    const auto& m = groups_[static_cast<std::size_t>(split)][group]->members[d];
    return read_gpt_sample(m.files->view(), i, sequence_reader(m.data->indexed));
}

SampleOrigin WeightedSplitDatasets::origin(int split, std::size_t group, std::int64_t n) const {
    const auto [d, i] = locate(split, group, n);
    const auto& m = groups_[static_cast<std::size_t>(split)][group]->members[d];
    SampleOrigin o;
    o.dataset = d;
    o.prefix = groups(split)[group].members[d].prefix;
    o.dataset_sample = static_cast<std::int64_t>(i);
    o.source = gpt_sample_source(m.files->view(), i, m.data->sizes);
    return o;
}

}  // namespace mds::data
