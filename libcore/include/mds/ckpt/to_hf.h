// mds-ckpt-to-hf: a DeepSpeed pipeline checkpoint (any TP/PP) to a Hugging Face folder, GPT2
// (GPT2LMHeadModel) or BLOOM (BloomForCausalLM), as specs/checkpoints.md §7 says: config.json with
// Megatron's sizes and the activation of its GeLU (gelu_fast for the default fused bias-GeLU),
// safetensors weights (one file, or shards + model.safetensors.index.json), tokenizer files. The
// safetensors headers are known up front, so `workers` threads each take the next tensor, merge it
// over TP straight from the mapped shards, lay it out and write it at its place in its file: reading,
// converting and writing overlap, and memory stays about a chunk of output per worker (plus the
// mapped layer files being read). Model variants of the args that the architecture cannot compute
// (GLU, --kv-channels, post-LayerNorm residuals for GPT2, an erf GeLU for BLOOM) are refused, naming
// the flag (docs/mds-ckpt-to-hf.md "Model variants"); BLOOM's post-LN is exported.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mds::ckpt {

enum class HfModelType { Auto, Gpt2, Bloom };

struct ToHfOptions {
    HfModelType model_type = HfModelType::Auto;  // Auto: BLOOM for ALiBi, else GPT2 (with an untied lm_head when the checkpoint has an embedding LayerNorm)
    std::uint64_t max_shard_bytes = 5'000'000'000;  // transformers' default max_shard_size "5GB"
    // Rows of the word embedding exported, config.json's vocab_size (--vocab-size); 0: the Hugging
    // Face size mds-hf-to-ckpt recorded in the checkpoint (mds_hf_vocab_size), else every row (the
    // padded vocabulary, as trained).
    std::int64_t vocab_size = 0;
    std::string vocab_file, merge_file;          // GPT-2 BPE files (default: the args', found as hf_tokenizer.h says)
    std::string tokenizer_dir;                   // copied as is instead (e.g. tokenizer.json)
    bool no_tokenizer = false;                   // write the weights and config only, without a word
    bool overwrite = false;                      // replace an earlier export (a folder holding config.json, or empty)
    bool verify = true;                          // CRC-32 of every pickle and storage read (--no-verify: off)
    int workers = 0;                             // threads reading, converting and writing tensors (--workers; 0: the machine's cores)
    // Called after each tensor: (tensors done, total tensors, bytes done, total bytes).
    std::function<void(std::size_t, std::size_t, std::uint64_t, std::uint64_t)> progress;
    // Notes for the user (which tokenizer file was used, warnings), one line each.
    std::function<void(const std::string&)> note;
};

struct ToHfReport {
    std::string model_type;  // "gpt2" or "bloom"
    std::string output;
    std::size_t tensors = 0, shards = 0;
    std::uint64_t bytes = 0;
    std::vector<std::string> files;
};

// Converts checkpoint `path` (a root with `latest`, or a global_step folder; `tag` picks a tag of a
// root) into folder `out`, written under mds::temp_path_for(out) and renamed into place when
// complete. `out` may not overlap the checkpoint (mds::UsageError), is never a file replaced by a
// folder, and its parent is prepared with mds::prepare_output_dir (stale temporaries removed).
// The tokenizer is settled and checked against the embedding before any weight is written.
// Throws mds::Error naming the file and what was expected; nothing is left under `out` then.
ToHfReport convert_to_hf(const std::string& path, const std::string& tag, const std::string& out, const ToHfOptions& options);

}  // namespace mds::ckpt
