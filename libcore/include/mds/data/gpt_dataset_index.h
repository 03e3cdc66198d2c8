// The GPT sample index of Megatron-DeepSpeed (BigScience fork) GPTDataset, reproduced exactly
// (specs/data.md §4): the train/valid/test document split (§4.2), the requested sample counts
// (§4.1), the three index mappings doc_idx / sample_idx / shuffle_idx (§4.3, §4.4), their .npy
// cache files (§4.6), and reading sample i as seq_length+1 token ids (§4.5).
// Everything takes plain sizes so it can be tested without files; gpt_datasets.h opens datasets.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mds/data/indexed_dataset.h"  // UnalignedArray
#include "mds/data/npy.h"
#include "mds/data/numpy_random.h"

namespace mds::data {

inline constexpr std::array<const char*, 3> kSplitNames = {"train", "valid", "test"};

// ---- §4.2 split ------------------------------------------------------------------------------

// Python float(text) for split proportions and blend weights: surrounding whitespace and a sign
// allowed, finite values only. `what` names the flag in the error message.
double python_float(std::string_view text, std::string_view what);

// The three proportions of --split ("949,50,1", "90/5/5", "1"; missing parts are 0, parts after
// the third ignored, as Megatron does). Refused with mds::UsageError naming --split: a part that is
// not a finite number (nan, inf), a negative part (Megatron accepts it and its splits overlap), a
// sum that is not positive.
std::array<double, 3> parse_split(std::string_view splits_string);

// BS get_train_valid_test_split_(splits_string, size): document boundaries [0, a, b, size] from
// "949,50,1" or "90/5/5" (Python float() per part, round half to even, then the diff correction).
// Split k covers documents [bounds[k], bounds[k+1]); it is empty (no dataset) when end <= begin.
std::array<std::int64_t, 4> get_train_valid_test_split(std::string_view splits_string, std::int64_t size);

// ---- §4.1 sample counts ----------------------------------------------------------------------

struct NumSamplesOptions {
    std::optional<std::int64_t> train_samples;  // --train-samples
    std::optional<std::int64_t> train_iters;    // --train-iters
    std::int64_t global_batch_size = 0;         // --global-batch-size
    std::int64_t eval_interval = 1000;          // --eval-interval (Megatron default)
    std::int64_t eval_iters = 100;              // --eval-iters (Megatron default)
    // --rampup-batch-size START INCREMENT SAMPLES: changes train_iters for --train-samples.
    std::optional<std::array<std::int64_t, 3>> rampup_batch_size;
};

// BS training.py update_train_iters: the iteration count Megatron derives from --train-samples.
std::int64_t train_iters_from_samples(const NumSamplesOptions& opt);

// BS build_train_valid_test_data_iterators: [train, valid, test] samples requested.
std::array<std::int64_t, 3> train_valid_test_num_samples(const NumSamplesOptions& opt);

// ---- §4.3 / §4.4 index mappings --------------------------------------------------------------

// The numbers _build_index_mappings derives before drawing any random number.
struct IndexPlan {
    std::int64_t doc_begin = 0, doc_end = 0;  // documents [begin, end) of the sizes array
    std::int64_t num_samples = 0;             // requested (also in the cache file names)
    std::int32_t seq_length = 0;
    std::int64_t tokens_per_epoch = 0;
    std::int32_t num_epochs = 0;
    bool separate_last_epoch = false;
    std::int64_t samples_from_epochs_minus_one = 0;  // meaningful when num_epochs > 1
    std::int64_t last_epoch_num_samples = 0;
    std::int64_t samples_per_epoch = 0;

    std::int64_t num_documents() const { return doc_end - doc_begin; }
    // Rows of sample_idx minus one = len(GPTDataset) = (E*T - 1) // S.
    std::int64_t total_samples() const;
    std::uint64_t doc_idx_size() const { return static_cast<std::uint64_t>(num_epochs) * num_documents(); }
    // Shuffle index stored as int64 when total >= 2^32 - 2 (BS _build_shuffle_idx), else uint32.
    NpyDType shuffle_dtype() const;
};

// Smallest E >= 1 with (E*T - 1) // S >= num_samples (BS _num_epochs).
std::int32_t gpt_num_epochs(std::int64_t tokens_per_epoch, std::int32_t seq_length, std::int64_t num_samples);

// Checks the inputs as BS does (its asserts, and the loops that would never end) and fills the
// plan. `what` names the dataset split in messages ("P (train)"). `cutoff_last_epoch` is 0.95 in BS.
IndexPlan plan_index_mappings(std::span<const std::int32_t> sizes, std::int64_t doc_begin, std::int64_t doc_end,
                              std::int64_t num_samples, std::int32_t seq_length, const std::string& what,
                              double cutoff_last_epoch = 0.95);

// BS _build_doc_idx: the documents E times (epoch-major) as int32, shuffled as one array, or
// (separate last epoch) the first E-1 epochs shuffled, then the last epoch shuffled on its own.
std::vector<std::int32_t> build_doc_idx(std::int64_t doc_begin, std::int64_t doc_end, std::int32_t num_epochs,
                                        NumpyRandomState& rng, bool separate_last_epoch);

// BS helpers.cpp build_sample_idx: flat [(E*T-1)/S + 1][2] int32 rows (index into doc_idx, token
// offset). Sets *truncated when a doc_idx index exceeded int32 and was stored wrapped, as BS does.
std::vector<std::int32_t> build_sample_idx(std::span<const std::int32_t> sizes, std::span<const std::int32_t> doc_idx,
                                           std::int32_t seq_length, std::int32_t num_epochs,
                                           std::int64_t tokens_per_epoch, bool* truncated = nullptr);

// BS _build_shuffle_idx: arange(0, n) shuffled, then arange(n, total) shuffled. Values are kept
// as int64 in memory; IndexPlan::shuffle_dtype says how they are stored.
std::vector<std::int64_t> build_shuffle_idx(std::uint64_t n, std::uint64_t total, NumpyRandomState& rng);

struct IndexMappings {
    IndexPlan plan;
    std::vector<std::int32_t> doc_idx;
    std::vector<std::int32_t> sample_idx;  // flat, 2 per row
    std::vector<std::int64_t> shuffle_idx;
    bool sample_idx_truncated = false;
};

// The whole of _build_index_mappings after the plan: one RandomState(seed) for doc_idx, then
// shuffle_idx (separate last epoch: shuffles [0, n-1 epochs) and the rest on their own).
IndexMappings build_index_mappings(std::span<const std::int32_t> sizes, const IndexPlan& plan, std::uint32_t seed);

// ---- §4.5 reading a sample -------------------------------------------------------------------

// Read-only view of the three arrays, in memory or in mapped .npy files.
struct SampleIndexView {
    UnalignedArray<std::int32_t> doc_idx;
    UnalignedArray<std::int32_t> sample_idx;  // flat, 2 per row
    UnalignedArray<std::uint32_t> shuffle_u32;
    UnalignedArray<std::int64_t> shuffle_i64;
    bool shuffle_wide = false;

    std::size_t size() const { return sample_idx.size() / 2 - (sample_idx.empty() ? 0 : 1); }  // len(GPTDataset)
    std::size_t shuffle_size() const { return shuffle_wide ? shuffle_i64.size() : shuffle_u32.size(); }
    std::int64_t shuffle(std::size_t i) const {
        return shuffle_wide ? shuffle_i64[i] : static_cast<std::int64_t>(shuffle_u32[i]);
    }
};

// A view of in-memory mappings. The uint32 shuffle storage is kept in `shuffle_storage`.
SampleIndexView view_of(const IndexMappings& m, std::vector<std::uint32_t>& shuffle_storage);

// Appends tokens [offset, offset+length) of sequence `seq` (length -1 = to the end) to `out`.
using SequenceReader =
    std::function<void(std::size_t seq, std::size_t offset, std::int64_t length, std::vector<std::int64_t>& out)>;
SequenceReader sequence_reader(const IndexedDataset& ds);

// GPTDataset.__getitem__(i): the seq_length+1 tokens of sample i (in shuffled order).
std::vector<std::int64_t> read_gpt_sample(const SampleIndexView& view, std::size_t i, const SequenceReader& read);

// One run of tokens a sample is cut from: tokens [begin, end) of document `document` (an index
// into the dataset's sequences, as doc_idx holds it).
struct SamplePiece {
    std::int64_t document = 0, begin = 0, end = 0;
};

// Where sample i of a GPTDataset comes from, as __getitem__(i) reads it: shuffle_idx[i] (the row of
// sample_idx) and the pieces whose concatenation is read_gpt_sample(view, i, ...). `sizes` are the
// dataset's sequence lengths (for the end of a document read to its end).
struct GptSampleSource {
    std::int64_t shuffled = 0;  // shuffle_idx[i]
    std::vector<SamplePiece> pieces;
};
GptSampleSource gpt_sample_source(const SampleIndexView& view, std::size_t i, std::span<const std::int32_t> sizes);

// The origin of a sample of a (blended) dataset: which of the datasets serves it (index in the order
// given, and prefix), that dataset's sample index, and where its tokens come from.
struct SampleOrigin {
    std::size_t dataset = 0;
    std::string prefix;
    std::int64_t dataset_sample = 0;  // the index __getitem__ takes (BlendableDataset's dataset_sample_index)
    GptSampleSource source;
};

// ---- §4.6 cache files ------------------------------------------------------------------------

struct IndexCachePaths {
    std::string doc_idx, sample_idx, shuffle_idx;
};

// {prefix}_{name}_indexmap_{num_samples}ns_{seq_length}sl_{seed}s_{doc,sample,shuffle}_idx.npy
IndexCachePaths index_cache_paths(const std::string& data_prefix, const std::string& name, std::int64_t num_samples,
                                  std::int32_t seq_length, std::int64_t seed);
// Megatron rebuilds all three unless all three files exist.
bool index_cache_complete(const IndexCachePaths& paths);
// Writes the three files as np.save does (each atomically).
void save_index_mappings(const IndexCachePaths& paths, const IndexMappings& m);

// The three cache files, mapped and checked against the plan: dtypes, shapes, and that every
// value is in range (so reading samples cannot go out of bounds).
class IndexFiles {
public:
    IndexFiles(const IndexCachePaths& paths, const IndexPlan& plan, std::span<const std::int32_t> sizes);
    const SampleIndexView& view() const { return view_; }

private:
    NpyFile doc_idx_, sample_idx_, shuffle_idx_;
    SampleIndexView view_;
};

// Compares loaded files with freshly built mappings; an error names the first differing element.
void verify_index_files(const IndexCachePaths& paths, const SampleIndexView& files, const IndexMappings& expected);

}  // namespace mds::data
