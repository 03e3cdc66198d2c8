#include "mds/data/packed_sft_index.h"

#include <algorithm>
#include <numeric>  // std::iota
#include <set>

#include "mds/data/numpy_random.h"
#include "mds/util/error.h"
#include "mds/util/files.h"  // file_exists

namespace mds::data {

PackedSftIndex build_packed_sft_index(std::span<const std::int64_t> example_tokens, std::int64_t num_samples,
                                      std::int64_t seq_length, std::uint32_t seed) {
    const auto n = static_cast<std::int64_t>(example_tokens.size());
    if (n == 0) throw Error("no examples to pack");
    if (seq_length < 1) throw Error("the packed row length must be at least 1, got " + std::to_string(seq_length));
    if (num_samples < 0) throw Error("the number of samples must not be negative, got " + std::to_string(num_samples));
    // BMD's loop never ends when no example fits in a row: refuse before it starts.
    const std::int64_t shortest = *std::min_element(example_tokens.begin(), example_tokens.end());
    if (shortest > seq_length)
        throw Error("none of the " + std::to_string(n) + " examples fits in a row of " + std::to_string(seq_length) +
                    " tokens (the shortest has " + std::to_string(shortest) +
                    " prompt and answer tokens); raise --seq-length or shorten the examples");

    PackedSftIndex ix;
    ix.num_examples = n;
    NumpyRandomState rng(seed);
    std::set<std::int64_t> too_long;
    // The state BMD's _build_sample_idx carries from one epoch to the next.
    std::int64_t row_length = 0;    // tokens in the row being filled
    std::int64_t sample_start = 0;  // its first position in shuffle_idx
    std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
    while (ix.rows() <= num_samples) {
        // _build_shuffle_idx: arange(n, dtype=int64) shuffled in place.
        std::iota(perm.begin(), perm.end(), std::int64_t{0});
        rng.shuffle(perm);
        const std::int64_t epoch_offset = ix.epochs * n;
        ix.shuffle_idx.insert(ix.shuffle_idx.end(), perm.begin(), perm.end());
        for (std::int64_t k = 0; k < n; ++k) {
            const std::int64_t end = epoch_offset + k;
            const std::int64_t tokens = example_tokens[static_cast<std::size_t>(perm[static_cast<std::size_t>(k)])];
            row_length += tokens;
            if (row_length <= seq_length) continue;
            // The example does not fit: the row ends before it, and it opens the next one.
            if (end > sample_start) {
                ix.sample_idx.push_back(sample_start);
                ix.sample_idx.push_back(end);
            }
            sample_start = end;
            row_length = tokens;
            if (tokens > seq_length) {  // longer than a row on its own: skipped
                ++ix.skips;
                too_long.insert(perm[static_cast<std::size_t>(k)]);
                sample_start = end + 1;
                row_length = 0;
            }
        }
        ++ix.epochs;
    }
    ix.too_long.assign(too_long.begin(), too_long.end());
    return ix;
}

// ---- cache files -----------------------------------------------------------------------------

PackedSftCachePaths packed_sft_cache_paths(const std::string& data_prefix, const std::string& name,
                                           std::int64_t num_samples, std::int64_t seed, const std::string& tag) {
    const std::string base = data_prefix + "_" + name + "_indexmap_" + std::to_string(num_samples) + "ns_" +
                             std::to_string(seed) + "s" + tag + "_decoder_packed";
    return {base + "_batch_idx.npy", base + "_shuffle_idx.npy"};
}

bool packed_sft_cache_complete(const PackedSftCachePaths& paths) {
    return file_exists(paths.sample_idx) && file_exists(paths.shuffle_idx);
}

void save_packed_sft_index(const PackedSftCachePaths& paths, const PackedSftIndex& index) {
    write_npy_1d(paths.shuffle_idx, index.shuffle_idx);
    const std::uint64_t shape[2] = {static_cast<std::uint64_t>(index.rows()), 2};
    write_npy(paths.sample_idx, NpyDType::Int64, shape, index.sample_idx.data());
}

PackedSftIndexView view_of(const PackedSftIndex& index) {
    PackedSftIndexView v;
    v.shuffle_idx = UnalignedArray<std::int64_t>(reinterpret_cast<const std::byte*>(index.shuffle_idx.data()),
                                                 index.shuffle_idx.size());
    v.sample_idx = UnalignedArray<std::int64_t>(reinterpret_cast<const std::byte*>(index.sample_idx.data()),
                                                index.sample_idx.size());
    return v;
}

PackedSftIndexFiles::PackedSftIndexFiles(const PackedSftCachePaths& paths, std::span<const std::int64_t> example_tokens,
                                         std::int64_t num_samples, std::int64_t seq_length)
    : sample_idx_(paths.sample_idx), shuffle_idx_(paths.shuffle_idx) {
    const auto n = static_cast<std::int64_t>(example_tokens.size());
    shuffle_idx_.check_dtype(NpyDType::Int64);
    sample_idx_.check_dtype(NpyDType::Int64);
    const auto& shuffle_shape = shuffle_idx_.shape();
    const auto& sample_shape = sample_idx_.shape();
    if (shuffle_shape.size() != 1 || shuffle_shape[0] == 0 || n == 0 || shuffle_shape[0] % static_cast<std::uint64_t>(n) != 0)
        throw Error(paths.shuffle_idx + ": shape is " + npy_shape_repr(shuffle_shape) + ", expected (epochs × " +
                    std::to_string(n) + " examples,): the file was built for other data; delete it to rebuild");
    if (sample_shape.size() != 2 || sample_shape[1] != 2)
        throw Error(paths.sample_idx + ": shape is " + npy_shape_repr(sample_shape) + ", expected (rows, 2)");
    if (sample_shape[0] <= static_cast<std::uint64_t>(num_samples))
        throw Error(paths.sample_idx + ": " + std::to_string(sample_shape[0]) + " rows, expected more than the " +
                    std::to_string(num_samples) + " samples in its name; delete it to rebuild");
    view_.shuffle_idx = shuffle_idx_.array<std::int64_t>();
    view_.sample_idx = sample_idx_.array<std::int64_t>();

    // Value checks, so that a damaged or foreign file is reported here rather than mid-training.
    const auto positions = static_cast<std::int64_t>(view_.shuffle_idx.size());
    for (std::int64_t j = 0; j < positions; ++j) {
        const std::int64_t e = view_.example(j);
        if (e < 0 || e >= n)
            throw Error(paths.shuffle_idx + ": element " + std::to_string(j) + " is " + std::to_string(e) +
                        ", not an example index below " + std::to_string(n) + " (built for other data? delete it to rebuild)");
    }
    for (std::int64_t r = 0; r < view_.rows(); ++r) {
        const std::int64_t b = view_.row_begin(r), e = view_.row_end(r);
        if (b < 0 || e <= b || e > positions)
            throw Error(paths.sample_idx + ": row " + std::to_string(r) + " [" + std::to_string(b) + ", " +
                        std::to_string(e) + ") is not a non-empty range of the " + std::to_string(positions) +
                        " positions of " + paths.shuffle_idx);
        std::int64_t tokens = 0;
        for (std::int64_t j = b; j < e; ++j) tokens += example_tokens[static_cast<std::size_t>(view_.example(j))];
        if (tokens > seq_length)
            throw Error(paths.sample_idx + ": row " + std::to_string(r) + " packs " + std::to_string(tokens) +
                        " tokens, more than the " + std::to_string(seq_length) +
                        " of a row: the file was built for a longer --seq-length (Megatron-DeepSpeed's cache names do "
                        "not hold it) or for other data; delete it and " + paths.shuffle_idx + " to rebuild them");
    }
}

void verify_packed_sft_index(const PackedSftCachePaths& paths, const PackedSftIndexView& files,
                             const PackedSftIndex& expected) {
    auto compare = [](const std::string& path, const UnalignedArray<std::int64_t>& got,
                      const std::vector<std::int64_t>& want) {
        const std::size_t n = std::min(got.size(), want.size());
        for (std::size_t k = 0; k < n; ++k)
            if (got[k] != want[k])
                throw Error(path + ": element " + std::to_string(k) + " is " + std::to_string(got[k]) +
                            ", a fresh build gives " + std::to_string(want[k]) +
                            " (the file was built from other data, another --seq-length or other code; delete both "
                            "files to rebuild them)");
        if (got.size() != want.size())
            throw Error(path + ": " + std::to_string(got.size()) + " elements, a fresh build gives " +
                        std::to_string(want.size()) + " (delete both files to rebuild them)");
    };
    compare(paths.shuffle_idx, files.shuffle_idx, expected.shuffle_idx);
    compare(paths.sample_idx, files.sample_idx, expected.sample_idx);
}

// ---- packing ---------------------------------------------------------------------------------

PackedSample start_packed_sample(std::int64_t seq_length, std::int64_t pad_token) {
    PackedSample s;
    const auto n = static_cast<std::size_t>(seq_length);
    s.tokens.assign(n, pad_token);
    s.segment_ids.assign(n, 0);
    s.is_input.assign(n, 0);
    return s;
}

void pack_example(PackedSample& sample, std::int64_t& used, std::int64_t segment, std::span<const std::int64_t> prompt,
                  std::span<const std::int64_t> answer) {
    const auto row = static_cast<std::int64_t>(sample.tokens.size());
    const auto total = static_cast<std::int64_t>(prompt.size() + answer.size());
    if (used + total > row)
        throw Error("examples to be packed do not fit in one row: " + std::to_string(used) + " tokens used, " +
                    std::to_string(prompt.size()) + " prompt and " + std::to_string(answer.size()) +
                    " answer tokens to add, row of " + std::to_string(row));
    auto at = static_cast<std::size_t>(used);
    std::copy(prompt.begin(), prompt.end(), sample.tokens.begin() + static_cast<std::ptrdiff_t>(at));
    std::copy(answer.begin(), answer.end(), sample.tokens.begin() + static_cast<std::ptrdiff_t>(at + prompt.size()));
    std::fill_n(sample.segment_ids.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::size_t>(total), segment);
    std::fill_n(sample.is_input.begin() + static_cast<std::ptrdiff_t>(at), prompt.size(), std::uint8_t{1});
    used += total;
}

}  // namespace mds::data
