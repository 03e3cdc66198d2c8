// Internal to mds-ckpt-to-hf (to_hf.cpp): which tokenizer files go into the Hugging Face folder,
// found before any weight is written. The checkpoint's args.vocab_file / merge_file are often
// relative to the folder the training ran in, so they are looked for from the current folder and
// from the checkpoint's folders upwards; a tokenizer whose ids do not fit the model's embedding
// (a GPT-2 vocabulary on an 8,192-row model) is refused, since transformers would index past it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mds/ckpt/ds_checkpoint.h"
#include "mds/ckpt/to_hf.h"

namespace mds::ckpt::hf_detail {

struct TokenizerFiles {
    enum class Kind { None, Folder, Gpt2Bpe } kind = Kind::None;
    std::string folder;                  // Folder: every regular file of it is copied, or only `files`
    std::vector<std::string> files;      // Folder: when not empty, the only file names copied (a cache snapshot)
    std::string vocab, merges;           // Gpt2Bpe: vocab.json and merges.txt
    std::optional<std::int64_t> eos_id;  // Gpt2Bpe: the id of <|endoftext|> when the vocabulary has it
    std::int64_t max_id = -1;            // the largest token id found (-1: unknown)
    std::int64_t tokens = 0;             // entries counted
    std::string ids_from;                // the file max_id comes from
};

// Decides the tokenizer files (options.tokenizer_dir, options.vocab_file / merge_file, else the
// checkpoint's args resolved as described above; args.tokenizer_name_or_path of a PretrainedFromHF
// checkpoint as mds-train finds it: a local folder, else the Hub name's snapshot in the local
// Hugging Face cache, mds/util/hf_cache.h) and reads their ids. Errors: a named file or folder
// missing; args naming files or a tokenizer that exist nowhere (unless options.no_tokenizer), with
// the paths tried and the flags to pass. Notes (which file was used, why none is written) go to `note`.
TokenizerFiles find_tokenizer(const DsCheckpoint& ck, const ToHfOptions& options, const std::function<void(const std::string&)>& note);

// Refuses a tokenizer whose ids reach past `embedding_rows`, naming both numbers.
void check_tokenizer_fits(const TokenizerFiles& t, std::int64_t embedding_rows);

}  // namespace mds::ckpt::hf_detail
