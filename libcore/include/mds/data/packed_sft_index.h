// The packing index of Megatron-DeepSpeed's (BigScience fork) decoder-packed MTF dataset, the data
// BLOOMZ was fine-tuned on (megatron/data/decoder_packed_mtf_dataset.py: _build_index_mappings,
// _build_shuffle_idx, _build_sample_idx, pack_samples), reproduced exactly:
//   - one numpy RandomState(seed); each epoch is arange(n) shuffled with it (int64), the epochs are
//     concatenated into shuffle_idx;
//   - examples are packed greedily, in that order, into rows of `seq_length` tokens (BMD passes
//     --seq-length + 1): a row ends when the next example would overflow it and the example opens the
//     next row; an example longer than a row is skipped (BMD logs a warning each time); a row never
//     ends at an epoch boundary, it carries on into the next epoch;
//   - epochs are added until there are more than num_samples rows; sample_idx holds [start, end) of
//     each row in shuffle_idx (int64, shape (rows, 2)); the last, unfinished row is dropped;
//   - both arrays are cached as .npy beside the data (np.save's bytes), under names that hold neither
//     the sequence length nor the data's size: a cache made for another --seq-length is reused by BMD
//     as it is; mds checks every row against the current length when it loads one.
// Pure functions over example lengths, testable without files; packed_sft_dataset.h opens data.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mds/data/indexed_dataset.h"  // UnalignedArray
#include "mds/data/npy.h"

namespace mds::data {

struct PackedSftIndex {
    std::vector<std::int64_t> shuffle_idx;  // epochs × n example ids: each epoch a permutation of [0, n)
    std::vector<std::int64_t> sample_idx;   // flat (rows, 2): row r packs shuffle_idx[start, end)
    std::int64_t num_examples = 0;          // n
    std::int64_t epochs = 0;
    std::int64_t skips = 0;                 // times an example was skipped (once per epoch it appears in)
    std::vector<std::int64_t> too_long;     // the examples longer than a row, ascending

    std::int64_t rows() const { return static_cast<std::int64_t>(sample_idx.size() / 2); }
};

// BMD's _build_index_mappings for examples of `example_tokens[k]` tokens (prompt + answer of example k),
// rows of `seq_length` tokens (BMD's argument: --seq-length + 1), at least num_samples + 1 rows.
// mds::Error where BMD would loop for ever: no examples, or none that fits in a row.
PackedSftIndex build_packed_sft_index(std::span<const std::int64_t> example_tokens, std::int64_t num_samples,
                                      std::int64_t seq_length, std::uint32_t seed);

// ---- cache files -----------------------------------------------------------------------------

struct PackedSftCachePaths {
    std::string sample_idx;   // {prefix}_{name}_indexmap_{N}ns_{seed}s_decoder_packed_batch_idx.npy
    std::string shuffle_idx;  // {prefix}_{name}_indexmap_{N}ns_{seed}s_decoder_packed_shuffle_idx.npy
};

// BMD's names; `tag` (empty for BMD) goes before "_decoder_packed" for indexes BMD does not make.
PackedSftCachePaths packed_sft_cache_paths(const std::string& data_prefix, const std::string& name,
                                           std::int64_t num_samples, std::int64_t seed, const std::string& tag = "");
// BMD rebuilds both unless both exist.
bool packed_sft_cache_complete(const PackedSftCachePaths& paths);
// np.save's bytes, each file written atomically (the shuffle index first, as BMD does).
void save_packed_sft_index(const PackedSftCachePaths& paths, const PackedSftIndex& index);

// Read-only view of the two arrays, in memory or in mapped files.
struct PackedSftIndexView {
    UnalignedArray<std::int64_t> shuffle_idx;
    UnalignedArray<std::int64_t> sample_idx;  // flat, 2 per row

    std::int64_t rows() const { return static_cast<std::int64_t>(sample_idx.size() / 2); }
    std::int64_t row_begin(std::int64_t r) const { return sample_idx[static_cast<std::size_t>(2 * r)]; }
    std::int64_t row_end(std::int64_t r) const { return sample_idx[static_cast<std::size_t>(2 * r + 1)]; }
    std::int64_t example(std::int64_t j) const { return shuffle_idx[static_cast<std::size_t>(j)]; }
};
PackedSftIndexView view_of(const PackedSftIndex& index);

// The two cache files, mapped and checked: int64 arrays of BMD's shapes; more than num_samples rows;
// every row a non-empty range of the shuffle index; every example id in [0, n); every row's examples
// fit in `seq_length` tokens. Errors name the file and the row or element.
class PackedSftIndexFiles {
public:
    PackedSftIndexFiles(const PackedSftCachePaths& paths, std::span<const std::int64_t> example_tokens,
                        std::int64_t num_samples, std::int64_t seq_length);
    const PackedSftIndexView& view() const { return view_; }

private:
    NpyFile sample_idx_, shuffle_idx_;
    PackedSftIndexView view_;
};

// Compares loaded files with a fresh build; an error names the file and the first differing element.
void verify_packed_sft_index(const PackedSftCachePaths& paths, const PackedSftIndexView& files,
                             const PackedSftIndex& expected);

// ---- packing ---------------------------------------------------------------------------------

// One training row as BMD's DecoderPackedMTFDataset.__getitem__ returns it, seq_length entries each
// (--seq-length + 1): the examples' prompt and answer tokens back to back, then padding.
struct PackedSample {
    std::vector<std::int64_t> tokens;       // decoder_token_ids: the pad token where no example is
    std::vector<std::int64_t> segment_ids;  // decoder_segment_ids: 1, 2, ... per example, 0 for padding
    std::vector<std::uint8_t> is_input;     // decoder_is_inputs: 1 on prompt tokens, 0 on answers and padding
};

// BMD's pack_samples: appends example (prompt, answer) to a row started with start_packed_sample.
// mds::Error when it does not fit (BMD's ValueError "Items to be packed do not fit inside a single sample").
PackedSample start_packed_sample(std::int64_t seq_length, std::int64_t pad_token);
void pack_example(PackedSample& sample, std::int64_t& used, std::int64_t segment, std::span<const std::int64_t> prompt,
                  std::span<const std::int64_t> answer);

}  // namespace mds::data
