// What mds-sample-text prints of a training sample (docs/mds-sample-text.md): a header line with its
// place in the training (iteration, micro batch, data-parallel rank), dataset of the blend and
// document pieces, then its decoded text; or one JSON object per sample. The samples come from a
// SampleMap (mds/trainer/sample_map.h).
#pragma once

#include <cstdint>
#include <string>

#include "mds/tokenizer/tokenizer.h"
#include "mds/trainer/sample_map.h"

namespace mds::trainer {

struct SamplePrintOptions {
    bool jsonl = false;         // one JSON object per sample instead of text blocks
    bool tokens = false;        // also the seq-length + 1 token ids
    std::int64_t max_chars = -1;  // cut each text to N bytes (at a UTF-8 character boundary); -1: all
};

class SamplePrinter {
public:
    SamplePrinter(const SampleMap& map, const tok::Tokenizer& tokenizer, SamplePrintOptions options)
        : map_(map), tokenizer_(tokenizer), options_(options) {}

    // Sample `id` of the training dataset; `where` is its place in the training (null for a sample
    // asked by id), `seqlen` the length its iteration trained on (the curriculum's).
    std::string sample(std::int64_t id, const MappedSample* where, std::int64_t seqlen) const;
    // "=== iteration N: global batch ..." and the skipped ranges before it; empty for jsonl.
    std::string iteration_header(const MappedIteration& it, std::int64_t dp, std::int64_t mbs) const;

private:
    std::string text_of(const std::vector<std::int64_t>& ids) const;

    const SampleMap& map_;
    const tok::Tokenizer& tokenizer_;
    SamplePrintOptions options_;
};

}  // namespace mds::trainer
