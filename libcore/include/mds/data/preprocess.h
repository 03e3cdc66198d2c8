// jsonl -> Megatron indexed dataset, as Megatron-DeepSpeed's tools/preprocess_data.py does it
// (specs/data.md §2): for each --json-keys field, tokenize each line's text, skip documents with no
// tokens, optionally append EOD, and write {prefix}_{key}_document.bin/.idx. Work is split over
// threads in batches of lines and written back in input order, so output never depends on the
// number of workers; memory stays bounded by the batches in flight and the longest line accepted
// (--max-document-bytes: a longer line is an error naming it, or skipped with --skip-bad-lines).
// With `sft.enabled` each line is one supervised fine-tuning example instead (sft_example.h): its
// prompt and answer become document i of {prefix}_inputs_document and {prefix}_targets_document.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mds/data/sft_example.h"
#include "mds/util/progress.h"

namespace mds::data {

// Default of --max-document-bytes: 64 MiB, 50 times the longest Wikipedia article and several
// times a long book; a line longer than this is almost always a file that lost its newlines.
inline constexpr std::uint64_t kDefaultMaxDocumentBytes = std::uint64_t{64} << 20;

struct PreprocessOptions {
    std::vector<std::string> inputs;          // --input (repeatable: concatenated in order); "-" = stdin
    std::string output_prefix;                // --output-prefix
    std::vector<std::string> json_keys{"text"};  // --json-keys (ignored in SFT mode: the outputs are inputs, targets)
    // --append-eod: the EOD id after each document; in SFT mode after each answer only (the targets),
    // as BigScience's xP3 preprocessing for BLOOMZ did.
    bool append_eod = false;
    // --prepend-space: one space before each text (SFT mode: before each answer), as the --prepend-space
    // of BigScience's Megatron-DeepSpeed t0loading branch, which xP3's targets were made with.
    bool prepend_space = false;
    SftOptions sft;                           // --sft, --prompt-key, --answer-key, --messages-key, ...
    unsigned workers = 1;                     // --workers (threads that tokenize)
    std::string vocab_file, merge_file;       // --vocab-file / --merge-file (GPT-2 BPE)
    std::string tokenizer_file;               // --tokenizer-file (Hugging Face tokenizer.json)
    std::string eod_token;                    // --eod-token (override the end-of-document token)
    bool skip_bad_lines = false;              // --skip-bad-lines: count malformed lines instead of failing
    // --max-document-bytes: the longest input line (one JSON document) tokenized; a longer one is a
    // malformed line. Each line in flight costs about 4 times its size (line, decoded text, ids).
    std::uint64_t max_document_bytes = kDefaultMaxDocumentBytes;
    std::size_t batch_bytes = std::size_t{256} << 10;  // lines per work item, in bytes
    Progress::Mode progress = Progress::Mode::Auto;
    double progress_interval_s = 30.0;        // plain progress lines when not on a terminal
};

struct PreprocessKeySummary {
    std::string key;
    std::string prefix;            // {output_prefix}_{key}_document
    std::uint64_t documents = 0;   // written (non-empty)
    std::uint64_t empty = 0;       // skipped: no tokens
    std::uint64_t tokens = 0;      // including EOD
};

struct PreprocessSummary {
    std::uint64_t lines = 0;           // JSON lines parsed
    std::uint64_t blank_lines = 0;     // whitespace-only lines, skipped
    std::uint64_t bad_lines = 0;       // malformed, skipped with --skip-bad-lines
    std::uint64_t input_bytes = 0;     // decompressed
    double seconds = 0;
    std::string tokenizer;             // description
    std::string dtype;
    std::vector<PreprocessKeySummary> keys;
    bool sft = false;                  // SFT mode: keys are inputs and targets, documents = examples written
    std::uint64_t empty_examples = 0;  // SFT mode: examples skipped for an empty prompt or answer
};

PreprocessSummary preprocess(const PreprocessOptions& options);

// Checks, before any work, that the outputs of `output_prefix` can be written: its folder exists
// (it is not created, as preprocess_data.py does not) and a file can be made in it; mds::Error
// naming --output-prefix otherwise. Removes (with a warning) the temporaries that killed mds runs
// on this host left in that folder.
void check_output_prefix(const std::string& output_prefix);

// Megatron's output prefix of one key: {output_prefix}_{key}_document.
std::string document_prefix(const std::string& output_prefix, const std::string& key);

}  // namespace mds::data
