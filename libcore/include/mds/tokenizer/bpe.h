// Byte-level BPE (specs/data.md §3.2-3.4): the bytes of a piece become GPT-2's byte symbols, then
// the adjacent pair of lowest merge rank is merged, all its occurrences left to right, until no
// pair has a rank. BpeModel is immutable and shared by threads; BpeEncoder adds a per-thread cache.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mds::tok {

// GPT-2's bytes_to_unicode(): the UTF-8 text of the symbol that stands for each byte.
const std::array<std::string, 256>& byte_symbols();

struct BpeConfig {
    // Token string -> id, as in vocab.json.
    std::vector<std::pair<std::string, std::int32_t>> vocab;
    // Merge pairs in rank order (rank = position). A pair listed twice keeps its last rank.
    std::vector<std::pair<std::string, std::string>> merges;
    // Id for a final symbol missing from the vocab. Megatron's GPT-2 tokenizer uses 0.
    std::int32_t unknown_id = 0;
    // tokenizer.json `ignore_merges`: a piece that is itself a token is not merged.
    bool ignore_merges = false;
};

class BpeModel {
public:
    explicit BpeModel(const BpeConfig& config);

    // Appends the ids of one pre-tokenized piece (raw bytes).
    void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const;
    // The same with the pair-by-pair reference loop instead of the heap (for tests).
    void encode_piece_reference(std::string_view piece, std::vector<std::int32_t>& out) const;

    // Id of a token string, or -1.
    std::int32_t token_id(std::string_view token) const;
    // Token string of an id ("" if unknown).
    const std::string& token_string(std::int32_t id) const;
    std::size_t vocab_entries() const { return vocab_.size(); }
    std::int32_t max_id() const { return max_id_; }

private:
    struct Merge {
        std::int32_t rank;
        std::int32_t result;  // symbol id of the concatenation
    };
    static constexpr std::size_t kSmallPiece = 32;  // longest piece for the stack-array path
    void encode_small(std::string_view piece, std::vector<std::int32_t>& out) const;
    std::int32_t symbol(const std::string& s);  // interns s
    const Merge* find_merge(std::int32_t a, std::int32_t b) const;
    std::int32_t finish_symbol(std::int32_t sym) const { return sym_token_[static_cast<std::size_t>(sym)]; }

    std::unordered_map<std::string, std::int32_t> vocab_;
    std::unordered_map<std::int32_t, std::string> id_to_token_;  // sparse: ids are whatever the file says
    std::int32_t max_id_ = -1;
    std::unordered_map<std::string, std::int32_t> sym_ids_;
    std::vector<std::string> sym_strings_;
    std::vector<std::int32_t> sym_token_;  // symbol -> token id (unknown_id when absent)
    std::array<std::int32_t, 256> byte_sym_{};
    // Open addressing over (a << 32 | b) keys.
    std::vector<std::uint64_t> merge_keys_;
    std::vector<Merge> merge_vals_;
    std::uint64_t merge_mask_ = 0;
    bool ignore_merges_ = false;
};

// Per-thread encoder: caches the ids of recent pieces (bounded; cleared when full).
class BpeEncoder {
public:
    explicit BpeEncoder(const BpeModel& model, std::size_t max_cached_pieces = 1 << 18);
    void encode_piece(std::string_view piece, std::vector<std::int32_t>& out);

private:
    struct Slot {
        std::uint64_t hash = 0;  // 0 = empty
        std::uint32_t key_off = 0, key_len = 0, ids_off = 0, ids_len = 0;
    };
    void grow();

    const BpeModel& model_;
    std::size_t max_pieces_;
    std::size_t max_slots_ = 0;
    std::vector<Slot> slots_;
    std::string keys_;
    std::vector<std::int32_t> ids_;
    std::size_t count_ = 0;
    std::vector<std::int32_t> tmp_;
};

std::uint64_t hash_bytes(std::string_view s);

}  // namespace mds::tok
