// The train / valid / test datasets of Megatron-DeepSpeed's finetune_t0_non_causal_decoder.py
// (BigScience fork, decoder_packed_mtf_dataset.py build_train_valid_test_datasets and
// build_dataset_group), what BLOOMZ was fine-tuned with, for mds-train's supervised fine-tuning:
//   - "Option 1", --data-path PREFIX or W1 P1 W2 P2 ...: each prefix's pair split by --split
//     (get_train_valid_test_split_ over its number of examples), one PackedSftDataset per non-empty
//     split named train / valid / test, blended by weight as GPT data is (1.005 surplus per dataset);
//   - "Option 2", --(train|valid|test)-weighted-split-paths: each group "NAME: W START:END PATH, ..."
//     one dataset named NAME, its paths' ranges [round(START·n), round(END·n)), blended by weight when
//     the group has several paths.
// BMD passes --seq-length + 1 as the row length; the options take --seq-length. The index files are
// built where BMD's rank 0 would write them (packed_sft_index.h). No LibTorch.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mds/data/gpt_dataset_index.h"  // NumSamplesOptions
#include "mds/data/packed_sft_dataset.h"
#include "mds/data/weighted_split.h"     // WeightedSplitGroup

namespace mds::data {

struct PackedSftDatasetsOptions {
    // Option 1: --data-path (PREFIX, or W1 P1 W2 P2 ...; PREFIX names the pair PREFIX_inputs_document /
    // PREFIX_targets_document) and --split. Used when data_path is not empty.
    std::vector<std::string> data_path;
    std::string split = "969, 30, 1";
    // Option 2: the parsed --(train|valid|test)-weighted-split-paths groups (weighted_split.h); one
    // training group. Used when data_path is empty.
    std::array<std::vector<WeightedSplitGroup>, 3> groups;
    std::int32_t seq_length = 0;  // --seq-length (rows hold seq_length + 1 tokens)
    std::int64_t seed = 1234;     // --seed
    std::int64_t pad_token = -1;  // the tokenizer's pad id (BMD: tokenizer.pad); must be given
    NumSamplesOptions num_samples;  // --train-samples / --train-iters, --global-batch-size, eval flags
    // See PackedSftDatasetConfig::read_split_documents: false reads BMD's examples [0, end - begin) for
    // a split of documents [begin, end) (valid / test splits then read training examples); true reads
    // the split's own documents.
    bool read_split_documents = false;
    bool verify = false;          // rebuild in memory and compare with index files that exist
    std::function<void(const std::string&)> log;  // progress and warnings (none when empty)
};

struct PackedSftMemberSummary {
    std::string prefix;
    double weight = 1.0;                      // normalized (1 when not blended)
    std::int64_t examples = 0;                // in the pair
    std::int64_t doc_begin = 0, doc_end = 0;  // the split's documents
    std::int64_t first_example = 0;           // examples read: [first, first + doc_end - doc_begin)
    std::int64_t num_samples = 0;             // requested (with the 1.005 surplus when blended)
    std::int64_t samples = 0;                 // rows of its index = len(DecoderPackedMTFDataset)
    std::int64_t epochs = 0;                  // 0 when the files existed and were not verified
    std::vector<std::int64_t> too_long;       // examples skipped for being longer than a row (when built)
    PackedSftCachePaths files;
    PackedIndexStatus status = PackedIndexStatus::Built;
};

struct PackedSftGroupSummary {
    std::string name;   // train / valid / test (Option 1) or the group's name (Option 2)
    int split = 0;      // 0 train, 1 valid, 2 test
    bool blended = false;
    std::int64_t size = 0;  // len() of the (blended) dataset
    std::vector<PackedSftMemberSummary> members;
};

class PackedSftDatasets {
public:
    // Opens every pair and builds (or checks) every index. Throws mds::Error or UsageError.
    explicit PackedSftDatasets(const PackedSftDatasetsOptions& options);
    ~PackedSftDatasets();
    PackedSftDatasets(const PackedSftDatasets&) = delete;
    PackedSftDatasets& operator=(const PackedSftDatasets&) = delete;

    std::int64_t train_iters() const { return train_iters_; }
    const std::array<std::int64_t, 3>& num_samples() const { return num_samples_; }  // train, valid, test requested
    // The datasets of split 0 (train: none or one), 1 (valid) or 2 (test), in order.
    const std::vector<PackedSftGroupSummary>& groups(int split) const;
    std::int64_t size(int split, std::size_t group = 0) const;
    // Sample n of a group's dataset: one packed row of seq_length + 1 tokens, segment ids, is_input.
    // Not thread-safe for blended groups (the blending index grows on demand).
    PackedSample sample(int split, std::size_t group, std::int64_t n) const;
    PackedSample train_sample(std::int64_t n) const { return sample(0, 0, n); }
    // What the build found worth saying (also given to options.log): skipped examples, BMD's split
    // numbering when a split does not start at document 0.
    const std::vector<std::string>& warnings() const { return warnings_; }

private:
    struct Group;
    std::vector<std::unique_ptr<SftPairDataset>> pairs_;
    std::array<std::vector<std::unique_ptr<Group>>, 3> groups_;
    std::array<std::vector<PackedSftGroupSummary>, 3> summaries_;
    std::array<std::int64_t, 3> num_samples_{};
    std::int64_t train_iters_ = 0;
    std::vector<std::string> warnings_;
};

// A few lines for stderr: each group, its members, their files and status.
std::string format_summary(const PackedSftDatasets& datasets);

}  // namespace mds::data
