// Training a byte-level BPE vocabulary the way GPT-2's and BLOOM's tokenizers were trained: texts are
// pre-tokenized with the GPT-2 pattern (specs/data.md §3.3), each distinct piece becomes a word of
// byte symbols (§3.2), and the most frequent adjacent pair of symbols is merged, all its occurrences
// left to right (as the encoder of §3.4 applies a merge), until the vocabulary is full. The result
// is written as GPT-2 files (vocab.json + merges.txt, §3.1) and as a Hugging Face tokenizer.json.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mds::tok {

// How often each GPT-2 pre-tokenized piece occurs. One counter per thread; merge them at the end
// (the counts, and so the trained model, do not depend on how the texts were split over counters).
class PieceCounter {
public:
    // Pre-tokenizes valid UTF-8 text with the GPT-2 pattern and counts its pieces.
    void add_text(std::string_view text);
    void add_piece(std::string_view piece, std::uint64_t count = 1);
    // Adds the counts of `other` (left empty).
    void merge_from(PieceCounter& other);

    std::size_t unique_pieces() const { return counts_.size(); }
    std::uint64_t total_pieces() const { return total_; }
    // (piece, count), sorted by piece bytes.
    std::vector<std::pair<std::string, std::uint64_t>> sorted() const;

private:
    struct Hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const;
    };
    std::unordered_map<std::string, std::uint64_t, Hash, std::equal_to<>> counts_;
    std::vector<std::string_view> pieces_;  // scratch for add_text
    std::uint64_t total_ = 0;
};

// The largest --vocab-size: 8 times BLOOM's 250,880 and above the largest vocabularies in use
// (XLM-V's 1,000,000); ids stay far inside the int32 of Megatron's indexed datasets.
inline constexpr std::size_t kMaxBpeVocabSize = std::size_t{1} << 21;

struct BpeTrainerConfig {
    // Size of the final vocabulary: 256 byte symbols + learned tokens + special tokens.
    // Training stops earlier when no pair occurs min_frequency times. (--vocab-size)
    std::size_t vocab_size = 8192;
    // A pair is merged only if it occurs at least this often, counting piece frequencies.
    // (--min-frequency, default 2 as in Hugging Face tokenizers' BpeTrainer)
    std::uint64_t min_frequency = 2;
    // Appended after the learned tokens, in this order; the first is usually <|endoftext|>.
    // (--special-tokens)
    std::vector<std::string> special_tokens{"<|endoftext|>"};
};

// A trained model. Ids: 0..255 are the byte symbols in the order of GPT-2's `bs` list (byte 0x21
// '!' is 0, byte 0x00 'Ā' is 188), then the learned tokens in the order their first merge created
// them, then the special tokens. Merge r creates id 256 + r unless its result is already a token
// (if another pair ever produced the same string, "a"+"bc" after "ab"+"c"; not seen in practice);
// then the merge is kept and reuses that id, as Hugging Face tokenizers' trainer does, and
// `merges_reusing_token` counts it. A pair whose result would be a special token is never merged.
struct TrainedBpe {
    std::vector<std::string> tokens;                           // id -> token string
    std::vector<std::pair<std::string, std::string>> merges;   // in rank order
    std::size_t special_begin = 0;                             // id of the first special token
    std::size_t merges_reusing_token = 0;
    std::uint64_t last_merge_count = 0;                        // frequency of the last merged pair

    // GPT-2's encoder.json format: {"!": 0, "\"": 1, ...} in id order, non-ASCII as \uXXXX.
    std::string gpt2_vocab_json() const;
    // GPT-2's vocab.bpe format: "#version: 0.2", then "A B" per merge, each line ending in "\n".
    std::string gpt2_merges_txt() const;
    // A Hugging Face tokenizer.json for the same model: BPE, ByteLevel pre-tokenizer (GPT-2
    // pattern, no prefix space), ByteLevel decoder, the special tokens as added special tokens.
    std::string hf_tokenizer_json() const;
};

// Throws mds::Error for a configuration train_bpe cannot use: a vocabulary smaller than the byte
// symbols plus special tokens or larger than kMaxBpeVocabSize, min_frequency 0, an empty, repeated
// or byte-symbol special token. Messages name the mds-tokenizer-train flag.
void check_bpe_trainer_config(const BpeTrainerConfig& config);

// Called now and then during training with (merges done, merges wanted at most).
using BpeTrainProgress = std::function<void(std::size_t, std::size_t)>;

// Learns merges from the counted pieces. Ties between pairs of equal frequency go to the pair whose
// (left token, right token) strings are smallest in byte order, so the result is deterministic.
TrainedBpe train_bpe(const PieceCounter& counts, const BpeTrainerConfig& config,
                     const BpeTrainProgress& progress = {});

}  // namespace mds::tok
