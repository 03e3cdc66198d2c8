// BPE training (mds/tokenizer/bpe_trainer.h): hand-computed merges on a tiny corpus, equality with
// a naive reference trainer on random corpora, the output formats, and that the files load back
// into Tokenizer and round-trip text.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "mds/tokenizer/bpe.h"  // byte_symbols
#include "mds/tokenizer/bpe_trainer.h"
#include "mds/tokenizer/tokenizer.h"
#include "mds/util/error.h"
#include "mds/util/files.h"
#include "test_support.h"

namespace {

using mds::tok::BpeTrainerConfig;
using mds::tok::PieceCounter;
using mds::tok::TrainedBpe;
using Merges = std::vector<std::pair<std::string, std::string>>;

// The textbook corpus (Hugging Face course, chapter 6): hug 10, pug 5, pun 12, bun 4, hugs 5.
PieceCounter hug_corpus() {
    PieceCounter c;
    c.add_piece("hug", 10);
    c.add_piece("pug", 5);
    c.add_piece("pun", 12);
    c.add_piece("bun", 4);
    c.add_piece("hugs", 5);
    return c;
}

BpeTrainerConfig config(std::size_t vocab_size, std::uint64_t min_frequency) {
    BpeTrainerConfig cfg;
    cfg.vocab_size = vocab_size;
    cfg.min_frequency = min_frequency;
    return cfg;
}

// The naive algorithm, recounting every pair at every step: the definition the trainer must meet.
Merges reference_merges(const PieceCounter& counts, std::size_t learned_target, std::uint64_t min_frequency) {
    const auto& bytes = mds::tok::byte_symbols();
    std::vector<std::pair<std::vector<std::string>, std::uint64_t>> words;
    for (const auto& [piece, n] : counts.sorted()) {
        std::vector<std::string> w;
        for (unsigned char ch : piece) w.push_back(bytes[ch]);
        words.emplace_back(std::move(w), n);
    }
    std::set<std::string> tokens(bytes.begin(), bytes.end());
    Merges merges;
    std::size_t learned = 0;
    while (learned < learned_target) {
        std::map<std::pair<std::string, std::string>, std::uint64_t> pairs;
        for (const auto& [w, n] : words)
            for (std::size_t k = 0; k + 1 < w.size(); ++k) pairs[{w[k], w[k + 1]}] += n;
        const std::pair<std::string, std::string>* best = nullptr;
        std::uint64_t best_n = 0;
        for (const auto& [p, n] : pairs)  // map order: ties keep the smallest (left, right)
            if (n > best_n) {
                best = &p;
                best_n = n;
            }
        if (!best || best_n < min_frequency) break;
        const auto [a, b] = *best;
        merges.emplace_back(a, b);
        if (tokens.insert(a + b).second) ++learned;
        for (auto& [w, n] : words) {
            std::vector<std::string> next;
            for (std::size_t i = 0; i < w.size();) {
                if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
                    next.push_back(a + b);
                    i += 2;
                } else {
                    next.push_back(w[i++]);
                }
            }
            w.swap(next);
        }
    }
    return merges;
}

std::string g(const std::string& s) {  // text in byte symbols: " ab" -> "Ġab"
    std::string out;
    for (unsigned char ch : s) out += mds::tok::byte_symbols()[ch];
    return out;
}

}  // namespace

TEST_CASE("bpe trainer: hand-computed merges on a tiny corpus") {
    // pairs: ug 20, pu 17, un 16, hu 15 -> "ug"; then un 16 -> "un"; h ug 15 -> "hug"; p un 12 -> "pun";
    // then hug s 5 and p ug 5 tie: "hug" < "p" -> "hugs" first; then "pug" (5), "bun" (4).
    TrainedBpe m = mds::tok::train_bpe(hug_corpus(), config(256 + 7 + 1, 1));
    const Merges want = {{"u", "g"}, {"u", "n"}, {"h", "ug"}, {"p", "un"}, {"hug", "s"}, {"p", "ug"}, {"b", "un"}};
    CHECK(m.merges == want);
    REQUIRE(m.tokens.size() == 264);
    CHECK(m.tokens[256] == "ug");
    CHECK(m.tokens[260] == "hugs");
    CHECK(m.tokens[262] == "bun");
    CHECK(m.tokens[263] == "<|endoftext|>");
    CHECK(m.special_begin == 263);
    CHECK(m.merges_reusing_token == 0);
    CHECK(m.last_merge_count == 4);

    SUBCASE("min_frequency stops before rarer pairs") {
        TrainedBpe m5 = mds::tok::train_bpe(hug_corpus(), config(1000, 5));
        CHECK(m5.merges.size() == 6);  // b un (4) is left out
        CHECK(m5.tokens.size() == 256 + 6 + 1);
        CHECK(m5.tokens.back() == "<|endoftext|>");
    }
    SUBCASE("vocab_size stops exactly") {
        TrainedBpe m3 = mds::tok::train_bpe(hug_corpus(), config(256 + 3 + 1, 1));
        CHECK(m3.merges == Merges(want.begin(), want.begin() + 3));
    }
}

TEST_CASE("bpe trainer: repeated symbols merge left to right, as the encoder does") {
    PieceCounter c;
    c.add_piece("aaa", 1);  // (a,a) x2 -> "aa a" -> (aa, a)
    c.add_piece("aaaa", 1); // (a,a) x3 -> "aa aa" -> (aa, aa)
    TrainedBpe m = mds::tok::train_bpe(c, config(1000, 1));
    const Merges want = {{"a", "a"}, {"aa", "a"}, {"aa", "aa"}};
    CHECK(m.merges == want);
    CHECK(m.merges == reference_merges(c, 1000, 1));
}

TEST_CASE("bpe trainer: pieces are the GPT-2 pre-tokenizer's, counted by content") {
    PieceCounter c;
    c.add_text("Hello world, hello world!");
    c.add_text("hello");
    CHECK(c.total_pieces() == 7);  // Hello, " world", ",", " hello", " world", "!", hello
    auto s = c.sorted();
    REQUIRE(s.size() == 6);
    CHECK(s[0] == std::make_pair(std::string(" hello"), std::uint64_t{1}));
    CHECK(s[1] == std::make_pair(std::string(" world"), std::uint64_t{2}));

    PieceCounter a, b;
    a.add_text("Hello world, hello");
    b.add_text(" world!");
    b.add_text("hello");
    a.merge_from(b);
    CHECK(a.sorted() == s);
    CHECK(a.total_pieces() == 7);
    CHECK(b.unique_pieces() == 0);
}

TEST_CASE("bpe trainer: equal to the naive reference on random corpora") {
    std::mt19937 rng(1234);
    std::size_t reused = 0;
    for (int round = 0; round < 40; ++round) {
        PieceCounter c;
        const std::string alphabet = round % 2 ? "ab" : "abcde";
        std::uniform_int_distribution<std::size_t> len(1, 9), pick(0, alphabet.size() - 1);
        std::uniform_int_distribution<std::uint64_t> freq(1, 6);
        for (int w = 0; w < 30; ++w) {
            std::string piece;
            for (std::size_t k = len(rng); k > 0; --k) piece += alphabet[pick(rng)];
            c.add_piece(piece, freq(rng));
        }
        const std::uint64_t min_frequency = round % 3 == 0 ? 1 : 2;
        TrainedBpe m = mds::tok::train_bpe(c, config(256 + 40 + 1, min_frequency));
        CAPTURE(round);
        REQUIRE(m.merges == reference_merges(c, 40, min_frequency));
        reused += m.merges_reusing_token;
        // Token strings are unique and the learned ones are exactly the merge results.
        std::set<std::string> uniq(m.tokens.begin(), m.tokens.end());
        CHECK(uniq.size() == m.tokens.size());
        CHECK(m.tokens.size() - 257 + m.merges_reusing_token == m.merges.size());
    }
    MESSAGE("merges that reused an existing token: " << reused);
}

TEST_CASE("bpe trainer: GPT-2 file formats") {
    TrainedBpe m = mds::tok::train_bpe(hug_corpus(), config(256 + 2 + 1, 1));
    CHECK(m.gpt2_merges_txt() == "#version: 0.2\nu g\nu n\n");
    const std::string v = m.gpt2_vocab_json();
    // ids 0..255 in the order of GPT-2's bs list, as in OpenAI's encoder.json.
    CHECK(v.rfind("{\"!\": 0, \"\\\"\": 1, \"#\": 2, ", 0) == 0);
    CHECK(v.find("\"\\u0120\": 220") != std::string::npos);  // byte 0x20 -> 'Ġ'
    CHECK(v.find("\"\\u0100\": 188") != std::string::npos);  // byte 0x00 -> 'Ā'
    CHECK(v.find("\"~\": 93, \"\\u00a1\": 94") != std::string::npos);
    CHECK(v.ends_with(", \"ug\": 256, \"un\": 257, \"<|endoftext|>\": 258}"));
}

TEST_CASE("bpe trainer: special tokens and sizes are checked") {
    CHECK_THROWS_AS(mds::tok::train_bpe(hug_corpus(), config(256, 1)), mds::Error);  // no room for <|endoftext|>
    BpeTrainerConfig twice = config(300, 1);
    twice.special_tokens = {"<s>", "<s>"};
    CHECK_THROWS_AS(mds::tok::train_bpe(hug_corpus(), twice), mds::Error);
    BpeTrainerConfig byte = config(300, 1);
    byte.special_tokens = {"a"};
    CHECK_THROWS_AS(mds::tok::train_bpe(hug_corpus(), byte), mds::Error);
    BpeTrainerConfig shadow = config(300, 1);  // "ug" (20) would be learned first: never merged instead
    shadow.special_tokens = {"ug", "<|endoftext|>"};
    TrainedBpe m = mds::tok::train_bpe(hug_corpus(), shadow);
    CHECK(m.merges.front() == std::make_pair(std::string("p"), std::string("u")));  // 17
    CHECK(std::count(m.tokens.begin(), m.tokens.end(), "ug") == 1);
    CHECK(m.tokens[m.special_begin] == "ug");
}

TEST_CASE("bpe trainer: trained files load, encode as trained, and round-trip text") {
    const std::vector<std::string> texts = {
        "The quick brown fox jumps over the lazy dog. The dog sleeps.",
        "def encode(self, text):\n    \"\"\"Return the ids of text.\"\"\"\n    return self._encode(text)\n",
        "Ünïcödé text — with dashes, naïve café, 東京, emoji 🙂 and tabs\tand\r\nnewlines.",
        "It's 3.14 or 42; don't you think? They'll see.   Spaces   everywhere  ",
    };
    PieceCounter c;
    for (int rep = 0; rep < 3; ++rep)
        for (const auto& t : texts) c.add_text(t);
    TrainedBpe m = mds::tok::train_bpe(c, config(400, 2));
    CHECK(m.tokens.size() <= 400);

    auto dir = mds::test::scratch_dir("bpe-trainer");
    const std::string vocab = (dir / "vocab.json").string(), merges = (dir / "merges.txt").string(),
                      hf = (dir / "tokenizer.json").string();
    mds::write_file_atomic(vocab, m.gpt2_vocab_json());
    mds::write_file_atomic(merges, m.gpt2_merges_txt());
    mds::write_file_atomic(hf, m.hf_tokenizer_json());
    auto tok = mds::tok::Tokenizer::from_gpt2_files(vocab, merges);
    auto tok_hf = mds::tok::Tokenizer::from_hf_json(hf);
    CHECK(tok.vocab_size() == m.tokens.size());
    CHECK(tok.eod_id() == static_cast<std::int32_t>(m.special_begin));
    CHECK(tok_hf.eod_id() == tok.eod_id());
    CHECK(tok_hf.vocab_size() == tok.vocab_size());

    for (const auto& t : texts) {
        std::vector<std::int32_t> ids, ids_hf;
        tok.encode(t, ids);
        tok_hf.encode(t, ids_hf);
        CHECK(ids == ids_hf);
        CHECK(tok.decode(ids) == t);
        CHECK(ids.size() < t.size());  // something was learned
    }
    // A frequent word of the corpus is one token.
    std::vector<std::int32_t> the;
    tok.encode(" dog", the);
    REQUIRE(the.size() == 1);
    CHECK(tok.model().token_string(the[0]) == g(" dog"));
    std::filesystem::remove_all(dir);
}

TEST_CASE("bpe trainer: deterministic whatever the order of counting") {
    std::vector<std::string> texts;
    std::mt19937 rng(7);
    const char* words[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"};
    std::uniform_int_distribution<int> w(0, 9), n(3, 12);
    for (int i = 0; i < 200; ++i) {
        std::string t;
        for (int k = n(rng); k > 0; --k) t += std::string(words[w(rng)]) + (k % 4 ? " " : ", ");
        texts.push_back(t);
    }
    PieceCounter one, part1, part2;
    for (const auto& t : texts) one.add_text(t);
    for (std::size_t i = 0; i < texts.size(); ++i) (i % 3 ? part1 : part2).add_text(texts[texts.size() - 1 - i]);
    part2.merge_from(part1);
    TrainedBpe a = mds::tok::train_bpe(one, config(320, 2));
    TrainedBpe b = mds::tok::train_bpe(part2, config(320, 2));
    CHECK(a.gpt2_vocab_json() == b.gpt2_vocab_json());
    CHECK(a.gpt2_merges_txt() == b.gpt2_merges_txt());
    CHECK(a.hf_tokenizer_json() == b.hf_tokenizer_json());
}

TEST_CASE("bpe trainer: --vocab-size is bounded, with messages naming the flag") {
    BpeTrainerConfig huge = config(std::size_t{1} << 30, 2);
    try {
        mds::tok::check_bpe_trainer_config(huge);
        FAIL("no error for --vocab-size 2^30");
    } catch (const mds::Error& e) {
        CHECK(std::string(e.what()).find("--vocab-size 1073741824 is too large: at most 2097152") != std::string::npos);
    }
    CHECK_THROWS_AS(mds::tok::train_bpe(hug_corpus(), huge), mds::Error);  // never an allocation of 2^30 tokens
    CHECK_NOTHROW(mds::tok::check_bpe_trainer_config(config(mds::tok::kMaxBpeVocabSize, 2)));
    // The largest size trains as far as the pairs go, without reserving for it.
    TrainedBpe m = mds::tok::train_bpe(hug_corpus(), config(mds::tok::kMaxBpeVocabSize, 1));
    CHECK(m.tokens.size() < 300);
    try {
        mds::tok::check_bpe_trainer_config(config(100, 2));
        FAIL("no error for --vocab-size 100");
    } catch (const mds::Error& e) {
        CHECK(std::string(e.what()).find("--vocab-size 100 is too small") != std::string::npos);
    }
    CHECK_THROWS_WITH_AS(mds::tok::check_bpe_trainer_config(config(300, 0)), "--min-frequency must be at least 1",
                         mds::Error);
}
