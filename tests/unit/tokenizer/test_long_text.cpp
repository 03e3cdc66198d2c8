// Long texts in chunks (mds/tokenizer/long_text.h): cut points are spaces after ASCII letters and
// never inside an added token, and encoding chunk by chunk gives exactly the ids of one pass, for
// the GPT-2 and BLOOM pre-tokenizers, with added tokens (some containing spaces) and with a prefix
// space; PieceCounter counts a text over 1 MiB as it counts the same pieces one by one.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>  // editing a trained tokenizer.json

#include <map>
#include <random>
#include <string>
#include <vector>

#include "mds/tokenizer/bpe_trainer.h"
#include "mds/tokenizer/long_text.h"
#include "mds/tokenizer/pretokenizer.h"
#include "mds/tokenizer/tokenizer.h"
#include "mds/util/files.h"
#include "test_support.h"

namespace {

using mds::tok::PreTokenizer;
using mds::tok::Tokenizer;

// Random text with what moves piece boundaries: words, single and repeated spaces, newlines, tabs,
// digits, punctuation (BLOOM's excluded characters among them), apostrophes before contraction
// letters, non-ASCII letters and symbols, and the added tokens' texts.
std::string long_random_text(std::mt19937& rng, std::size_t size) {
    static const std::vector<std::string> atoms = {
        "the", "quick", "Brown", "fox", "x", "a", "b", " ", " ", " ", "  ", "   ", "\n", "\n\n", "\t", " \n",
        "42", "3.14", ".", ",", "!", "?", "(", ")", "|", "...", "'s", "'re", "'ll", "'", "don't",
        "é", "naïve", "東京", "。", "，", "…", "🙂", "-", "<s>", "a b", "x.", "<|endoftext|>"};
    std::string s;
    while (s.size() < size) s += atoms[rng() % atoms.size()];
    return s;
}

std::vector<std::int32_t> encode_whole(const Tokenizer& t, const std::string& text) {
    std::vector<std::int32_t> ids;
    t.encode(text, ids);
    return ids;
}

std::vector<std::int32_t> encode_chunked(const Tokenizer& t, const std::string& text, std::size_t chunk) {
    mds::tok::Encoder enc(t);
    std::vector<std::int32_t> ids;
    mds::tok::encode_long_text(enc, t, text, ids, chunk);
    return ids;
}

// A small byte-level BPE trained on random text, as a tokenizer.json with the given pre-tokenizer,
// prefix space and added tokens.
Tokenizer trained_tokenizer(const std::filesystem::path& dir, const std::string& name, bool bloom, bool prefix_space,
                            const std::vector<std::string>& added) {
    std::mt19937 rng(5);
    mds::tok::PieceCounter counts;
    for (int i = 0; i < 50; ++i) counts.add_text(long_random_text(rng, 2000));
    mds::tok::BpeTrainerConfig cfg;
    cfg.vocab_size = 600;
    const auto model = mds::tok::train_bpe(counts, cfg);
    auto j = nlohmann::json::parse(model.hf_tokenizer_json());
    nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", prefix_space}, {"trim_offsets", true},
                                 {"use_regex", !bloom}};
    if (bloom) {
        nlohmann::json split = {{"type", "Split"},
                                {"pattern", {{"Regex", " ?[^(\\s|[.,!?…。，、।۔،])]+"}}},
                                {"behavior", "Isolated"},
                                {"invert", false}};
        byte_level["use_regex"] = false;
        j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}};
    } else {
        j["pre_tokenizer"] = byte_level;
    }
    auto id = static_cast<std::int64_t>(model.tokens.size());
    for (const auto& a : added)
        j["added_tokens"].push_back({{"id", id++}, {"content", a}, {"single_word", false}, {"lstrip", false},
                                     {"rstrip", false}, {"normalized", false}, {"special", true}});
    const auto path = (dir / (name + ".json")).string();
    mds::write_file_atomic(path, j.dump());
    return Tokenizer::from_hf_json(path);
}

bool ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

}  // namespace

TEST_CASE("long text: cut points are spaces after ASCII letters, outside added tokens") {
    const std::string text = "ab cd, é f  x. a b<s>z q";
    const std::vector<mds::tok::AddedToken> added = {{"a b", 1, true}, {"x. ", 2, true}};
    std::vector<std::size_t> cuts, cuts_added;
    for (std::size_t p = mds::tok::next_cut(text, 0, PreTokenizer::Gpt2); p < text.size();
         p = mds::tok::next_cut(text, p + 1, PreTokenizer::Gpt2))
        cuts.push_back(p);
    for (std::size_t p = mds::tok::next_cut(text, 0, PreTokenizer::Bloom, &added); p < text.size();
         p = mds::tok::next_cut(text, p + 1, PreTokenizer::Bloom, &added))
        cuts_added.push_back(p);
    // "ab| cd, é f|  x. a| b<s>z| q": after "ab", "f", "a", "z".
    CHECK(cuts == std::vector<std::size_t>{2, 11, 17, 23});
    CHECK(cuts_added == std::vector<std::size_t>{2, 11, 23});  // "a b" is an added token
    CHECK(mds::tok::next_cut(text, 0, PreTokenizer::Whole) == text.size());
    CHECK(mds::tok::next_cut("", 0, PreTokenizer::Gpt2) == 0);
    CHECK(mds::tok::next_cut(" a", 0, PreTokenizer::Gpt2) == 2);
}

TEST_CASE("long text: chunked encoding gives the ids of one pass") {
    auto dir = mds::test::scratch_dir("long-text");
    struct Variant {
        const char* name;
        bool bloom, prefix_space;
        std::vector<std::string> added;
    };
    const std::vector<Variant> variants = {
        {"gpt2", false, false, {}},
        {"gpt2-prefix-added", false, true, {"<|endoftext|>", "a b", "x.", "<s>"}},
        {"bloom", true, false, {"<s>"}},
        {"bloom-prefix-added", true, true, {"</s>", "a b", " x", "<s>"}},
    };
    std::mt19937 rng(17);
    for (const auto& v : variants) {
        const Tokenizer t = trained_tokenizer(dir, v.name, v.bloom, v.prefix_space, v.added);
        for (int round = 0; round < 20; ++round) {
            const std::string text = long_random_text(rng, 1000 + rng() % 4000);
            const auto whole = encode_whole(t, text);
            for (std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{1000}}) {
                INFO(v.name << ", round " << round << ", chunk " << chunk);
                CHECK(encode_chunked(t, text, chunk) == whole);
            }
        }
    }
    if (mds::test::have_gpt2()) {
        const Tokenizer gpt2 = Tokenizer::from_gpt2_files(mds::test::gpt2_dir() + "/encoder.json",
                                                          mds::test::gpt2_dir() + "/vocab.bpe");
        for (int round = 0; round < 10; ++round) {
            const std::string text = long_random_text(rng, 3000);
            CHECK(encode_chunked(gpt2, text, 5) == encode_whole(gpt2, text));
        }
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("long text: every cut starts a piece of the whole text's pre-tokenization") {
    std::mt19937 rng(23);
    for (PreTokenizer kind : {PreTokenizer::Gpt2, PreTokenizer::Bloom}) {
        const std::string text = long_random_text(rng, 20000);
        std::vector<std::string_view> pieces;
        mds::tok::pretokenize(kind, text, pieces);
        std::map<std::size_t, bool> starts;
        for (auto p : pieces) starts[static_cast<std::size_t>(p.data() - text.data())] = true;
        std::size_t n = 0;
        for (std::size_t p = mds::tok::next_cut(text, 0, kind); p < text.size(); p = mds::tok::next_cut(text, p + 1, kind)) {
            CHECK(text[p] == ' ');
            CHECK(ascii_letter(text[p - 1]));
            CHECK(starts.count(p) == 1);
            ++n;
        }
        CHECK(n > 100);
    }
}

TEST_CASE("long text: PieceCounter counts a text over 1 MiB as its pieces one by one") {
    std::mt19937 rng(29);
    const std::string text = long_random_text(rng, (std::size_t{5} << 20) / 2);
    mds::tok::PieceCounter chunked, one_by_one;
    chunked.add_text(text);
    std::vector<std::string_view> pieces;
    mds::tok::pretokenize(PreTokenizer::Gpt2, text, pieces);
    for (auto p : pieces) one_by_one.add_piece(p);
    CHECK(chunked.total_pieces() == one_by_one.total_pieces());
    CHECK(chunked.sorted() == one_by_one.sorted());
}
