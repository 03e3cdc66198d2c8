// Blending of several datasets as Megatron-DeepSpeed (BigScience fork) does it for
// `--data-path W1 P1 W2 P2 ...` (specs/data.md §4.8): weight parsing and normalization, the
// per-dataset sample counts with the 1.005 surplus, and helpers.cpp build_blending_indices.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mds::data {

// The datasets named by --data-path: one prefix (no blending), or weight/prefix pairs.
struct DataPath {
    std::vector<std::string> prefixes;
    std::vector<double> weights;  // normalized by their left-to-right sum (BS analyze_data_prefix)
    bool blended = false;         // false only for a single bare prefix
};

// BS: one argument is a single dataset; otherwise an even count of "weight prefix" pairs
// (float(weight), prefix.strip()). Usage errors for an odd count, bad or negative weights.
DataPath parse_data_path(const std::vector<std::string>& args);

// BS get_datasets_weights_and_num_samples: for each dataset, int(ceil(val * weight * 1.005)) of
// each of the [train, valid, test] counts.
std::vector<std::array<std::int64_t, 3>> blended_num_samples(std::span<const double> weights,
                                                             const std::array<std::int64_t, 3>& num_samples);

// np.sum of a float64 array: numpy's pairwise summation (8-way unrolled blocks of up to 128), which
// differs from a left-to-right sum from 8 elements on.
double numpy_sum(std::span<const double> values);

// BlendableDataset: np.array(weights, float64) / np.sum(weights).
std::vector<double> normalize_blend_weights(std::span<const double> weights);

struct BlendingIndices {
    std::vector<std::uint8_t> dataset_index;          // which dataset serves blended sample s
    std::vector<std::int64_t> dataset_sample_index;   // and which of its samples
};

// helpers.cpp build_blending_indices: greedy, picking the dataset whose share lags its weight most
// (strict >, so ties go to the lower index). The first k entries do not depend on `size`, so a
// prefix of the full index can be built when only early samples are needed.
BlendingIndices build_blending_indices(std::span<const double> weights, std::int64_t size);

}  // namespace mds::data
