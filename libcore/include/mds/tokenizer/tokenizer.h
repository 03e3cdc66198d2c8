// A byte-level BPE tokenizer as Megatron's preprocessing uses it: GPT-2 files (vocab.json +
// merges.txt, Megatron's GPT2BPETokenizer: no special tokens in text, unknown symbol -> 0), or a
// Hugging Face tokenizer.json with a byte-level BPE model (GPT-2's or BLOOM's pre-tokenizer,
// added tokens matched in the text first). Tokenizer is immutable; use one Encoder per thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mds/tokenizer/bpe.h"
#include "mds/tokenizer/pretokenizer.h"

namespace mds::tok {

struct AddedToken {
    std::string content;
    std::int32_t id = 0;
    bool special = false;
};

class Tokenizer {
public:
    // Megatron's GPT2BPETokenizer from `--vocab-file` / `--merge-file` (specs/data.md §3.1).
    static Tokenizer from_gpt2_files(const std::string& vocab_path, const std::string& merges_path);
    // A Hugging Face tokenizer.json; unsupported components are an error naming them.
    static Tokenizer from_hf_json(const std::string& path);

    // Ids of the text, appended to `out`; thread-safe (no cache; see Encoder).
    void encode(std::string_view text, std::vector<std::int32_t>& out) const;
    // Bytes of the ids (inverse of the byte mapping); unknown ids are an error.
    std::string decode(const std::vector<std::int32_t>& ids) const;

    // The end-of-document id appended with --append-eod (-1 if the tokenizer has none).
    std::int32_t eod_id() const { return eod_id_; }
    void set_eod_token(const std::string& token);  // error if the token does not exist
    // Size Megatron passes to best_fitting_dtype: len(encoder) for GPT-2 files, len(tokenizer)
    // (vocabulary plus added tokens) for tokenizer.json.
    std::uint64_t vocab_size() const { return vocab_size_; }
    std::int32_t token_id(std::string_view token) const;
    std::string describe() const { return description_; }

    const BpeModel& model() const { return *model_; }
    PreTokenizer pretokenizer() const { return pre_; }
    bool add_prefix_space() const { return add_prefix_space_; }
    const std::vector<AddedToken>& added_tokens() const { return added_; }

private:
    Tokenizer() = default;

    std::shared_ptr<const BpeModel> model_;
    PreTokenizer pre_ = PreTokenizer::Gpt2;
    bool add_prefix_space_ = false;
    std::vector<AddedToken> added_;
    std::int32_t eod_id_ = -1;
    std::uint64_t vocab_size_ = 0;
    std::string description_;
};

// Per-thread encoding with a piece cache; output identical to Tokenizer::encode.
class Encoder {
public:
    // `max_cached_pieces` = 0 disables the cache.
    explicit Encoder(const Tokenizer& tokenizer, std::size_t max_cached_pieces = 1 << 18);
    void encode(std::string_view text, std::vector<std::int32_t>& out);

private:
    void encode_segment(std::string_view segment, std::vector<std::int32_t>& out);

    const Tokenizer& tokenizer_;
    BpeEncoder bpe_;
    std::vector<std::string_view> pieces_;
    std::string prefixed_;
    std::array<bool, 256> added_first_byte_{};  // first bytes of added tokens, to skip fast
};

}  // namespace mds::tok
