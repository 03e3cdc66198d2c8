#include "mds/tokenizer/bpe.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>  // greater

namespace mds::tok {

const std::array<std::string, 256>& byte_symbols() {
    static const std::array<std::string, 256> table = [] {
        // bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes in
        // increasing order to U+0100.. (specs/data.md §3.2).
        std::array<std::string, 256> t;
        auto keeps = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            char32_t cp = keeps(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
            std::string s;
            if (cp < 0x80) {
                s += static_cast<char>(cp);
            } else {
                s += static_cast<char>(0xC0 | (cp >> 6));
                s += static_cast<char>(0x80 | (cp & 0x3F));
            }
            t[static_cast<std::size_t>(b)] = s;
        }
        return t;
    }();
    return table;
}

std::uint64_t hash_bytes(std::string_view s) {
    // 64-bit multiply-mix over 8-byte words; never returns 0 (0 marks an empty cache slot).
    constexpr std::uint64_t kMul = 0x9E3779B97F4A7C15ULL;
    std::uint64_t h = 0x243F6A8885A308D3ULL ^ (s.size() * kMul);
    const char* p = s.data();
    std::size_t n = s.size();
    while (n >= 8) {
        std::uint64_t w;
        std::memcpy(&w, p, 8);
        h = (h ^ w) * kMul;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    std::uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * kMul;
    h ^= h >> 32;
    return h ? h : 1;
}

namespace {
inline std::uint64_t mix64(std::uint64_t k) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDULL;
    k ^= k >> 33;
    k *= 0xC4CEB9FE1A85EC53ULL;
    k ^= k >> 33;
    return k;
}
constexpr std::uint64_t kEmptyKey = ~std::uint64_t{0};
}  // namespace

std::int32_t BpeModel::symbol(const std::string& s) {
    auto [it, inserted] = sym_ids_.try_emplace(s, static_cast<std::int32_t>(sym_strings_.size()));
    if (inserted) sym_strings_.push_back(s);
    return it->second;
}

BpeModel::BpeModel(const BpeConfig& config) : ignore_merges_(config.ignore_merges) {
    vocab_.reserve(config.vocab.size());
    for (const auto& [token, id] : config.vocab) {
        vocab_[token] = id;
        max_id_ = std::max(max_id_, id);
    }
    // Keyed by id, not indexed: ids come from the file and may be anything up to 2^31 - 1, so a
    // table sized by the largest id could ask for tens of GiB (and max_id_ + 1 could overflow).
    id_to_token_.reserve(vocab_.size());
    for (const auto& [token, id] : vocab_)
        if (id >= 0) id_to_token_[id] = token;

    const auto& bytes = byte_symbols();
    for (int b = 0; b < 256; ++b) byte_sym_[static_cast<std::size_t>(b)] = symbol(bytes[static_cast<std::size_t>(b)]);

    // Merges: later duplicates overwrite earlier ranks, as Python's dict(zip(merges, range)).
    struct Entry {
        std::uint64_t key;
        Merge m;
    };
    std::vector<Entry> entries;
    entries.reserve(config.merges.size());
    for (std::size_t r = 0; r < config.merges.size(); ++r) {
        const auto& [a, b] = config.merges[r];
        std::int32_t sa = symbol(a), sb = symbol(b), sr = symbol(a + b);
        std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(sa)) << 32) | static_cast<std::uint32_t>(sb);
        entries.push_back({key, {static_cast<std::int32_t>(r), sr}});
    }
    std::size_t cap = 16;
    while (cap < entries.size() * 2) cap <<= 1;
    merge_keys_.assign(cap, kEmptyKey);
    merge_vals_.resize(cap);
    merge_mask_ = cap - 1;
    for (const auto& e : entries) {
        std::uint64_t i = mix64(e.key) & merge_mask_;
        while (merge_keys_[i] != kEmptyKey && merge_keys_[i] != e.key) i = (i + 1) & merge_mask_;
        merge_keys_[i] = e.key;
        merge_vals_[i] = e.m;  // a duplicate pair takes the later rank
    }

    sym_token_.resize(sym_strings_.size());
    for (std::size_t s = 0; s < sym_strings_.size(); ++s) {
        auto it = vocab_.find(sym_strings_[s]);
        sym_token_[s] = it == vocab_.end() ? config.unknown_id : it->second;
    }
}

const BpeModel::Merge* BpeModel::find_merge(std::int32_t a, std::int32_t b) const {
    std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
    std::uint64_t i = mix64(key) & merge_mask_;
    for (;;) {
        std::uint64_t k = merge_keys_[i];
        if (k == key) return &merge_vals_[i];
        if (k == kEmptyKey) return nullptr;
        i = (i + 1) & merge_mask_;
    }
}

std::int32_t BpeModel::token_id(std::string_view token) const {
    auto it = vocab_.find(std::string(token));
    return it == vocab_.end() ? -1 : it->second;
}

const std::string& BpeModel::token_string(std::int32_t id) const {
    static const std::string empty;
    auto it = id_to_token_.find(id);
    return it == id_to_token_.end() ? empty : it->second;
}

void BpeModel::encode_piece_reference(std::string_view piece, std::vector<std::int32_t>& out) const {
    std::vector<std::int32_t> word;
    for (unsigned char c : piece) word.push_back(byte_sym_[c]);
    while (word.size() >= 2) {
        const Merge* best = nullptr;
        std::int32_t first = 0, second = 0;
        for (std::size_t k = 0; k + 1 < word.size(); ++k) {
            const Merge* m = find_merge(word[k], word[k + 1]);
            if (m && (!best || m->rank < best->rank)) {
                best = m;
                first = word[k];
                second = word[k + 1];
            }
        }
        if (!best) break;
        std::vector<std::int32_t> merged;
        for (std::size_t i = 0; i < word.size();) {
            if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
                merged.push_back(best->result);
                i += 2;
            } else {
                merged.push_back(word[i++]);
            }
        }
        word.swap(merged);
    }
    for (std::int32_t s : word) out.push_back(finish_symbol(s));
}

// Most pieces are a few bytes: the reference loop on stack arrays beats the heap there. Ranks are
// unique per pair, so every position holding the lowest rank is an occurrence of the same pair.
void BpeModel::encode_small(std::string_view piece, std::vector<std::int32_t>& out) const {
    constexpr std::int32_t kNone = INT32_MAX;
    std::int32_t sym[kSmallPiece], rank[kSmallPiece], result[kSmallPiece];
    std::size_t m = piece.size();
    for (std::size_t i = 0; i < m; ++i) sym[i] = byte_sym_[static_cast<unsigned char>(piece[i])];
    auto set_rank = [&](std::size_t k) {
        const Merge* mg = find_merge(sym[k], sym[k + 1]);
        rank[k] = mg ? mg->rank : kNone;
        result[k] = mg ? mg->result : -1;
    };
    for (std::size_t k = 0; k + 1 < m; ++k) set_rank(k);
    while (m > 1) {
        std::int32_t best = kNone;
        for (std::size_t k = 0; k + 1 < m; ++k) best = std::min(best, rank[k]);
        if (best == kNone) break;
        // Merge every occurrence left to right, compacting in place (j <= i always).
        std::size_t j = 0;
        for (std::size_t i = 0; i < m;) {
            if (i + 1 < m && rank[i] == best) {
                sym[j++] = result[i];
                i += 2;
            } else {
                sym[j++] = sym[i++];
            }
        }
        m = j;
        for (std::size_t k = 0; k + 1 < m; ++k) set_rank(k);
    }
    for (std::size_t i = 0; i < m; ++i) out.push_back(finish_symbol(sym[i]));
}

void BpeModel::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
    const std::size_t n = piece.size();
    if (n == 0) return;
    if (ignore_merges_) {
        // The piece's byte symbols concatenated, looked up whole.
        std::string joined;
        const auto& bytes = byte_symbols();
        for (unsigned char c : piece) joined += bytes[c];
        auto it = vocab_.find(joined);
        if (it != vocab_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    if (n == 1) {
        out.push_back(finish_symbol(byte_sym_[static_cast<unsigned char>(piece[0])]));
        return;
    }
    if (n <= kSmallPiece) {
        encode_small(piece, out);
        return;
    }
    // Symbols as a linked list over byte positions; candidate merges in a min-heap ordered by
    // (rank, position). A "round" takes every entry of the lowest rank, then applies them left to
    // right, skipping stale ones: exactly the reference's "merge all occurrences of the best pair".
    struct Node {
        std::int32_t sym, prev, next;
    };
    struct Cand {
        std::int32_t rank, pos, left, right;
        bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    thread_local std::vector<Node> nodes;
    thread_local std::vector<Cand> heap;  // std::push_heap/pop_heap with greater<>: a min-heap
    thread_local std::vector<Cand> round;
    nodes.resize(n);
    for (std::size_t i = 0; i < n; ++i)
        nodes[i] = {byte_sym_[static_cast<unsigned char>(piece[i])], static_cast<std::int32_t>(i) - 1,
                    i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1};
    heap.clear();
    const std::greater<Cand> order;
    auto consider = [&](std::int32_t pos) {
        if (pos < 0) return;
        std::int32_t nx = nodes[static_cast<std::size_t>(pos)].next;
        if (nx < 0) return;
        std::int32_t a = nodes[static_cast<std::size_t>(pos)].sym, b = nodes[static_cast<std::size_t>(nx)].sym;
        if (const Merge* m = find_merge(a, b)) {
            heap.push_back({m->rank, pos, a, b});
            std::push_heap(heap.begin(), heap.end(), order);
        }
    };
    for (std::size_t i = 0; i + 1 < n; ++i) consider(static_cast<std::int32_t>(i));
    while (!heap.empty()) {
        const std::int32_t rank = heap.front().rank;
        round.clear();
        while (!heap.empty() && heap.front().rank == rank) {
            std::pop_heap(heap.begin(), heap.end(), order);
            round.push_back(heap.back());
            heap.pop_back();
        }
        for (const Cand& c : round) {
            Node& node = nodes[static_cast<std::size_t>(c.pos)];
            if (node.sym != c.left || node.next < 0) continue;
            Node& right = nodes[static_cast<std::size_t>(node.next)];
            if (right.sym != c.right) continue;
            node.sym = find_merge(c.left, c.right)->result;
            right.sym = -1;  // dead
            node.next = right.next;
            if (right.next >= 0) nodes[static_cast<std::size_t>(right.next)].prev = c.pos;
            consider(node.prev);
            consider(c.pos);
        }
    }
    for (std::int32_t i = 0; i >= 0; i = nodes[static_cast<std::size_t>(i)].next)
        out.push_back(finish_symbol(nodes[static_cast<std::size_t>(i)].sym));
}

BpeEncoder::BpeEncoder(const BpeModel& model, std::size_t max_cached_pieces)
    : model_(model), max_pieces_(max_cached_pieces) {
    if (max_pieces_ == 0) return;
    max_slots_ = 64;
    while (max_slots_ < max_pieces_ * 2) max_slots_ <<= 1;
    slots_.resize(std::min<std::size_t>(4096, max_slots_));  // grows on demand up to max_slots_
}

void BpeEncoder::grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    const std::size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
        if (s.hash == 0) continue;
        std::size_t i = s.hash & mask;
        while (slots_[i].hash != 0) i = (i + 1) & mask;
        slots_[i] = s;
    }
}

void BpeEncoder::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) {
    if (max_pieces_ == 0 || piece.size() == 1 || piece.size() > 256) {  // trivial, or too long to be worth caching
        model_.encode_piece(piece, out);
        return;
    }
    const std::uint64_t h = hash_bytes(piece);
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = h & mask;
    for (;;) {
        Slot& s = slots_[i];
        if (s.hash == 0) break;
        if (s.hash == h && s.key_len == piece.size() && std::memcmp(keys_.data() + s.key_off, piece.data(), piece.size()) == 0) {
            out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.ids_len);
            return;
        }
        i = (i + 1) & mask;
    }
    std::size_t before = out.size();
    model_.encode_piece(piece, out);
    if (count_ >= max_pieces_ || keys_.size() > (std::size_t{64} << 20)) {  // full: start over
        std::fill(slots_.begin(), slots_.end(), Slot{});
        keys_.clear();
        ids_.clear();
        count_ = 0;
        i = h & mask;
    } else if ((count_ + 1) * 2 > slots_.size() && slots_.size() < max_slots_) {  // keep load <= 1/2
        grow();
        const std::size_t m = slots_.size() - 1;
        for (i = h & m; slots_[i].hash != 0;) i = (i + 1) & m;
    }
    Slot& s = slots_[i];
    s.hash = h;
    s.key_off = static_cast<std::uint32_t>(keys_.size());
    s.key_len = static_cast<std::uint32_t>(piece.size());
    s.ids_off = static_cast<std::uint32_t>(ids_.size());
    s.ids_len = static_cast<std::uint32_t>(out.size() - before);
    keys_.append(piece);
    ids_.insert(ids_.end(), out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
    ++count_;
}

}  // namespace mds::tok
