#include "mds/tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>  // vocab.json and tokenizer.json

#include <algorithm>
#include <set>

#include "mds/util/json_limits.h"
#include "mds/util/error.h"
#include "mds/util/files.h"
#include "mds/util/json_line.h"  // utf8_valid_prefix

namespace mds::tok {

namespace {

using nlohmann::json;

json parse_json_file(const std::string& path, const char* what) {
    // BLOOM's tokenizer.json is 14 MB, GPT-2's vocab.json 1 MB: a larger file is not a tokenizer.
    const std::string text = read_file(path, std::uint64_t{256} << 20, what);
    check_json_depth(text, path);
    try {
        return json::parse(text);
    } catch (const json::parse_error& e) {
        throw Error(path + ": not a valid " + what + " (JSON error at byte " + std::to_string(e.byte) + ")");
    } catch (const json::exception& e) {  // e.g. out_of_range for a number beyond double, 1e400
        throw Error(path + ": not a valid " + what + " (" + e.what() + ")");
    }
}

// True when v has containers nested more than `levels` deep; recurses at most `levels` times.
bool nested_deeper_than(const json& v, int levels) {
    if (!v.is_structured()) return false;
    if (levels == 0) return true;
    for (const json& e : v)
        if (nested_deeper_than(e, levels - 1)) return true;
    return false;
}

// The first 200 characters of v as JSON, for messages. dump() recurses once per level, so a
// deeply nested value (a few MB of "[[[[...") would overflow the stack: such a value is only named.
std::string short_dump(const json& v) {
    if (nested_deeper_than(v, 32)) return std::string("(") + v.type_name() + " nested deeper than 32 levels)";
    return v.dump().substr(0, 200);
}

// tokenizer.json is user input: its fields are read through these, which check the type, so a
// wrong type is an mds::Error naming the field rather than a nlohmann exception. A null field
// counts as absent, as in Hugging Face's serde defaults.
class JsonFields {
public:
    explicit JsonFields(const std::string& path) : path_(path) {}

    // obj[key], or nullptr when obj is not an object, lacks key, or holds null there.
    static const json* find(const json& obj, const char* key) {
        if (!obj.is_object()) return nullptr;
        auto it = obj.find(key);
        return it == obj.end() || it->is_null() ? nullptr : &*it;
    }
    std::string string(const json& obj, const char* key, const std::string& where, std::string fallback = "") const {
        const json* v = find(obj, key);
        if (!v) return fallback;
        if (!v->is_string()) wrong_type(where, key, "a string", *v);
        return v->get<std::string>();
    }
    bool boolean(const json& obj, const char* key, const std::string& where, bool fallback) const {
        const json* v = find(obj, key);
        if (!v) return fallback;
        if (!v->is_boolean()) wrong_type(where, key, "a boolean", *v);
        return v->get<bool>();
    }
    double number(const json& obj, const char* key, const std::string& where, double fallback) const {
        const json* v = find(obj, key);
        if (!v) return fallback;
        if (!v->is_number()) wrong_type(where, key, "a number", *v);
        return v->get<double>();
    }
    std::int32_t id(const json& obj, const char* key, const std::string& where) const {
        const json* v = find(obj, key);
        // (an unsigned value above INT64_MAX reads as negative here, so it is rejected too)
        if (!v || !v->is_number_integer() || v->get<std::int64_t>() < 0 || v->get<std::int64_t>() > INT32_MAX)
            throw Error(path_ + ": " + where + "." + key + " is " + (v ? short_dump(*v) : std::string("missing")) +
                        ", expected an integer in [0, 2^31)");
        return v->get<std::int32_t>();
    }
    // The array obj[key] (empty when absent); anything else there is an error.
    const json& array(const json& obj, const char* key, const std::string& where) const {
        static const json empty = json::array();
        const json* v = find(obj, key);
        if (!v) return empty;
        if (!v->is_array()) wrong_type(where, key, "an array", *v);
        return *v;
    }

private:
    [[noreturn]] void wrong_type(const std::string& where, const char* key, const char* expected, const json& v) const {
        throw Error(path_ + ": " + where + "." + key + " is " + v.type_name() + ", expected " + expected);
    }
    const std::string& path_;
};

std::vector<std::pair<std::string, std::int32_t>> vocab_from_json(const json& v, const std::string& path) {
    if (!v.is_object()) throw Error(path + ": expected a JSON object mapping token strings to ids");
    std::vector<std::pair<std::string, std::int32_t>> vocab;
    vocab.reserve(v.size());
    for (const auto& [token, id] : v.items()) {
        if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > INT32_MAX)
            throw Error(path + ": token " + json(token).dump() + " has id " + short_dump(id) + ", expected an integer in [0, 2^31)");
        vocab.emplace_back(token, id.get<std::int32_t>());
    }
    return vocab;
}

// Splits on any run of ASCII whitespace, as Python's str.split().
std::vector<std::string> split_ws(std::string_view line) {
    std::vector<std::string> parts;
    std::size_t i = 0;
    auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; };
    while (i < line.size()) {
        while (i < line.size() && ws(line[i])) ++i;
        std::size_t j = i;
        while (j < line.size() && !ws(line[j])) ++j;
        if (j > i) parts.emplace_back(line.substr(i, j - i));
        i = j;
    }
    return parts;
}

}  // namespace

Tokenizer Tokenizer::from_gpt2_files(const std::string& vocab_path, const std::string& merges_path) {
    BpeConfig cfg;
    cfg.vocab = vocab_from_json(parse_json_file(vocab_path, "GPT-2 vocabulary (vocab.json)"), vocab_path);
    // merges.txt: read().split('\n')[1:-1]: the first line (#version) and the last element (after
    // the final newline) are dropped; each remaining line is split on whitespace; a line that is
    // not two fields still takes a rank but can never match a pair.
    std::string text = read_file(merges_path);
    if (utf8_valid_prefix(text) != text.size())
        throw Error(merges_path + ": invalid UTF-8 at byte " + std::to_string(utf8_valid_prefix(text)));
    std::vector<std::string_view> lines;
    for (std::size_t start = 0;;) {
        std::size_t nl = text.find('\n', start);
        if (nl == std::string::npos) {
            lines.emplace_back(text.data() + start, text.size() - start);
            break;
        }
        lines.emplace_back(text.data() + start, nl - start);
        start = nl + 1;
    }
    if (lines.size() < 2) throw Error(merges_path + ": no merges (expected a #version line, then one pair per line)");
    for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
        auto parts = split_ws(lines[i]);
        if (parts.size() == 2)
            cfg.merges.emplace_back(std::move(parts[0]), std::move(parts[1]));
        else
            cfg.merges.emplace_back("\x01invalid", std::to_string(i));  // keeps the rank, never matches
    }
    cfg.unknown_id = 0;
    Tokenizer t;
    t.model_ = std::make_shared<BpeModel>(cfg);
    t.pre_ = PreTokenizer::Gpt2;
    t.vocab_size_ = cfg.vocab.size();
    t.eod_id_ = t.model_->token_id("<|endoftext|>");
    t.description_ = "GPT-2 BPE (" + vocab_path + ", " + merges_path + "; " + std::to_string(cfg.vocab.size()) +
                     " tokens, " + std::to_string(cfg.merges.size()) + " merges)";
    return t;
}

Tokenizer Tokenizer::from_hf_json(const std::string& path) {
    json j = parse_json_file(path, "tokenizer.json");
    auto fail = [&](const std::string& what) { throw Error(path + ": " + what); };
    const JsonFields get(path);
    const json* model_ptr = JsonFields::find(j, "model");
    if (!model_ptr) fail("not a Hugging Face tokenizer.json (no \"model\")");
    const json& model = *model_ptr;
    if (!model.is_object()) fail(std::string("model is ") + model.type_name() + ", expected an object");
    if (get.string(model, "type", "model", "BPE") != "BPE")
        fail("model type " + get.string(model, "type", "model") + " is not supported (only byte-level BPE)");
    if (const json* normalizer = JsonFields::find(j, "normalizer"))
        fail("normalizer " + (normalizer->is_object() ? get.string(*normalizer, "type", "normalizer", "?") : std::string("?")) +
             " is not supported (only none)");
    if (get.number(model, "dropout", "model", 0.0) != 0.0) fail("BPE dropout is not supported");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
        if (!get.string(model, k, "model").empty()) fail(std::string(k) + " is not supported for byte-level BPE");
    if (get.boolean(model, "byte_fallback", "model", false)) fail("byte_fallback is not supported");

    BpeConfig cfg;
    // References, not copies, here and below: copying a json recurses once per nesting level.
    static const json no_vocab = json::object();
    const json* vocab = JsonFields::find(model, "vocab");
    cfg.vocab = vocab_from_json(vocab ? *vocab : no_vocab, path + " (model.vocab)");
    const json& merges = get.array(model, "merges", "model");
    for (std::size_t i = 0; i < merges.size(); ++i) {
        const json& m = merges[i];
        if (m.is_string()) {
            const std::string s = m.get<std::string>();
            auto sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                fail("merge " + std::to_string(i) + " " + m.dump() + " is not two tokens separated by one space");
            cfg.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            cfg.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        } else {
            fail("merge " + std::to_string(i) + " is neither \"a b\" nor [\"a\", \"b\"]");
        }
    }
    cfg.ignore_merges = get.boolean(model, "ignore_merges", "model", false);
    cfg.unknown_id = -1;
    if (const json* unk = JsonFields::find(model, "unk_token"); unk && unk->is_string()) {
        auto it = std::find_if(cfg.vocab.begin(), cfg.vocab.end(),
                               [&](const auto& e) { return e.first == unk->get_ref<const std::string&>(); });
        if (it != cfg.vocab.end()) cfg.unknown_id = it->second;
    }
    std::set<std::string_view> tokens;
    for (const auto& e : cfg.vocab) tokens.insert(e.first);
    const auto& bytes = byte_symbols();
    for (int b = 0; b < 256; ++b)
        if (!tokens.count(bytes[static_cast<std::size_t>(b)]))
            fail("the vocabulary lacks the byte-level symbol of byte " + std::to_string(b) + ": not a byte-level BPE");

    Tokenizer t;
    // Pre-tokenizer: ByteLevel(use_regex) alone, or BLOOM's Split + ByteLevel(use_regex=false).
    static const json absent;  // null
    const json* pre_ptr = JsonFields::find(j, "pre_tokenizer");
    const json& pre = pre_ptr ? *pre_ptr : absent;
    auto byte_level = [&](const json& p, const std::string& where, bool& use_regex) {
        t.add_prefix_space_ = get.boolean(p, "add_prefix_space", where, false);
        use_regex = get.boolean(p, "use_regex", where, true);
    };
    // Only the type of a component decides whether it is supported; a wrong type elsewhere in it
    // is an error naming the field.
    auto type_of = [&](const json& p, const std::string& where) { return get.string(p, "type", where); };
    if (type_of(pre, "pre_tokenizer") == "ByteLevel") {
        bool use_regex = true;
        byte_level(pre, "pre_tokenizer", use_regex);
        t.pre_ = use_regex ? PreTokenizer::Gpt2 : PreTokenizer::Whole;
    } else if (type_of(pre, "pre_tokenizer") == "Sequence" &&
               get.array(pre, "pretokenizers", "pre_tokenizer").size() == 2) {
        const json& split = pre["pretokenizers"][0];
        const json& bl = pre["pretokenizers"][1];
        bool use_regex = true;
        if (type_of(bl, "pre_tokenizer.pretokenizers[1]") == "ByteLevel")
            byte_level(bl, "pre_tokenizer.pretokenizers[1]", use_regex);
        const std::string bloom_pattern = " ?[^(\\s|[.,!?…。，、।۔،])]+";
        const json* pattern = JsonFields::find(split, "pattern");
        const std::string where = "pre_tokenizer.pretokenizers[0]";
        if (type_of(split, where) != "Split" || type_of(bl, "pre_tokenizer.pretokenizers[1]") != "ByteLevel" || use_regex ||
            !pattern || get.string(*pattern, "Regex", where + ".pattern") != bloom_pattern ||
            get.string(split, "behavior", where) != "Isolated" || get.boolean(split, "invert", where, false))
            fail("pre_tokenizer " + short_dump(pre) + " is not supported (supported: ByteLevel, "
                 "and BLOOM's Sequence[Split(" + bloom_pattern + ", Isolated), ByteLevel(use_regex=false)])");
        t.pre_ = PreTokenizer::Bloom;
    } else {
        fail("pre_tokenizer " + short_dump(pre) +
             " is not supported (supported: ByteLevel, and BLOOM's Split + ByteLevel)");
    }
    if (const json* post = JsonFields::find(j, "post_processor"); post && type_of(*post, "post_processor") != "ByteLevel")
        fail("post_processor " + (post->is_object() ? get.string(*post, "type", "post_processor", "?") : std::string("?")) +
             " is not supported (only ByteLevel or none)");

    std::set<std::int32_t> ids;
    for (const auto& e : cfg.vocab) ids.insert(e.second);
    const json& added = get.array(j, "added_tokens", "tokenizer.json");
    for (std::size_t i = 0; i < added.size(); ++i) {
        const json& a = added[i];
        const std::string where = "added_tokens[" + std::to_string(i) + "]";
        if (!a.is_object()) fail(where + " is " + a.type_name() + ", expected an object");
        const std::string content = get.string(a, "content", where);
        if (get.boolean(a, "single_word", where, false) || get.boolean(a, "lstrip", where, false) ||
            get.boolean(a, "rstrip", where, false))
            fail("added token " + content + " uses single_word/lstrip/rstrip, which are not supported");
        AddedToken tok{content, get.id(a, "id", where), get.boolean(a, "special", where, false)};
        if (tok.content.empty()) fail("an added token has empty content");
        ids.insert(tok.id);
        t.added_.push_back(std::move(tok));
    }
    // Longest first, so that matching at one position prefers the longest token.
    std::stable_sort(t.added_.begin(), t.added_.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
    t.model_ = std::make_shared<BpeModel>(cfg);
    t.vocab_size_ = ids.size();
    for (const char* eod : {"<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>"}) {
        t.eod_id_ = t.token_id(eod);
        if (t.eod_id_ >= 0) break;
    }
    t.description_ = "tokenizer.json BPE (" + path + "; " + std::to_string(t.vocab_size_) + " tokens, " +
                     std::to_string(cfg.merges.size()) + " merges, pre-tokenizer " +
                     (t.pre_ == PreTokenizer::Gpt2 ? "GPT-2" : t.pre_ == PreTokenizer::Bloom ? "BLOOM" : "none") + ")";
    return t;
}

std::int32_t Tokenizer::token_id(std::string_view token) const {
    for (const auto& a : added_)
        if (a.content == token) return a.id;
    return model_->token_id(token);
}

void Tokenizer::set_eod_token(const std::string& token) {
    std::int32_t id = token_id(token);
    if (id < 0) throw Error("end-of-document token " + token + " is not in the vocabulary");
    eod_id_ = id;
}

void Tokenizer::encode(std::string_view text, std::vector<std::int32_t>& out) const {
    Encoder(*this, 0).encode(text, out);
}

std::string Tokenizer::decode(const std::vector<std::int32_t>& ids) const {
    // Inverse byte map: symbol text (1-2 UTF-8 bytes) -> byte.
    static const auto inverse = [] {
        std::vector<std::pair<std::string, unsigned char>> inv;
        const auto& bytes = byte_symbols();
        for (int b = 0; b < 256; ++b) inv.emplace_back(bytes[static_cast<std::size_t>(b)], static_cast<unsigned char>(b));
        std::sort(inv.begin(), inv.end());
        return inv;
    }();
    std::string out;
    for (std::int32_t id : ids) {
        auto added = std::find_if(added_.begin(), added_.end(), [&](const AddedToken& a) { return a.id == id; });
        if (added != added_.end()) {
            out += added->content;
            continue;
        }
        const std::string& tok = model_->token_string(id);
        if (tok.empty()) throw Error("cannot decode token id " + std::to_string(id) + ": not in the vocabulary");
        const char* p = tok.data();
        const char* end = p + tok.size();
        while (p < end) {
            std::size_t len = (static_cast<unsigned char>(*p) < 0x80) ? 1 : 2;
            std::string sym(p, std::min<std::size_t>(len, static_cast<std::size_t>(end - p)));
            auto it = std::lower_bound(inverse.begin(), inverse.end(), std::make_pair(sym, static_cast<unsigned char>(0)));
            if (it == inverse.end() || it->first != sym)
                throw Error("cannot decode token id " + std::to_string(id) + ": not a byte-level token");
            out += static_cast<char>(it->second);
            p += len;
        }
    }
    return out;
}

Encoder::Encoder(const Tokenizer& tokenizer, std::size_t max_cached_pieces)
    : tokenizer_(tokenizer), bpe_(tokenizer.model(), max_cached_pieces) {
    for (const auto& a : tokenizer.added_tokens()) added_first_byte_[static_cast<unsigned char>(a.content[0])] = true;
}

void Encoder::encode_segment(std::string_view segment, std::vector<std::int32_t>& out) {
    if (segment.empty()) return;
    if (tokenizer_.add_prefix_space() && segment.front() != ' ') {
        prefixed_.assign(1, ' ');
        prefixed_.append(segment);
        segment = prefixed_;
    }
    pieces_.clear();
    pretokenize(tokenizer_.pretokenizer(), segment, pieces_);
    for (std::string_view p : pieces_) bpe_.encode_piece(p, out);
}

void Encoder::encode(std::string_view text, std::vector<std::int32_t>& out) {
    const auto& added = tokenizer_.added_tokens();
    if (added.empty()) {
        encode_segment(text, out);
        return;
    }
    // Added tokens are cut out of the text first (leftmost, then longest); the rest is encoded
    // segment by segment, as Hugging Face tokenizers does.
    std::size_t start = 0, pos = 0;
    while (pos < text.size()) {
        if (!added_first_byte_[static_cast<unsigned char>(text[pos])]) {
            ++pos;
            continue;
        }
        const AddedToken* hit = nullptr;
        for (const auto& a : added)
            if (text.compare(pos, a.content.size(), a.content) == 0) {
                hit = &a;
                break;
            }
        if (!hit) {
            ++pos;
            continue;
        }
        encode_segment(text.substr(start, pos - start), out);
        out.push_back(hit->id);
        pos += hit->content.size();
        start = pos;
    }
    encode_segment(text.substr(start), out);
}

}  // namespace mds::tok
