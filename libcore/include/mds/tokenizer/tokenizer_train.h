// The job of mds-tokenizer-train: read jsonl documents (.jsonl, .jsonl.zst or stdin), count their
// GPT-2 pre-tokenized pieces on several threads, train a byte-level BPE (bpe_trainer.h) and write
// vocab.json, merges.txt (GPT-2 / Megatron --vocab-file, --merge-file) and tokenizer.json (Hugging
// Face, Megatron's PretrainedFromHF) into a directory, all together or none: every argument and the
// output folder are checked before the input is read, and the folder is created only when the
// files are ready (a failed run leaves no new folder and no partial set of files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mds/tokenizer/bpe_trainer.h"
#include "mds/util/progress.h"

namespace mds::tok {

struct TokenizerTrainOptions {
    std::vector<std::string> inputs;             // --input (repeatable, read in order); "-" = stdin
    std::vector<std::string> json_keys{"text"};  // --json-keys: every key's text is counted
    BpeTrainerConfig bpe;                        // --vocab-size, --min-frequency, --special-tokens
    std::string output_dir;                      // --output-dir (created if missing)
    unsigned workers = 1;                        // --workers: counting threads; output does not depend on it
    bool skip_bad_lines = false;                 // --skip-bad-lines: count malformed lines instead of failing
    // --max-document-bytes: longer input lines are malformed lines (64 MiB, as mds-preprocess).
    std::uint64_t max_document_bytes = std::uint64_t{64} << 20;
    bool write_hf_json = true;                   // also write tokenizer.json (--no-tokenizer-json turns it off)
    std::size_t batch_bytes = std::size_t{1} << 20;  // lines per work item, in bytes
    Progress::Mode progress = Progress::Mode::Auto;
    double progress_interval_s = 30.0;           // plain progress lines when not on a terminal
};

struct TokenizerTrainSummary {
    std::uint64_t lines = 0;          // JSON lines parsed
    std::uint64_t blank_lines = 0;    // whitespace-only lines, skipped
    std::uint64_t bad_lines = 0;      // malformed, skipped with --skip-bad-lines
    std::uint64_t input_bytes = 0;    // decompressed
    std::uint64_t pieces = 0;         // pre-tokenized pieces counted
    std::uint64_t unique_pieces = 0;
    std::uint64_t merges = 0;
    std::uint64_t merges_reusing_token = 0;
    std::uint64_t last_merge_count = 0;
    std::uint64_t vocab_size = 0;     // entries of vocab.json (byte symbols + learned + special)
    double count_seconds = 0, train_seconds = 0;
    std::vector<std::string> files;   // written, in order
};

TokenizerTrainSummary train_tokenizer(const TokenizerTrainOptions& options);

}  // namespace mds::tok
