#include "mds/data/gpt_datasets.h"

#include <algorithm>
#include <chrono>
#include <cstdio>  // std::snprintf

#include <nlohmann/json.hpp>  // summary_json

#include "mds/util/error.h"

namespace mds::data {

struct GptDatasets::Dataset {
    explicit Dataset(const std::string& prefix) : indexed(prefix), sizes(indexed.sizes().to_vector()) {}
    IndexedDataset indexed;
    std::vector<std::int32_t> sizes;  // copied once: the .idx array is not 4-byte aligned
    std::array<std::optional<IndexFiles>, 3> files;
};

const char* index_status_name(IndexStatus s) {
    switch (s) {
        case IndexStatus::Built: return "built";
        case IndexStatus::Existing: return "existing";
        case IndexStatus::Verified: return "verified";
    }
    return "?";
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

GptDatasets::~GptDatasets() = default;

GptDatasets::GptDatasets(const GptDatasetsOptions& opt) {
    const auto t_start = std::chrono::steady_clock::now();
    auto log = [&](const std::string& m) {
        if (opt.log) opt.log(m);
    };
    if (opt.seq_length <= 1) throw UsageError("--seq-length must be given and greater than 1");
    if (!(opt.cutoff_last_epoch >= 0.0 && opt.cutoff_last_epoch <= 1.0))
        throw UsageError("--last-epoch-cutoff must be between 0 and 1");
    if (opt.seed < 0 || opt.seed > 0xFFFFFFFFLL)
        throw UsageError("--seed " + std::to_string(opt.seed) + " is out of range: numpy's RandomState takes 0 to 2**32 - 1");
    const std::uint32_t seed = check_numpy_seed(opt.seed);
    summary_.num_samples = train_valid_test_num_samples(opt.num_samples);
    summary_.train_iters = opt.num_samples.train_iters ? *opt.num_samples.train_iters
                                                       : train_iters_from_samples(opt.num_samples);
    const DataPath dp = parse_data_path(opt.data_path);
    summary_.blended = dp.blended;
    const auto per_dataset = dp.blended ? blended_num_samples(dp.weights, summary_.num_samples)
                                        : std::vector<std::array<std::int64_t, 3>>{summary_.num_samples};

    // Pass 1: open the datasets and plan every split, so that a configuration Megatron would reject
    // fails before hours of index building.
    for (std::size_t d = 0; d < dp.prefixes.size(); ++d) {
        auto ds = std::make_unique<Dataset>(dp.prefixes[d]);
        DatasetSummary s;
        s.prefix = dp.prefixes[d];
        s.weight = dp.weights[d];
        s.sequences = ds->indexed.num_sequences();
        s.tokens = ds->indexed.num_tokens();
        s.dtype = dtype_name(ds->indexed.dtype());
        s.num_samples = per_dataset[d];
        // The split counts sequences (BS uses indexed_dataset.sizes.shape[0], not doc_idx).
        s.split_bounds = get_train_valid_test_split(opt.split, static_cast<std::int64_t>(s.sequences));
        for (std::size_t k = 0; k < 3; ++k) {
            SplitSummary& sp = s.splits[k];
            sp.name = kSplitNames[k];
            sp.doc_begin = s.split_bounds[k];
            sp.doc_end = s.split_bounds[k + 1];
            sp.present = sp.doc_end > sp.doc_begin;
            if (!sp.present) continue;
            sp.plan = plan_index_mappings(ds->sizes, sp.doc_begin, sp.doc_end, s.num_samples[k], opt.seq_length,
                                          s.prefix + " (" + sp.name + ")", opt.cutoff_last_epoch);
            sp.samples = sp.plan.total_samples();
            sp.files = index_cache_paths(s.prefix, sp.name, s.num_samples[k], opt.seq_length, opt.seed);
        }
        summary_.datasets.push_back(std::move(s));
        datasets_.push_back(std::move(ds));
    }
    for (std::size_t k = 0; k < 3; ++k) {
        std::size_t present = 0;
        for (const auto& s : summary_.datasets) present += s.splits[k].present ? 1 : 0;
        // BlendableDataset(datasets, weights) asserts len(datasets) == len(weights): a split that is
        // empty for some datasets but not all stops Megatron-DeepSpeed.
        if (dp.blended && present != 0 && present != dp.prefixes.size())
            throw Error(std::string("the ") + kSplitNames[k] + " split (--split '" + opt.split + "') is empty for some " +
                        "datasets but not all; Megatron-DeepSpeed's BlendableDataset fails on this (AssertionError: " +
                        "num_datasets == len(weights)). Use a split that gives every dataset " + kSplitNames[k] +
                        " documents, or none");
        for (const auto& s : summary_.datasets)
            if (s.splits[k].present) summary_.sizes[k] += s.splits[k].samples;
    }

    // Pass 2: build what is missing, map and check everything (BS order: per dataset train, valid, test).
    for (std::size_t d = 0; d < datasets_.size(); ++d) {
        Dataset& ds = *datasets_[d];
        DatasetSummary& s = summary_.datasets[d];
        for (std::size_t k = 0; k < 3; ++k) {
            SplitSummary& sp = s.splits[k];
            if (!sp.present) continue;
            const auto t0 = std::chrono::steady_clock::now();
            const std::string what = s.prefix + " " + sp.name;
            if (index_cache_complete(sp.files)) {
                ds.files[k].emplace(sp.files, sp.plan, ds.sizes);
                sp.status = IndexStatus::Existing;
                if (opt.verify) {
                    log(what + ": verifying existing index files against a fresh build");
                    IndexMappings m = build_index_mappings(ds.sizes, sp.plan, seed);
                    verify_index_files(sp.files, ds.files[k]->view(), m);
                    sp.sample_idx_truncated = m.sample_idx_truncated;
                    sp.status = IndexStatus::Verified;
                }
            } else {
                log(what + ": building index mappings for " + std::to_string(sp.plan.num_samples) + " samples (" +
                    std::to_string(sp.plan.num_epochs) + (sp.plan.num_epochs == 1 ? " epoch)" : " epochs)"));
                IndexMappings m = build_index_mappings(ds.sizes, sp.plan, seed);
                save_index_mappings(sp.files, m);
                sp.sample_idx_truncated = m.sample_idx_truncated;
                ds.files[k].emplace(sp.files, sp.plan, ds.sizes);
                sp.status = IndexStatus::Built;
            }
            sp.seconds = seconds_since(t0);
        }
    }
    if (dp.blended) blend_weights_ = normalize_blend_weights(dp.weights);
    summary_.seconds = seconds_since(t_start);
}

std::pair<std::size_t, std::size_t> GptDatasets::locate(int split, std::int64_t n) const {
    static const char* const names[3] = {"training", "validation", "test"};
    static const char* const splits[3] = {"train", "valid", "test"};
    if (split < 0 || split > 2) throw Error("split must be 0 (train), 1 (valid) or 2 (test)");
    const auto k = static_cast<std::size_t>(split);
    const std::string what = names[k];
    if (summary_.sizes[k] == 0) throw Error("there is no " + what + " dataset (the " + splits[k] + " split is empty)");
    if (n < 0 || n >= summary_.sizes[k])
        throw Error(what + " sample " + std::to_string(n) + " is out of range: the " +
                    (summary_.blended ? "blended " : "") + what + " dataset has " + std::to_string(summary_.sizes[k]) +
                    " samples");
    std::size_t d = 0;
    auto i = static_cast<std::size_t>(n);
    if (summary_.blended) {
        // The first n+1 blending entries do not depend on the total size (nor on the split): grow one
        // prefix of the index by doubling instead of building n+1 entries per sample.
        if (static_cast<std::int64_t>(blend_.dataset_index.size()) <= n) {
            const std::int64_t have = static_cast<std::int64_t>(blend_.dataset_index.size());
            const std::int64_t largest = *std::max_element(summary_.sizes.begin(), summary_.sizes.end());
            blend_ = build_blending_indices(blend_weights_, std::max(n + 1, std::min(std::max(2 * have, std::int64_t{4096}), largest)));
        }
        d = blend_.dataset_index[static_cast<std::size_t>(n)];
        i = static_cast<std::size_t>(blend_.dataset_sample_index[static_cast<std::size_t>(n)]);
        if (static_cast<std::int64_t>(i) >= summary_.datasets[d].splits[k].samples)
            throw Error("blended " + what + " sample " + std::to_string(n) + " is sample " + std::to_string(i) + " of " +
                        summary_.datasets[d].prefix + ", which has only " +
                        std::to_string(summary_.datasets[d].splits[k].samples) +
                        " (Megatron-DeepSpeed would fail with IndexError here)");
    }
    if (!datasets_[d]->files[k]) throw Error(datasets_[d]->indexed.prefix() + ": no " + what + " split");
    return {d, i};
}

std::vector<std::int64_t> GptDatasets::sample(int split, std::int64_t n) const {
    const auto [d, i] = locate(split, n);
    const Dataset& ds = *datasets_[d];
    return read_gpt_sample(ds.files[static_cast<std::size_t>(split)]->view(), i, sequence_reader(ds.indexed));
}

SampleOrigin GptDatasets::origin(int split, std::int64_t n) const {
    const auto [d, i] = locate(split, n);
    const Dataset& ds = *datasets_[d];
    SampleOrigin o;
    o.dataset = d;
    o.prefix = summary_.datasets[d].prefix;
    o.dataset_sample = static_cast<std::int64_t>(i);
    o.source = gpt_sample_source(ds.files[static_cast<std::size_t>(split)]->view(), i, ds.sizes);
    return o;
}

std::string format_summary(const GptDatasetsSummary& s) {
    std::string out;
    char buf[512];
    std::snprintf(buf, sizeof buf, "samples requested: train %lld, valid %lld, test %lld (%lld training iterations)\n",
                  static_cast<long long>(s.num_samples[0]), static_cast<long long>(s.num_samples[1]),
                  static_cast<long long>(s.num_samples[2]), static_cast<long long>(s.train_iters));
    out += buf;
    for (const auto& d : s.datasets) {
        char weight[64];
        std::snprintf(weight, sizeof weight, " (weight %.6g)", d.weight);
        std::snprintf(buf, sizeof buf, "dataset %s%s: %llu documents, %llu tokens (%s), split [%lld, %lld, %lld, %lld]\n",
                      d.prefix.c_str(), s.blended ? weight : "",
                      static_cast<unsigned long long>(d.sequences), static_cast<unsigned long long>(d.tokens),
                      d.dtype.c_str(), static_cast<long long>(d.split_bounds[0]),
                      static_cast<long long>(d.split_bounds[1]), static_cast<long long>(d.split_bounds[2]),
                      static_cast<long long>(d.split_bounds[3]));
        out += buf;
        for (const auto& sp : d.splits) {
            if (!sp.present) {
                out += "  " + sp.name + ": no documents, no dataset\n";
                continue;
            }
            std::snprintf(buf, sizeof buf,
                          "  %s: documents [%lld, %lld) = %lld, %lld tokens/epoch, %d epoch%s%s, %lld samples "
                          "requested, %lld in the index (%s, %.2f s)\n",
                          sp.name.c_str(), static_cast<long long>(sp.doc_begin), static_cast<long long>(sp.doc_end),
                          static_cast<long long>(sp.plan.num_documents()),
                          static_cast<long long>(sp.plan.tokens_per_epoch), sp.plan.num_epochs,
                          sp.plan.num_epochs == 1 ? "" : "s", sp.plan.separate_last_epoch ? " (last one separate)" : "",
                          static_cast<long long>(sp.plan.num_samples), static_cast<long long>(sp.samples),
                          index_status_name(sp.status), sp.seconds);
            out += buf;
            out += "    " + sp.files.doc_idx + "\n    " + sp.files.sample_idx + "\n    " + sp.files.shuffle_idx + "\n";
            if (sp.sample_idx_truncated)
                out += "    warning: doc_idx has more than 2^31 entries; sample_idx wraps them as Megatron-DeepSpeed does\n";
        }
    }
    std::snprintf(buf, sizeof buf, "%s: train %lld, valid %lld, test %lld samples (%.2f s)\n",
                  s.blended ? "blended datasets" : "datasets", static_cast<long long>(s.sizes[0]),
                  static_cast<long long>(s.sizes[1]), static_cast<long long>(s.sizes[2]), s.seconds);
    out += buf;
    return out;
}

std::string summary_json(const GptDatasetsSummary& s, const std::optional<std::int64_t>& sample_index,
                         const std::vector<std::int64_t>* sample) {
    nlohmann::json j = {{"num_samples", {{"train", s.num_samples[0]}, {"valid", s.num_samples[1]}, {"test", s.num_samples[2]}}},
                        {"train_iters", s.train_iters},
                        {"blended", s.blended},
                        {"sizes", {{"train", s.sizes[0]}, {"valid", s.sizes[1]}, {"test", s.sizes[2]}}},
                        {"seconds", s.seconds},
                        {"datasets", nlohmann::json::array()}};
    for (const auto& d : s.datasets) {
        nlohmann::json jd = {{"prefix", d.prefix}, {"weight", d.weight},  {"documents", d.sequences},
                             {"tokens", d.tokens}, {"dtype", d.dtype},    {"split", d.split_bounds},
                             {"splits", nlohmann::json::object()}};
        for (const auto& sp : d.splits) {
            if (!sp.present) {
                jd["splits"][sp.name] = nullptr;
                continue;
            }
            jd["splits"][sp.name] = {{"documents", {sp.doc_begin, sp.doc_end}},
                                     {"num_documents", sp.plan.num_documents()},
                                     {"tokens_per_epoch", sp.plan.tokens_per_epoch},
                                     {"epochs", sp.plan.num_epochs},
                                     {"separate_last_epoch", sp.plan.separate_last_epoch},
                                     {"num_samples", sp.plan.num_samples},
                                     {"samples", sp.samples},
                                     {"status", index_status_name(sp.status)},
                                     {"sample_idx_truncated", sp.sample_idx_truncated},
                                     {"seconds", sp.seconds},
                                     {"files", {{"doc_idx", sp.files.doc_idx},
                                                {"sample_idx", sp.files.sample_idx},
                                                {"shuffle_idx", sp.files.shuffle_idx}}}};
        }
        j["datasets"].push_back(std::move(jd));
    }
    if (sample_index && sample) j["sample"] = {{"index", *sample_index}, {"tokens", *sample}};
    return j.dump();
}

}  // namespace mds::data
