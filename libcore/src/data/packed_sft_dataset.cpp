#include "mds/data/packed_sft_dataset.h"

#include "mds/data/numpy_random.h"  // check_numpy_seed
#include "mds/util/error.h"

namespace mds::data {

std::string sft_inputs_prefix(const std::string& data_prefix) { return data_prefix + "_inputs_document"; }
std::string sft_targets_prefix(const std::string& data_prefix) { return data_prefix + "_targets_document"; }

namespace {

IndexedDataset open_half(const std::string& data_prefix, const std::string& path) {
    try {
        return IndexedDataset(path);
    } catch (const Error& e) {
        throw Error("SFT data " + data_prefix + ": " + e.what() +
                    " (the pair {prefix}_inputs_document / {prefix}_targets_document is what mds-preprocess --sft writes)");
    }
}

}  // namespace

SftPairDataset::SftPairDataset(const std::string& data_prefix)
    : prefix_(data_prefix),
      inputs_(open_half(data_prefix, sft_inputs_prefix(data_prefix))),
      targets_(open_half(data_prefix, sft_targets_prefix(data_prefix))) {
    const std::size_t n = inputs_.num_sequences();
    if (targets_.num_sequences() != n)
        throw Error(idx_path(inputs_.prefix()) + " holds " + std::to_string(n) + " examples and " +
                    idx_path(targets_.prefix()) + " holds " + std::to_string(targets_.num_sequences()) +
                    "; the pair must be aligned, one prompt and one answer per example");
    example_tokens_.resize(n);
    const auto& in = inputs_.sizes();
    const auto& tg = targets_.sizes();
    for (std::size_t k = 0; k < n; ++k) {
        const std::int32_t a = in[k], b = tg[k];
        if (a <= 0 || b <= 0)
            throw Error(idx_path((a <= 0 ? inputs_ : targets_).prefix()) + ": example " + std::to_string(k) + " has an empty " +
                        (a <= 0 ? "prompt" : "answer") + "; every example needs both (Megatron-DeepSpeed's MTFDataset "
                        "asserts it when it reads one)");
        example_tokens_[k] = static_cast<std::int64_t>(a) + b;
    }
}

void SftPairDataset::read(std::int64_t k, std::vector<std::int64_t>& prompt, std::vector<std::int64_t>& answer) const {
    if (k < 0 || k >= size())
        throw Error(prefix_ + ": example " + std::to_string(k) + " is out of range (" + std::to_string(size()) + " examples)");
    inputs_.get(static_cast<std::size_t>(k), prompt);
    targets_.get(static_cast<std::size_t>(k), answer);
}

const char* packed_index_status_name(PackedIndexStatus s) {
    switch (s) {
        case PackedIndexStatus::Built: return "built";
        case PackedIndexStatus::Existing: return "existing";
        case PackedIndexStatus::Verified: return "verified";
    }
    return "?";
}

PackedSftDataset::PackedSftDataset(const SftPairDataset& pair, const PackedSftDatasetConfig& config)
    : pair_(pair), config_(config) {
    const std::string what = pair.prefix() + " (" + config.name + ")";
    if (config.seq_length < 1) throw UsageError("--seq-length must be given and positive");
    if (config.doc_begin < 0 || config.doc_end <= config.doc_begin || config.doc_end > pair.size())
        throw Error(what + ": documents [" + std::to_string(config.doc_begin) + ", " + std::to_string(config.doc_end) +
                    ") are not a non-empty range of its " + std::to_string(pair.size()) + " examples");
    const std::uint32_t seed = check_numpy_seed(config.seed);
    n_ = config.doc_end - config.doc_begin;
    first_ = config.read_split_documents ? config.doc_begin : 0;
    const std::string tag = first_ == 0 ? std::string()
                                        : "_docs" + std::to_string(config.doc_begin) + "-" + std::to_string(config.doc_end);
    paths_ = packed_sft_cache_paths(pair.prefix(), config.name, config.num_samples, config.seed, tag);
    const std::int64_t row = std::int64_t{config.seq_length} + 1;  // BMD: args.seq_length + 1
    const auto tokens = pair.example_tokens().subspan(static_cast<std::size_t>(first_), static_cast<std::size_t>(n_));
    auto build = [&] {
        try {
            return build_packed_sft_index(tokens, config.num_samples, row, seed);
        } catch (const UsageError&) {
            throw;
        } catch (const Error& e) {
            throw Error(what + ": " + e.what());
        }
    };
    auto keep = [&](const PackedSftIndex& ix) {
        epochs_ = ix.epochs;
        too_long_.clear();
        for (std::int64_t k : ix.too_long) too_long_.push_back(first_ + k);
    };
    if (packed_sft_cache_complete(paths_)) {
        files_.emplace(paths_, tokens, config.num_samples, row);
        status_ = PackedIndexStatus::Existing;
        if (config.verify) {
            const PackedSftIndex ix = build();
            verify_packed_sft_index(paths_, files_->view(), ix);
            keep(ix);
            status_ = PackedIndexStatus::Verified;
        }
        return;
    }
    const PackedSftIndex ix = build();
    save_packed_sft_index(paths_, ix);
    keep(ix);
    files_.emplace(paths_, tokens, config.num_samples, row);
    status_ = PackedIndexStatus::Built;
}

PackedSample PackedSftDataset::get(std::int64_t i) const {
    const auto& v = files_->view();
    if (i < 0 || i >= v.rows())
        throw Error(pair_.prefix() + " (" + config_.name + "): sample " + std::to_string(i) + " is out of range (" +
                    std::to_string(v.rows()) + " samples)");
    PackedSample s = start_packed_sample(std::int64_t{config_.seq_length} + 1, config_.pad_token);
    std::vector<std::int64_t> prompt, answer;
    std::int64_t used = 0, segment = 1;  // segment 0 is the padding's
    for (std::int64_t j = v.row_begin(i); j < v.row_end(i); ++j) {
        pair_.read(first_ + v.example(j), prompt, answer);
        pack_example(s, used, segment++, prompt, answer);
    }
    return s;
}

}  // namespace mds::data
