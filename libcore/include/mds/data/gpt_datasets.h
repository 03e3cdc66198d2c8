// Megatron-DeepSpeed's build_train_valid_test_datasets for GPT, without a GPU: for every
// --data-path dataset and every non-empty split, build (or check) the three index-mapping .npy
// files where Megatron's rank 0 would write them, then serve training samples as the blended
// dataset would (specs/data.md §4). This is what mds-sample-index runs; BigScience prebuilt these
// files on CPU nodes so that rank 0 did not hit the NCCL timeout while building them.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mds/data/blending.h"
#include "mds/data/gpt_dataset_index.h"
#include "mds/data/indexed_dataset.h"

namespace mds::data {

struct GptDatasetsOptions {
    std::vector<std::string> data_path;  // --data-path: PREFIX, or W1 P1 W2 P2 ...
    std::string split = "969, 30, 1";    // --split (BS default when --data-path is used)
    std::int32_t seq_length = 0;         // --seq-length
    std::int64_t seed = 1234;            // --seed (Megatron default)
    NumSamplesOptions num_samples;       // --train-samples/--train-iters, --global-batch-size, eval flags
    // Shuffle the last epoch separately when it supplies fewer than this fraction of an epoch's
    // samples: 0.95 in BS since 2021-11-03 (commit 846c0879), 0.80 before and in NVIDIA Megatron-LM.
    double cutoff_last_epoch = 0.95;
    bool verify = false;                 // rebuild in memory and compare with files that already exist
    std::function<void(const std::string&)> log;  // progress messages (none when empty)
};

enum class IndexStatus { Built, Existing, Verified };
const char* index_status_name(IndexStatus s);  // "built", "existing", "verified"

struct SplitSummary {
    std::string name;          // train, valid, test
    bool present = false;      // false when the split has no documents (Megatron: no dataset)
    std::int64_t doc_begin = 0, doc_end = 0;
    IndexPlan plan;            // tokens, epochs, separate_last_epoch, requested samples
    std::int64_t samples = 0;  // len(GPTDataset) = whole epochs' worth
    IndexCachePaths files;
    IndexStatus status = IndexStatus::Built;
    bool sample_idx_truncated = false;  // doc_idx longer than 2^31: BS wraps sample_idx (kept)
    double seconds = 0;
};

struct DatasetSummary {
    std::string prefix;
    double weight = 1.0;  // normalized
    std::uint64_t sequences = 0;
    std::uint64_t tokens = 0;
    std::string dtype;
    std::array<std::int64_t, 3> num_samples{};  // requested for this dataset (after the 1.005 surplus)
    std::array<std::int64_t, 4> split_bounds{};
    std::array<SplitSummary, 3> splits;
};

struct GptDatasetsSummary {
    std::array<std::int64_t, 3> num_samples{};  // train/valid/test requested (§4.1)
    std::int64_t train_iters = 0;
    bool blended = false;
    std::array<std::int64_t, 3> sizes{};  // length of the (blended) train/valid/test dataset; 0 = none
    std::vector<DatasetSummary> datasets;
    double seconds = 0;
};

class GptDatasets {
public:
    // Opens every dataset and builds or checks all index files. Throws mds::Error (or UsageError).
    explicit GptDatasets(const GptDatasetsOptions& opt);
    ~GptDatasets();
    GptDatasets(const GptDatasets&) = delete;
    GptDatasets& operator=(const GptDatasets&) = delete;

    const GptDatasetsSummary& summary() const { return summary_; }
    // Sample n of the training dataset Megatron trains on (blended when --data-path has weights):
    // seq_length + 1 token ids.
    std::vector<std::int64_t> train_sample(std::int64_t n) const { return sample(0, n); }
    // Sample n of split 0 (train), 1 (valid) or 2 (test); an error names the split when it is
    // empty or n is out of range.
    std::vector<std::int64_t> sample(int split, std::int64_t n) const;
    // Where sample n of split `split` comes from (the same checks as sample()): the dataset serving it
    // (blending), that dataset's sample index and the document pieces (mds-sample-text).
    SampleOrigin origin(int split, std::int64_t n) const;

private:
    struct Dataset;
    // The dataset serving sample n of split k and its index there (checks as sample()).
    std::pair<std::size_t, std::size_t> locate(int split, std::int64_t n) const;
    std::vector<std::unique_ptr<Dataset>> datasets_;
    std::vector<double> blend_weights_;
    mutable BlendingIndices blend_;  // a prefix of the blending index, grown on demand (not thread-safe)
    GptDatasetsSummary summary_;
};

// Human-readable summary (several lines, for stderr) and a one-line JSON object.
std::string format_summary(const GptDatasetsSummary& s);
std::string summary_json(const GptDatasetsSummary& s, const std::optional<std::int64_t>& sample_index = std::nullopt,
                         const std::vector<std::int64_t>* sample = nullptr);

}  // namespace mds::data
