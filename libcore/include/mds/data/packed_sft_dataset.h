// Supervised fine-tuning data as Megatron-DeepSpeed's finetune_t0_non_causal_decoder.py reads it
// (BigScience fork: megatron/data/mtf_dataset.py, decoder_packed_mtf_dataset.py): a pair of indexed
// datasets {prefix}_inputs_document and {prefix}_targets_document, example k being sequence k of
// both (mds-preprocess --sft writes them), packed into rows by the index of packed_sft_index.h.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mds/data/indexed_dataset.h"
#include "mds/data/packed_sft_index.h"

namespace mds::data {

// "{prefix}_inputs_document" / "{prefix}_targets_document".
std::string sft_inputs_prefix(const std::string& data_prefix);
std::string sft_targets_prefix(const std::string& data_prefix);

// The opened pair. Checks (mds::Error naming the file): both exist and are valid; they hold the same
// number of sequences; no sequence is empty (BMD's MTFDataset asserts both when it reads an example).
class SftPairDataset {
public:
    explicit SftPairDataset(const std::string& data_prefix);

    const std::string& prefix() const { return prefix_; }
    std::int64_t size() const { return static_cast<std::int64_t>(example_tokens_.size()); }  // examples
    // Prompt + answer tokens of every example (what the packing counts).
    std::span<const std::int64_t> example_tokens() const { return example_tokens_; }
    const IndexedDataset& inputs() const { return inputs_; }
    const IndexedDataset& targets() const { return targets_; }
    // The prompt and answer token ids of example k.
    void read(std::int64_t k, std::vector<std::int64_t>& prompt, std::vector<std::int64_t>& answer) const;

private:
    std::string prefix_;
    IndexedDataset inputs_, targets_;
    std::vector<std::int64_t> example_tokens_;
};

enum class PackedIndexStatus { Built, Existing, Verified };
const char* packed_index_status_name(PackedIndexStatus s);  // "built", "existing", "verified"

// What one packed dataset is made of.
struct PackedSftDatasetConfig {
    std::string name;                  // train / valid / test, or the group name (cache file names)
    std::int64_t doc_begin = 0, doc_end = 0;  // the split's documents [begin, end) of the pair
    std::int64_t num_samples = 0;      // requested (in the cache names)
    std::int32_t seq_length = 0;       // training --seq-length; rows hold seq_length + 1 tokens
    std::int64_t seed = 1234;          // --seed
    std::int64_t pad_token = 0;        // the tokenizer's pad id, where rows have no example
    // BMD's DecoderPackedMTFDataset numbers a split's examples from 0 whatever its documents: the split
    // [begin, end) reads examples [0, end - begin) of the pair (for valid / test splits, training
    // examples). false (default) does the same, for the samples BMD would train on; true reads the
    // split's own documents [begin, end), with the index cached under its own name (tag "_docs{b}-{e}").
    bool read_split_documents = false;
    bool verify = false;               // rebuild in memory and compare with cache files that exist
};

// One split of a pair: BMD's DecoderPackedMTFDataset. Builds the index files when missing (atomically,
// so ranks building at once are safe), maps and checks them (PackedSftIndexFiles), or verifies them.
class PackedSftDataset {
public:
    PackedSftDataset(const SftPairDataset& pair, const PackedSftDatasetConfig& config);

    // len(): the rows of the index (more than num_samples).
    std::int64_t size() const { return files_->view().rows(); }
    // Row i (0 <= i < size()): tokens, segment ids and is_input flags, seq_length + 1 of each.
    PackedSample get(std::int64_t i) const;

    const PackedSftDatasetConfig& config() const { return config_; }
    const PackedSftCachePaths& files() const { return paths_; }
    PackedIndexStatus status() const { return status_; }
    std::int64_t first_example() const { return first_; }  // examples [first, first + n) of the pair
    std::int64_t num_examples() const { return n_; }
    // Known after a build or a verification only (0 when the files existed).
    std::int64_t epochs() const { return epochs_; }
    const std::vector<std::int64_t>& too_long() const { return too_long_; }  // pair example numbers

private:
    const SftPairDataset& pair_;
    PackedSftDatasetConfig config_;
    std::int64_t first_ = 0, n_ = 0;
    PackedSftCachePaths paths_;
    PackedIndexStatus status_ = PackedIndexStatus::Built;
    std::int64_t epochs_ = 0;
    std::vector<std::int64_t> too_long_;
    std::optional<PackedSftIndexFiles> files_;
};

}  // namespace mds::data
