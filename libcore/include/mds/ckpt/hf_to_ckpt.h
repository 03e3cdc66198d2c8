// mds-hf-to-ckpt: a Hugging Face GPT2 / BLOOM folder (hf_folder.h) to a DeepSpeed pipeline
// checkpoint at any TP / PP, laid out exactly as mds-ckpt-reshape writes one (specs/checkpoints.md
// §1, §3, §4): layer_XX-model_YY-model_states.pt per layer and TP rank (GPT2's Conv1D weights
// transposed back to Linear, its fused QKV rows reordered to Megatron's [heads, 3, d], the
// vocabulary padded with zero rows as Megatron pads it), mp_rank_XX_model_states.pt per (stage, TP
// rank) with Megatron's args Namespace for the model, the tag global_step0 and `latest`. Weights
// only, iteration 0: mds-train loads it with --load DIR --finetune, Megatron-DeepSpeed with --load DIR
// --finetune --no-load-optim --override-lr-scheduler. The Hugging Face vocabulary size is recorded
// (mp_rank top-level key `mds_hf_vocab_size`), so that mds-ckpt-to-hf exports the same rows back.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mds/ckpt/partition.h"    // PartitionAlgorithm
#include "mds/ckpt/safetensors.h"  // DType

namespace mds::ckpt {

// The mp_rank files' top-level key holding the Hugging Face vocabulary size (rows before padding).
inline constexpr const char* kHfVocabSizeKey = "mds_hf_vocab_size";
// The tag written (iteration 0) and the folder of the output root that gets the tokenizer files.
inline constexpr const char* kHfToCkptTag = "global_step0";
inline constexpr const char* kHfTokenizerFolder = "hf_tokenizer";

struct HfToCkptOptions {
    int target_tp = 1, target_pp = 1;
    std::int64_t make_vocab_size_divisible_by = 128;  // Megatron's --make-vocab-size-divisible-by
    std::optional<DType> dtype;                       // F32 / BF16 / F16; nullopt: the source's (config.json's dtype, else the embedding's)
    std::int64_t seq_length = 0;                      // args.seq_length; 0: GPT2's n_positions, 2048 for BLOOM
    std::string partition_method = "type:transformer";  // DeepSpeed's partition_method (BMD's default)
    PartitionAlgorithm partition_algorithm = PartitionAlgorithm::Dp;
    bool copy_tokenizer = true;   // copy the tokenizer files into <out>/hf_tokenizer (--no-tokenizer: off)
    bool overwrite = false;       // replace an earlier output (a folder holding `latest`, or an empty one)
    bool verify = true;           // CRC-32 of the .bin pickles and storages read (--no-verify: off)
    int workers = 0;              // threads converting and writing layer files (--workers; 0: the machine's cores)
    // After each tensor written: (tensors done, total tensors, bytes done, total bytes).
    std::function<void(std::size_t, std::size_t, std::uint64_t, std::uint64_t)> progress;
    // Notes for the user (dtype conversions, ignored buffers, how to load the result), one line each.
    std::function<void(const std::string&)> note;
};

struct HfToCkptReport {
    std::string output, tag, model_type;  // model_type: "gpt2" or "bloom"
    int tp = 1, pp = 1;
    std::int64_t vocab_size = 0, padded_vocab_size = 0;
    std::string dtype;                       // "F32", "BF16", "F16"
    std::vector<std::vector<int>> stages;    // layer indices of each pipeline stage
    std::size_t tensors = 0;
    std::uint64_t bytes = 0;                 // tensor bytes written (all TP shards)
    std::vector<std::string> files;          // of the tag folder, sorted
    std::vector<std::string> tokenizer_files;  // copied into hf_tokenizer/
    std::vector<std::string> train_flags;    // the mds-train / Megatron flags of this model
};

// Converts Hugging Face folder `hf_dir` into checkpoint root `out` (out/latest, out/global_step0/,
// out/hf_tokenizer/). Everything is read and checked (config, every tensor's name, shape and dtype)
// before anything is written; the output is written under mds::temp_path_for(out) and renamed into
// place when complete. `hf_dir` and `out` may not overlap (mds::UsageError); an existing `out` is
// replaced only with `overwrite` and only when it is an earlier checkpoint root (holding `latest`)
// or an empty folder. Throws mds::Error naming the file, the tensor and what was expected; nothing
// is left under `out` then.
HfToCkptReport convert_hf_to_ckpt(const std::string& hf_dir, const std::string& out, const HfToCkptOptions& options);

// Megatron's padded vocabulary (BMD megatron/tokenizer/tokenizer.py _vocab_size_with_padding): the
// smallest multiple of divisible_by × tp that holds vocab_size. A usage error for divisible_by < 1.
std::int64_t megatron_padded_vocab(std::int64_t vocab_size, std::int64_t divisible_by, int tp);

// The report as one JSON object (what --json prints).
std::string hf_to_ckpt_report_json(const HfToCkptReport& report);

}  // namespace mds::ckpt
