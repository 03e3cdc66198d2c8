// Writes a Megatron MMapIndexedDataset the way MMapIndexedDatasetBuilder does (specs/data.md §1.5):
// sequences appended to `.bin`, sizes and document boundaries kept in memory (12 bytes per
// sequence, 8 per document), pointers recomputed from sizes at finalize, so merging partial outputs
// gives the bytes of a single run. Both files appear under their final names only at finalize().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mds/data/indexed_dataset.h"
#include "mds/util/files.h"

namespace mds::data {

class IndexedDatasetBuilder {
public:
    IndexedDatasetBuilder(const std::string& prefix, DType dtype);

    // Appends one sequence (ids converted to dtype; values that do not fit are an error).
    void add_item(std::span<const std::int32_t> ids);
    // Closes the current document (Megatron's end_document).
    void end_document();
    // Appends a whole existing dataset (Megatron's merge_file_); its dtype must match.
    void merge(const std::string& prefix);
    // Writes the .idx, then moves both files into place (finalize_datasets of this one builder).
    void finalize();
    // The .idx written to its temporary, not moved into place yet.
    std::unique_ptr<AtomicOutput> write_index() const;
    // Moves the .bin into place (finalize_datasets calls it; the .idx goes after).
    void commit_bin();

    std::size_t num_sequences() const { return sizes_.size(); }
    std::size_t num_documents() const { return doc_idx_.size() - 1; }
    std::uint64_t num_tokens() const { return tokens_; }

private:
    std::string prefix_;
    DType dtype_;
    std::unique_ptr<AtomicOutput> bin_;
    std::vector<std::int32_t> sizes_;
    std::vector<std::int64_t> doc_idx_{0};
    std::uint64_t tokens_ = 0;
    std::vector<char> scratch_;
};

// Finalizes several datasets written together (all --json-keys of a run, or the inputs / targets pair of
// SFT data) so that they appear together: every .idx is written to its temporary first, then the stale
// .idx files are removed, then the .bin files and last the .idx files are moved into place. A crash
// between two renames leaves a .bin without its .idx (not a dataset), never an .idx that does not
// describe the .bin beside it; a failure while the .idx files are written leaves the previous datasets
// untouched.
void finalize_datasets(const std::vector<IndexedDatasetBuilder*>& builders);

// Merges datasets into one at `output_prefix`, byte-identical to a single preprocessing run over
// the concatenated inputs (Megatron's merge_preprocessed_data.py).
void merge_datasets(const std::vector<std::string>& input_prefixes, const std::string& output_prefix);

}  // namespace mds::data
