#include "mds/tokenizer/bpe_trainer.h"

#include <nlohmann/json.hpp>  // ordered_json for tokenizer.json, string escaping for vocab.json

#include <algorithm>
#include <array>
#include <cassert>
#include <unordered_set>

#include "mds/tokenizer/bpe.h"          // byte_symbols, hash_bytes
#include "mds/tokenizer/long_text.h"    // next_cut
#include "mds/tokenizer/pretokenizer.h"
#include "mds/util/error.h"

namespace mds::tok {

// ---- counting pieces ----

std::size_t PieceCounter::Hash::operator()(std::string_view s) const { return hash_bytes(s); }

void PieceCounter::add_piece(std::string_view piece, std::uint64_t count) {
    if (piece.empty()) return;
    auto it = counts_.find(piece);
    if (it != counts_.end())
        it->second += count;
    else
        counts_.emplace(std::string(piece), count);
    total_ += count;
}

void PieceCounter::add_text(std::string_view text) {
    // A huge text is pre-tokenized a mebibyte at a time (long_text.h: same pieces), so that the
    // piece views never take several times the text's memory.
    constexpr std::size_t kChunk = std::size_t{1} << 20;
    for (std::size_t start = 0;;) {
        const std::size_t cut = text.size() - start > kChunk ? next_cut(text, start + kChunk, PreTokenizer::Gpt2) : text.size();
        pieces_.clear();
        pretokenize(PreTokenizer::Gpt2, text.substr(start, cut - start), pieces_);
        for (std::string_view p : pieces_) add_piece(p);
        if (cut == text.size()) break;
        start = cut;
    }
    if (pieces_.capacity() > kChunk) std::vector<std::string_view>().swap(pieces_);
}

void PieceCounter::merge_from(PieceCounter& other) {
    if (counts_.empty()) {
        counts_.swap(other.counts_);
        total_ = other.total_;
    } else {
        for (const auto& [piece, n] : other.counts_) add_piece(piece, n);
    }
    other.counts_.clear();
    other.total_ = 0;
}

std::vector<std::pair<std::string, std::uint64_t>> PieceCounter::sorted() const {
    std::vector<std::pair<std::string, std::uint64_t>> v(counts_.begin(), counts_.end());
    std::sort(v.begin(), v.end());
    return v;
}

// ---- training ----

namespace {

using PairKey = std::uint64_t;  // left id << 32 | right id

inline PairKey pair_key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}
inline std::int32_t pair_left(PairKey p) { return static_cast<std::int32_t>(p >> 32); }
inline std::int32_t pair_right(PairKey p) { return static_cast<std::int32_t>(p & 0xFFFFFFFFu); }

// GPT-2's `bs` list (specs/data.md §3.2): the bytes that map to themselves, then the other 68 in
// increasing order. Position in this list = vocabulary id of the byte's symbol.
std::array<int, 256> gpt2_byte_order() {
    std::array<int, 256> bs{};
    std::array<bool, 256> listed{};
    std::size_t n = 0;
    auto add = [&](int b) {
        bs[n++] = b;
        listed[static_cast<std::size_t>(b)] = true;
    };
    for (int b = 0x21; b <= 0x7E; ++b) add(b);
    for (int b = 0xA1; b <= 0xAC; ++b) add(b);
    for (int b = 0xAE; b <= 0xFF; ++b) add(b);
    for (int b = 0; b < 256; ++b)
        if (!listed[static_cast<std::size_t>(b)]) add(b);
    return bs;
}

// The state of one training run: distinct pieces as words of symbol ids, the frequency of every
// adjacent pair, and for each pair the words that may contain it (an over-approximation: entries
// go stale as words change and are checked when used). A max-heap holds candidate pairs; entries
// are not updated in place: every increase of a pair's count pushes a new entry, and a popped
// entry whose count is no longer current is dropped or pushed again with the current count.
class Trainer {
public:
    Trainer(const PieceCounter& counts, const BpeTrainerConfig& config, TrainedBpe& out)
        : config_(config), out_(out) {
        const auto& symbols = byte_symbols();
        const auto bs = gpt2_byte_order();
        std::array<std::int32_t, 256> byte_id{};
        for (std::size_t i = 0; i < 256; ++i) {
            const auto b = static_cast<std::size_t>(bs[i]);
            byte_id[b] = static_cast<std::int32_t>(i);
            out_.tokens.push_back(symbols[b]);
            token_ids_.emplace(symbols[b], static_cast<std::int32_t>(i));
        }
        for (const auto& [piece, n] : counts.sorted()) {
            if (piece.size() < 2) continue;  // no pair to merge
            std::vector<std::int32_t> w;
            w.reserve(piece.size());
            for (unsigned char c : piece) w.push_back(byte_id[c]);
            words_.push_back(std::move(w));
            freq_.push_back(static_cast<std::int64_t>(n));
        }
        for (std::size_t wi = 0; wi < words_.size(); ++wi) {
            const auto& w = words_[wi];
            for (std::size_t k = 0; k + 1 < w.size(); ++k) {
                PairKey p = pair_key(w[k], w[k + 1]);
                pair_count_[p] += freq_[wi];
                auto& v = where_[p];
                if (v.empty() || v.back() != wi) v.push_back(static_cast<std::uint32_t>(wi));
            }
        }
        heap_.reserve(pair_count_.size());
        for (const auto& [p, n] : pair_count_) heap_.push_back({n, p});
        std::make_heap(heap_.begin(), heap_.end(), lower_);
    }

    void run(std::size_t learned_target, const BpeTrainProgress& progress) {
        std::unordered_set<std::string> specials(config_.special_tokens.begin(), config_.special_tokens.end());
        std::unordered_set<PairKey> banned;
        std::size_t learned = 0;
        while (learned < learned_target && !heap_.empty()) {
            std::pop_heap(heap_.begin(), heap_.end(), lower_);
            const Entry top = heap_.back();
            heap_.pop_back();
            auto it = pair_count_.find(top.pair);
            const std::int64_t current = it == pair_count_.end() ? 0 : it->second;
            if (current != top.count) {
                // Stale. A higher current count has its own, fresher entry; a lower one goes back.
                if (current > 0 && current < top.count) push(current, top.pair);
                continue;
            }
            if (static_cast<std::uint64_t>(current) < config_.min_frequency) break;  // the best is too rare
            if (banned.count(top.pair)) continue;
            const std::int32_t a = pair_left(top.pair), b = pair_right(top.pair);
            std::string merged = out_.tokens[static_cast<std::size_t>(a)] + out_.tokens[static_cast<std::size_t>(b)];
            if (specials.count(merged)) {  // would shadow a special token: never merge this pair
                banned.insert(top.pair);
                continue;
            }
            auto [tit, inserted] = token_ids_.try_emplace(merged, static_cast<std::int32_t>(out_.tokens.size()));
            if (inserted) {
                out_.tokens.push_back(std::move(merged));
                ++learned;
            } else {
                ++out_.merges_reusing_token;
            }
            out_.merges.emplace_back(out_.tokens[static_cast<std::size_t>(a)], out_.tokens[static_cast<std::size_t>(b)]);
            out_.last_merge_count = static_cast<std::uint64_t>(current);
            apply_merge(top.pair, tit->second);
            if (progress && out_.merges.size() % 256 == 0) progress(learned, learned_target);
        }
        if (progress) progress(learned, learned_target);
    }

private:
    struct Entry {
        std::int64_t count;
        PairKey pair;
    };
    // Heap order: higher count first; among equal counts the smaller (left, right) strings first.
    struct Lower {
        const std::vector<std::string>* tokens;
        bool operator()(const Entry& x, const Entry& y) const {
            if (x.count != y.count) return x.count < y.count;
            const auto& t = *tokens;
            const std::string& xl = t[static_cast<std::size_t>(pair_left(x.pair))];
            const std::string& yl = t[static_cast<std::size_t>(pair_left(y.pair))];
            if (xl != yl) return xl > yl;
            return t[static_cast<std::size_t>(pair_right(x.pair))] > t[static_cast<std::size_t>(pair_right(y.pair))];
        }
    };

    void push(std::int64_t count, PairKey p) {
        heap_.push_back({count, p});
        std::push_heap(heap_.begin(), heap_.end(), lower_);
    }

    // Replaces every occurrence of `pair` (left to right, non-overlapping: "a a a" with (a, a)
    // becomes "aa a", as the encoder does it) by `merged` in the words that contain it, and
    // updates the pair counts by the pairs each word lost and gained.
    void apply_merge(PairKey pair, std::int32_t merged) {
        auto node = where_.extract(pair);
        if (node.empty()) return;
        std::vector<std::uint32_t>& ws = node.mapped();
        std::sort(ws.begin(), ws.end());
        ws.erase(std::unique(ws.begin(), ws.end()), ws.end());
        const std::int32_t a = pair_left(pair), b = pair_right(pair);
        increased_.clear();
        for (std::uint32_t wi : ws) {
            std::vector<std::int32_t>& w = words_[wi];
            // In place, left to right; only the pairs around each occurrence change. Between two
            // adjacent occurrences ("a b a b" -> "c c") the pair (b, a) is removed once, by the
            // first, and (c, c) added once, by the second.
            deltas_.clear();
            const std::size_t n = w.size();
            std::size_t out = 0;
            bool prev_merged = false;  // the symbol before i is the result of this merge
            for (std::size_t i = 0; i < n;) {
                if (i + 1 < n && w[i] == a && w[i + 1] == b) {
                    if (out > 0) {
                        if (!prev_merged) deltas_.push_back({pair_key(w[i - 1], a), -1});
                        deltas_.push_back({pair_key(w[out - 1], merged), +1});
                    }
                    deltas_.push_back({pair, -1});
                    if (i + 2 < n) {
                        deltas_.push_back({pair_key(b, w[i + 2]), -1});
                        const bool next_merges = i + 3 < n && w[i + 2] == a && w[i + 3] == b;
                        if (!next_merges) deltas_.push_back({pair_key(merged, w[i + 2]), +1});
                    }
                    w[out++] = merged;
                    i += 2;
                    prev_merged = true;
                } else {
                    w[out++] = w[i++];
                    prev_merged = false;
                }
            }
            if (out == n) continue;  // a stale entry of where_
            w.resize(out);
            std::sort(deltas_.begin(), deltas_.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
            const std::int64_t f = freq_[wi];
            for (std::size_t i = 0; i < deltas_.size();) {
                const PairKey p = deltas_[i].first;
                std::int64_t d = 0;
                for (; i < deltas_.size() && deltas_[i].first == p; ++i) d += deltas_[i].second;
                if (d == 0) continue;
                auto cit = pair_count_.try_emplace(p, 0).first;
                cit->second += d * f;
                assert(cit->second >= 0);
                if (cit->second == 0) pair_count_.erase(cit);
                if (d > 0) {
                    auto& v = where_[p];
                    if (v.empty() || v.back() != wi) v.push_back(wi);
                    increased_.push_back(p);
                }
            }
        }
        std::sort(increased_.begin(), increased_.end());
        increased_.erase(std::unique(increased_.begin(), increased_.end()), increased_.end());
        for (PairKey p : increased_) push(pair_count_[p], p);
    }

    const BpeTrainerConfig& config_;
    TrainedBpe& out_;
    std::unordered_map<std::string, std::int32_t> token_ids_;
    std::vector<std::vector<std::int32_t>> words_;
    std::vector<std::int64_t> freq_;
    std::unordered_map<PairKey, std::int64_t> pair_count_;
    std::unordered_map<PairKey, std::vector<std::uint32_t>> where_;
    std::vector<Entry> heap_;
    Lower lower_{&out_.tokens};
    // Scratch of apply_merge.
    std::vector<std::pair<PairKey, int>> deltas_;
    std::vector<PairKey> increased_;
};

}  // namespace

void check_bpe_trainer_config(const BpeTrainerConfig& config) {
    const std::size_t fixed = 256 + config.special_tokens.size();
    if (config.vocab_size < fixed)
        throw Error("--vocab-size " + std::to_string(config.vocab_size) + " is too small: the 256 byte symbols and " +
                    std::to_string(config.special_tokens.size()) + " special tokens need " + std::to_string(fixed));
    if (config.vocab_size > kMaxBpeVocabSize)
        throw Error("--vocab-size " + std::to_string(config.vocab_size) + " is too large: at most " +
                    std::to_string(kMaxBpeVocabSize) + " (BLOOM's vocabulary has 250880 tokens, GPT-2's 50257)");
    if (config.min_frequency < 1) throw Error("--min-frequency must be at least 1");
    const auto& symbols = byte_symbols();
    for (std::size_t i = 0; i < config.special_tokens.size(); ++i) {
        const std::string& s = config.special_tokens[i];
        if (s.empty()) throw Error("special token " + std::to_string(i + 1) + " is empty");
        if (std::find(symbols.begin(), symbols.end(), s) != symbols.end())
            throw Error("special token " + s + " is one of the 256 byte symbols");
        for (std::size_t j = 0; j < i; ++j)
            if (config.special_tokens[j] == s) throw Error("special token " + s + " is listed twice");
    }
}

TrainedBpe train_bpe(const PieceCounter& counts, const BpeTrainerConfig& config, const BpeTrainProgress& progress) {
    check_bpe_trainer_config(config);
    const std::size_t fixed = 256 + config.special_tokens.size();
    TrainedBpe out;
    // Training stops when the pairs run out, usually long before a large --vocab-size is reached.
    out.tokens.reserve(std::min<std::size_t>(config.vocab_size, 1 << 16));
    Trainer trainer(counts, config, out);
    trainer.run(config.vocab_size - fixed, progress);
    out.special_begin = out.tokens.size();
    for (const auto& s : config.special_tokens) out.tokens.push_back(s);
    return out;
}

// ---- writing ----

namespace {
// A JSON string as Python's json.dumps writes it by default (ensure_ascii: \uXXXX escapes).
std::string json_ascii(const std::string& s) { return nlohmann::json(s).dump(-1, ' ', true); }
}  // namespace

std::string TrainedBpe::gpt2_vocab_json() const {
    std::string out = "{";
    for (std::size_t id = 0; id < tokens.size(); ++id) {
        if (id) out += ", ";
        out += json_ascii(tokens[id]);
        out += ": ";
        out += std::to_string(id);
    }
    out += "}";
    return out;
}

std::string TrainedBpe::gpt2_merges_txt() const {
    std::string out = "#version: 0.2\n";
    for (const auto& [a, b] : merges) {
        out += a;
        out += ' ';
        out += b;
        out += '\n';
    }
    return out;
}

std::string TrainedBpe::hf_tokenizer_json() const {
    using nlohmann::ordered_json;
    auto byte_level = [](bool add_prefix_space, bool trim_offsets) {
        return ordered_json{{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space},
                            {"trim_offsets", trim_offsets}, {"use_regex", true}};
    };
    ordered_json added = ordered_json::array();
    for (std::size_t id = special_begin; id < tokens.size(); ++id)
        added.push_back({{"id", id}, {"content", tokens[id]}, {"single_word", false}, {"lstrip", false},
                         {"rstrip", false}, {"normalized", false}, {"special", true}});
    ordered_json vocab = ordered_json::object();
    for (std::size_t id = 0; id < tokens.size(); ++id) vocab[tokens[id]] = id;
    ordered_json merge_list = ordered_json::array();
    for (const auto& [a, b] : merges) merge_list.push_back(a + " " + b);
    ordered_json model = {{"type", "BPE"},
                          {"dropout", nullptr},
                          {"unk_token", nullptr},
                          {"continuing_subword_prefix", nullptr},
                          {"end_of_word_suffix", nullptr},
                          {"fuse_unk", false},
                          {"byte_fallback", false},
                          {"ignore_merges", false},
                          {"vocab", std::move(vocab)},
                          {"merges", std::move(merge_list)}};
    ordered_json j = {{"version", "1.0"},
                      {"truncation", nullptr},
                      {"padding", nullptr},
                      {"added_tokens", std::move(added)},
                      {"normalizer", nullptr},
                      {"pre_tokenizer", byte_level(false, true)},
                      {"post_processor", byte_level(true, false)},
                      {"decoder", byte_level(true, true)},
                      {"model", std::move(model)}};
    return j.dump(2) + "\n";
}

}  // namespace mds::tok
