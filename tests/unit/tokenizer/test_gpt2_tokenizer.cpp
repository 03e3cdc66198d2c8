// GPT-2 byte-level BPE (specs/data.md §3): known vectors with the OpenAI files, the pre-tokenizer
// on whitespace corner cases (expected pieces from Python's regex.findall), the heap BPE against the
// reference loop, the cached Encoder against Tokenizer::encode, decode(encode(s)) == s, and the
// quirks of merges.txt parsing with tiny hand-written files.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>  // writing tiny vocab.json files

#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "mds/tokenizer/bpe.h"
#include "mds/tokenizer/pretokenizer.h"
#include "mds/tokenizer/tokenizer.h"
#include "mds/util/error.h"
#include "test_support.h"

namespace {

using Ids = std::vector<std::int32_t>;
using mds::tok::Tokenizer;

const Tokenizer& gpt2() {
    static const Tokenizer t =
        Tokenizer::from_gpt2_files(mds::test::gpt2_dir() + "/encoder.json", mds::test::gpt2_dir() + "/vocab.bpe");
    return t;
}

Ids encode(const Tokenizer& t, std::string_view text) {
    Ids ids;
    t.encode(text, ids);
    return ids;
}

std::vector<std::string> pieces_of(std::string_view text) {
    std::vector<std::string_view> pieces;
    mds::tok::pretokenize(mds::tok::PreTokenizer::Gpt2, text, pieces);
    return {pieces.begin(), pieces.end()};
}

void append_utf8(std::string& s, char32_t cp) {
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        s += static_cast<char>(0xF0 | (cp >> 18));
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// Random valid UTF-8 with plenty of what the pre-tokenizer cares about: letters, digits, spaces,
// apostrophes and contractions, Unicode whitespace, marks, CJK, emoji, control characters.
std::string random_text(std::mt19937& rng, std::size_t max_cps) {
    static const char32_t specials[] = {' ', ' ', ' ', '\n', '\r', '\t', '\'', 's', 't', 'r', 'e', 'v', 'm', 'l', 'd',
                                        '.', ',', '!', '0', '7', 0x00, 0x1C, 0x7F, 0x85, 0xA0, 0xAD, 0x301, 0x200B,
                                        0x2003, 0x2028, 0x3000, 0xFEFF, 0x661, 0xB2, 0x2167, 0x4E2D, 0x1F44B, 0x1F30D,
                                        0x10FFFF, 0xE000, 0xFFFD};
    std::string s;
    std::size_t n = rng() % (max_cps + 1);
    for (std::size_t i = 0; i < n; ++i) {
        auto pick = [&](std::uint32_t lo, std::uint32_t count) { return static_cast<char32_t>(lo + rng() % count); };
        char32_t cp;
        switch (rng() % 6) {
            case 0: cp = specials[rng() % std::size(specials)]; break;
            case 1: cp = pick(0x20, 0x5F); break;             // printable ASCII
            case 2: cp = pick('a', 26); break;
            case 3: cp = pick(0x80, 0x780); break;            // 2-byte
            case 4: cp = pick(0x800, 0xD800 - 0x800); break;  // 3-byte below the surrogates
            default: cp = pick(0x10000, 0x100000); break;     // 4-byte
        }
        append_utf8(s, cp);
    }
    return s;
}

// A tiny GPT-2 pair of files: the 256 byte symbols (ids 0..255) plus `extra` tokens.
struct TinyFiles {
    std::filesystem::path dir;
    std::string vocab, merges;
};

TinyFiles tiny_files(const std::string& name, const std::vector<std::string>& extra, const std::string& merges_text) {
    TinyFiles f;
    f.dir = mds::test::scratch_dir("tok-" + name);
    nlohmann::json v = nlohmann::json::object();
    const auto& sym = mds::tok::byte_symbols();
    for (int b = 0; b < 256; ++b) v[sym[static_cast<std::size_t>(b)]] = b;
    int id = 256;
    for (const auto& t : extra) v[t] = id++;
    f.vocab = (f.dir / "vocab.json").string();
    f.merges = (f.dir / "merges.txt").string();
    std::ofstream(f.vocab, std::ios::binary) << v.dump();
    std::ofstream(f.merges, std::ios::binary) << merges_text;
    return f;
}

// Ids of "a", "b", ... in the tiny vocabulary.
std::int32_t byte_id(char c) { return static_cast<unsigned char>(c); }

}  // namespace

TEST_CASE("gpt2: the OpenAI files load as Megatron's GPT2BPETokenizer") {
    if (!mds::test::have_gpt2()) {
        MESSAGE("GPT-2 files not found under " << mds::test::gpt2_dir() << "; skipped");
        return;
    }
    const Tokenizer& t = gpt2();
    CHECK(t.vocab_size() == 50257);
    CHECK(t.eod_id() == 50256);
    CHECK(t.token_id("<|endoftext|>") == 50256);
    CHECK(t.token_id("!") == 0);
    CHECK(t.token_id("\xC4\xA0") == 220);  // 'Ġ' = byte 0x20
    CHECK(t.token_id("\xC4\x80") == 188);  // 'Ā' = byte 0x00
    CHECK(t.model().max_id() == 50256);
    CHECK(t.model().token_string(15496) == "Hello");
}

TEST_CASE("gpt2: known vectors (specs/data.md §1.8, §3.3, §3.5, §3.6)") {
    if (!mds::test::have_gpt2()) {
        MESSAGE("GPT-2 files not found; skipped");
        return;
    }
    const Tokenizer& t = gpt2();
    struct Case {
        std::string text;
        Ids ids;
    };
    const Case cases[] = {
        // §1.8 worked example
        {"Hello world", {15496, 995}},
        {"Megatron-LM!", {42672, 23484, 12, 31288, 0}},
        // §3.3 pre-tokenization examples
        {"Hello  world", {15496, 220, 995}},
        {"a\n\nb", {64, 198, 198, 65}},
        {"x   \n  y", {87, 220, 220, 220, 198, 220, 331}},
        {"trailing  ", {9535, 4386, 220, 220}},
        {"\r\n", {201, 198}},
        {"\xC2\xA0nbsp", {1849, 77, 24145}},
        {"1234567 3.14", {10163, 2231, 3134, 513, 13, 1415}},
        // §3.5: no special tokens in text
        {"<|endoftext|>", {27, 91, 437, 1659, 5239, 91, 29}},
        // §3.6 item 2 (gpt-3-encoder's Encoder.test.js)
        {"", {}},
        {" ", {220}},
        {"\t", {197}},
        {"This is some text", {1212, 318, 617, 2420}},
        {"indivisible", {521, 452, 12843}},
        {"hello \xF0\x9F\x91\x8B world \xF0\x9F\x8C\x8D", {31373, 50169, 233, 995, 12520, 234, 235}},
        {"toString constructor hasOwnProperty valueOf", {1462, 10100, 23772, 468, 23858, 21746, 1988, 5189}},
        {"Hello, World", {15496, 11, 2159}},
        // More, from a Python restatement of OpenAI's encoder.py with the same files.
        {"na\xC3\xAFve caf\xC3\xA9 \xE2\x80\x94 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD"
         "\xE3\x82\xB9\xE3\x83\x88",
         {2616, 38776, 40304, 851, 10545, 245, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302}},
        {"It's 2024: DON'T panic!!! \xE2\x80\x83\xE3\x80\x80 ok",
         {1026, 338, 48609, 25, 23917, 6, 51, 13619, 10185, 564, 225, 5099, 222, 12876}},
        {"e\xCC\x81\xE2\x80\x8B\xEF\xBB\xBFz", {68, 136, 223, 9525, 171, 119, 123, 89}},
        {std::string(32, 'a'), {24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794}},
        {"https://example.org/path?q=1&r=2#frag",
         {5450, 1378, 20688, 13, 2398, 14, 6978, 30, 80, 28, 16, 5, 81, 28, 17, 2, 8310, 363}},
        {std::string("\x00\x01\x7F", 3), {188, 189, 221}},
    };
    for (const auto& c : cases) {
        INFO("text: " << c.text);
        CHECK(encode(t, c.text) == c.ids);
        mds::tok::Encoder cached(t);
        Ids twice;
        cached.encode(c.text, twice);
        cached.encode(c.text, twice);  // the second time from the cache
        Ids expect = c.ids;
        expect.insert(expect.end(), c.ids.begin(), c.ids.end());
        CHECK(twice == expect);
        CHECK(t.decode(c.ids) == c.text);
    }
}

TEST_CASE("gpt2: pre-tokenizer pieces (expected from regex.findall)") {
    struct Case {
        const char* text;
        std::vector<std::string> pieces;
    };
    const Case cases[] = {
        {"Hello  world", {"Hello", " ", " world"}},
        {"a\n\nb", {"a", "\n", "\n", "b"}},
        {"x   \n  y", {"x", "   \n ", " y"}},
        {"trailing  ", {"trailing", "  "}},
        {"  leading", {" ", " leading"}},
        {"\t\tx", {"\t", "\t", "x"}},
        {" \xC2\xA0x", {" ", "\xC2\xA0", "x"}},              // NBSP is \s, but only U+0020 prefixes
        {"a\xE3\x80\x80" "b", {"a", "\xE3\x80\x80", "b"}},     // U+3000
        {"x\xC2\x85y", {"x", "\xC2\x85", "y"}},               // U+0085 is White_Space
        {"a\x1C" "b", {"a", "\x1C", "b"}},                    // U+001C is not (unlike str.isspace)
        {"it's DON'T we'll 'll", {"it", "'s", " DON", "'", "T", " we", "'ll", " '", "ll"}},
        {"'s'", {"'s", "'"}},
        {"  's", {" ", " '", "s"}},
        {"1234567 3.14", {"1234567", " 3", ".", "14"}},
        {"a  \n", {"a", "  \n"}},
        {"\r\n", {"\r\n"}},
        {"x \r\n y", {"x", " \r\n", " y"}},
        {"\xF0\x9F\x99\x82 \xF0\x9F\x99\x82", {"\xF0\x9F\x99\x82", " \xF0\x9F\x99\x82"}},
        {"e\xCC\x81" "e", {"e", "\xCC\x81", "e"}},              // combining mark: "other"
        {"a\xE2\x80\x8B" "b", {"a", "\xE2\x80\x8B", "b"}},      // U+200B: "other"
        {"...  ...", {"...", " ", " ..."}},
        {" ", {" "}},
        {"  ", {"  "}},
        {"\n", {"\n"}},
        {"a ", {"a", " "}},
        {" a", {" a"}},
        {"a\xE2\x80\x83 b", {"a", "\xE2\x80\x83", " b"}},
        {"a \xE2\x80\x83" "b", {"a", " ", "\xE2\x80\x83", "b"}},
        {"a\xC2\xA0 b", {"a", "\xC2\xA0", " b"}},
        {"  \xC2\xA0" "b", {"  ", "\xC2\xA0", "b"}},
        {"x \t y", {"x", " \t", " y"}},
        {"\xD9\xA1\xD9\xA2 \xC2\xB2", {"\xD9\xA1\xD9\xA2", " \xC2\xB2"}},  // Arabic-Indic digits, superscript 2
        {"'''s", {"'''", "s"}},
        {"?'s", {"?'", "s"}},
        {"ab'cd'ef", {"ab", "'", "cd", "'", "ef"}},
        {"'re'", {"'re", "'"}},
        {"'RE", {"'", "RE"}},
        {" 'll", {" '", "ll"}},
        {"\xE4\xB8\xAD\xE6\x96\x87 \xE6\x97\xA5\xE6\x9C\xAC", {"\xE4\xB8\xAD\xE6\x96\x87", " \xE6\x97\xA5\xE6\x9C\xAC"}},
        {"a\xE2\x80\xA8" "b", {"a", "\xE2\x80\xA8", "b"}},      // U+2028
        {"a \xE2\x80\xA9 b", {"a", " \xE2\x80\xA9", " b"}},     // U+2029
        {"", {}},
    };
    for (const auto& c : cases) {
        INFO("text: " << std::string(c.text));
        CHECK(pieces_of(c.text) == c.pieces);
    }
    // Pieces always cover the text, in order, without gaps.
    std::mt19937 rng(5);
    for (int i = 0; i < 3000; ++i) {
        std::string s = random_text(rng, 40);
        std::string joined;
        for (const auto& p : pieces_of(s)) {
            CHECK_FALSE(p.empty());
            joined += p;
        }
        CHECK(joined == s);
    }
}

TEST_CASE("gpt2: heap BPE equals the reference loop") {
    if (!mds::test::have_gpt2()) {
        MESSAGE("GPT-2 files not found; skipped");
        return;
    }
    const auto& model = gpt2().model();
    auto check_piece = [&](const std::string& piece) {
        Ids fast, ref;
        model.encode_piece(piece, fast);
        model.encode_piece_reference(piece, ref);
        if (fast != ref) {
            INFO("piece of " << piece.size() << " bytes: " << piece.substr(0, 80));
            CHECK(fast == ref);
            return false;
        }
        return true;
    };
    std::mt19937 rng(1234);
    // Random bytes (any byte value: pieces are raw bytes).
    int bad = 0;
    for (int i = 0; i < 20000 && bad < 5; ++i) {
        std::string s(1 + rng() % 24, '\0');
        for (auto& ch : s) ch = static_cast<char>(rng() % 256);
        bad += !check_piece(s);
    }
    // Words from small alphabets, where many merges compete and repeat.
    for (const char* alphabet : {"ab", "aeiou", "etaoinshrdlu", " e", "0123456789", "!.?-"}) {
        std::string a = alphabet;
        for (int i = 0; i < 2000 && bad < 5; ++i) {
            std::string s;
            std::size_t n = 1 + rng() % 64;
            for (std::size_t k = 0; k < n; ++k) s += a[rng() % a.size()];
            bad += !check_piece(s);
        }
    }
    // Random UTF-8 pieces.
    for (int i = 0; i < 5000 && bad < 5; ++i) {
        std::string s = random_text(rng, 12);
        if (!s.empty()) bad += !check_piece(s);
    }
    // Very long words.
    std::string letters;
    for (int i = 0; i < 5000; ++i) letters += static_cast<char>('a' + rng() % 26);
    check_piece(letters);
    check_piece(" " + letters);
    check_piece(std::string(5000, 'a'));
    check_piece(std::string(4999, 'a'));
    check_piece(std::string(3000, ' '));
    std::string ab;
    for (int i = 0; i < 2500; ++i) ab += "ab";
    check_piece(ab);
    std::string digits;
    for (int i = 0; i < 3000; ++i) digits += static_cast<char>('0' + rng() % 10);
    check_piece(digits);
    std::string emoji;
    for (int i = 0; i < 500; ++i) emoji += "\xF0\x9F\x98\x80";
    check_piece(emoji);
    // 'a' * n merges in halves: 32 a's are 8 'aaaa' tokens (24794).
    Ids ids;
    model.encode_piece(std::string(5000, 'a'), ids);
    CHECK(ids.size() < 5000 / 4 + 8);
}

TEST_CASE("gpt2: the cached Encoder equals Tokenizer::encode") {
    if (!mds::test::have_gpt2()) {
        MESSAGE("GPT-2 files not found; skipped");
        return;
    }
    const Tokenizer& t = gpt2();
    std::mt19937 rng(99);
    std::vector<std::string> words;
    for (int i = 0; i < 300; ++i) words.push_back(random_text(rng, 8));
    words.push_back(std::string(300, 'x'));  // longer than the cacheable 256 bytes
    words.push_back(" the");
    words.push_back("'s");
    for (std::size_t cache : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{64}, std::size_t{1} << 18}) {
        INFO("cache " << cache);
        mds::tok::Encoder enc(t, cache);
        int bad = 0;
        for (int doc = 0; doc < 400 && bad < 3; ++doc) {
            std::string text;
            std::size_t n = rng() % 60;
            for (std::size_t k = 0; k < n; ++k) {
                text += words[rng() % words.size()];
                if (rng() % 3) text += ' ';
            }
            Ids a = encode(t, text), b;
            enc.encode(text, b);
            if (a != b) {
                ++bad;
                CHECK(a == b);
            }
        }
    }
}

TEST_CASE("gpt2: decode(encode(s)) == s") {
    if (!mds::test::have_gpt2()) {
        MESSAGE("GPT-2 files not found; skipped");
        return;
    }
    const Tokenizer& t = gpt2();
    mds::tok::Encoder enc(t);
    std::mt19937 rng(2024);
    int bad = 0;
    for (int i = 0; i < 5000 && bad < 5; ++i) {
        std::string s = random_text(rng, 80);
        Ids ids;
        enc.encode(s, ids);
        for (auto id : ids) {
            CHECK(id >= 0);
            CHECK(id < 50257);
        }
        if (t.decode(ids) != s) {
            ++bad;
            INFO("text: " << s);
            CHECK(t.decode(ids) == s);
        }
    }
    CHECK_THROWS_AS((void)t.decode({50257}), mds::Error);
    CHECK_THROWS_AS((void)t.decode({-1}), mds::Error);
    CHECK(t.decode({50256}) == "<|endoftext|>");
}

TEST_CASE("gpt2 files: merges.txt is parsed as read().split('\\n')[1:-1]") {
    const std::vector<std::string> extra = {"ab", "bc", "abc"};
    const std::int32_t ab = 256, bc = 257, abc = 258;
    auto enc = [&](const std::string& name, const std::string& merges, const std::string& text) {
        TinyFiles f = tiny_files(name, extra, merges);
        Tokenizer t = Tokenizer::from_gpt2_files(f.vocab, f.merges);
        Ids ids = encode(t, text);
        std::filesystem::remove_all(f.dir);
        return ids;
    };
    // The normal case: both merges apply.
    CHECK(enc("normal", "#version: 0.2\na b\nab c\n", "abc") == Ids{abc});
    // No final newline: the last merge is silently lost.
    CHECK(enc("no-final-nl", "#version: 0.2\na b\nab c", "abc") == Ids{ab, byte_id('c')});
    // CRLF line ends: the '\r' disappears in the whitespace split.
    CHECK(enc("crlf", "#version: 0.2\r\na b\r\nab c\r\n", "abc") == Ids{abc});
    CHECK(enc("crlf-no-final", "#version: 0.2\r\na b\r\nab c", "abc") == Ids{ab, byte_id('c')});
    // Any whitespace separates the pair.
    CHECK(enc("tabs", "#version: 0.2\na\tb\n  ab   c  \n", "abc") == Ids{abc});
    // The first line is dropped whatever it holds.
    CHECK(enc("no-header", "a b\nb c\n", "abc") == Ids{byte_id('a'), bc});
    // Ranks: the earlier line wins ...
    CHECK(enc("rank", "#version: 0.2\nb c\na b\n", "abc") == Ids{byte_id('a'), bc});
    // ... but a pair listed twice keeps its last rank (dict(zip(merges, range(...)))).
    CHECK(enc("dup", "#version: 0.2\nb c\na b\nb c\n", "abc") == Ids{ab, byte_id('c')});
    // Malformed lines (blank, one field, three fields) take a rank and never match.
    CHECK(enc("malformed", "#version: 0.2\n\nb\na b c\nb c\na b\n", "abc") == Ids{byte_id('a'), bc});
    CHECK(enc("malformed2", "#version: 0.2\na b c\n", "abc") ==
          Ids{byte_id('a'), byte_id('b'), byte_id('c')});
    // A merge whose result is not in the vocabulary gives id 0 (Megatron's encoder.get(token, 0)).
    CHECK(enc("unknown", "#version: 0.2\nc d\n", "cd") == Ids{0});
    // Merges apply across the byte symbols of non-ASCII bytes too.
    {
        const auto& sym = mds::tok::byte_symbols();
        std::string e9 = sym[0xC3] + sym[0xA9];  // "é" as byte symbols
        TinyFiles f = tiny_files("bytes", {e9}, "#version: 0.2\n" + sym[0xC3] + " " + sym[0xA9] + "\n");
        Tokenizer t = Tokenizer::from_gpt2_files(f.vocab, f.merges);
        CHECK(encode(t, "\xC3\xA9") == Ids{256});
        CHECK(encode(t, " \xC3\xA9") == Ids{0x20, 256});
        CHECK(t.decode({256, 0x20}) == "\xC3\xA9 ");
        CHECK(t.vocab_size() == 257);
        CHECK(t.eod_id() == -1);  // no <|endoftext|> in this vocabulary
        std::filesystem::remove_all(f.dir);
    }
}

TEST_CASE("gpt2 files: errors name the file") {
    TinyFiles f = tiny_files("errors", {}, "#version: 0.2\na b\n");
    const std::string missing = (f.dir / "missing.json").string();
    auto message = [](const std::function<void()>& fn) -> std::string {
        try {
            fn();
        } catch (const mds::Error& e) {
            return e.what();
        }
        return "(no error)";
    };
    CHECK(message([&] { Tokenizer::from_gpt2_files(missing, f.merges); }).find(missing) != std::string::npos);
    CHECK(message([&] { Tokenizer::from_gpt2_files(f.vocab, missing); }).find(missing) != std::string::npos);
    const std::string broken = (f.dir / "broken.json").string();
    std::ofstream(broken) << "{\"a\": 1,";
    CHECK(message([&] { Tokenizer::from_gpt2_files(broken, f.merges); }).find(broken) != std::string::npos);
    std::ofstream(broken) << "[1, 2]";
    CHECK(message([&] { Tokenizer::from_gpt2_files(broken, f.merges); }).find(broken) != std::string::npos);
    std::ofstream(broken) << "{\"a\": -1}";
    CHECK(message([&] { Tokenizer::from_gpt2_files(broken, f.merges); }).find(broken) != std::string::npos);
    const std::string bad_merges = (f.dir / "bad-merges.txt").string();
    std::ofstream(bad_merges) << "#version\na \xFF\n";
    CHECK(message([&] { Tokenizer::from_gpt2_files(f.vocab, bad_merges); }).find(bad_merges) != std::string::npos);
    std::filesystem::remove_all(f.dir);
}

TEST_CASE("tokenizer files nested absurdly deep are refused before parsing") {
    const auto dir = mds::test::scratch_dir("tok-deep");
    const std::string path = (dir / "tokenizer.json").string();
    std::ofstream(path) << std::string(100000, '[');
    CHECK_THROWS_WITH_AS(mds::tok::Tokenizer::from_hf_json(path), doctest::Contains("JSON nested deeper than 64 levels"),
                         mds::Error);
    std::filesystem::remove_all(dir);
}
