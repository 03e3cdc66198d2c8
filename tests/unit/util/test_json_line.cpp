// JsonLineParser against the acceptance rules of Python's json.loads (specs/data.md §2.2): what is
// accepted, what the extracted fields decode to, and where each error points (byte offsets).
#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include "mds/util/error.h"
#include "mds/util/json_limits.h"
#include "mds/util/json_line.h"
#include "test_support.h"

namespace {

using mds::JsonError;
using mds::JsonLineParser;

// Parses `line` for `keys`; fails the test if it throws.
std::vector<std::string> parse_ok(std::string_view line, std::vector<std::string> keys = {"text"}) {
    JsonLineParser parser(std::move(keys));
    std::vector<std::string> values;
    try {
        parser.parse(line, values);
    } catch (const JsonError& e) {
        FAIL_CHECK("unexpected JsonError for " << std::string(line) << ": " << std::string(e.what()));
    }
    return values;
}

std::string text_of(std::string_view line) {
    auto v = parse_ok(line);
    return v.empty() ? std::string() : v[0];
}

struct Failure {
    bool thrown = false;
    std::size_t offset = 0;
    std::string reason;
};

Failure parse_err(std::string_view line, std::vector<std::string> keys = {"text"}) {
    JsonLineParser parser(std::move(keys));
    std::vector<std::string> values;
    Failure f;
    try {
        parser.parse(line, values);
    } catch (const JsonError& e) {
        f.thrown = true;
        f.offset = e.offset();
        f.reason = e.reason();
        // The message carries the offset too.
        CHECK(std::string(e.what()).find("(at byte " + std::to_string(e.offset()) + ")") != std::string::npos);
    }
    return f;
}

// The line must be rejected, with the error at byte `offset`.
void check_err_at(std::string_view line, std::size_t offset, std::string_view reason_part = {},
                  std::vector<std::string> keys = {"text"}) {
    INFO("line: " << std::string(line));
    Failure f = parse_err(line, std::move(keys));
    REQUIRE(f.thrown);
    CHECK(f.offset == offset);
    if (!reason_part.empty()) {
        INFO("reason: " << f.reason);
        CHECK(f.reason.find(reason_part) != std::string::npos);
    }
}

void check_rejected(std::string_view line, std::vector<std::string> keys = {"text"}) {
    INFO("line: " << std::string(line));
    CHECK(parse_err(line, std::move(keys)).thrown);
}

// Offset of the n-th (0-based) occurrence of `needle` in `hay`.
std::size_t at(std::string_view hay, std::string_view needle, int nth = 0) {
    std::size_t p = hay.find(needle);
    while (nth-- > 0 && p != std::string_view::npos) p = hay.find(needle, p + 1);
    REQUIRE(p != std::string_view::npos);
    return p;
}

std::string with_text(std::string_view raw_value) { return "{\"text\": \"" + std::string(raw_value) + "\"}"; }

}  // namespace

TEST_CASE("json_line: plain objects and whitespace around the tokens") {
    CHECK(text_of(R"({"text": "hello"})") == "hello");
    CHECK(text_of(R"({"text":"hello"})") == "hello");
    CHECK(text_of("  \t{ \"text\"\t:\r\n\"a b\"  }\t \r\n") == "a b");
    CHECK(text_of(R"({"text": ""})").empty());
    CHECK(text_of(R"({"id": 12, "text": "x", "meta": null})") == "x");
    // Several keys come back in the order asked for, whatever the order in the line.
    auto v = parse_ok(R"({"b": "2", "text": "t", "a": "1"})", {"a", "b", "text"});
    REQUIRE(v.size() == 3);
    CHECK(v[0] == "1");
    CHECK(v[1] == "2");
    CHECK(v[2] == "t");
    // Keys are compared after decoding their escapes.
    CHECK(text_of(R"({"t\u0065xt": "esc"})") == "esc");
    // Raw UTF-8 passes through unchanged.
    CHECK(text_of("{\"text\": \"h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80\"}") == "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80");
    // DEL (0x7F) is not a control character for json.loads.
    CHECK(text_of("{\"text\": \"a\x7F" "b\"}") == "a\x7F" "b");
}

TEST_CASE("json_line: only JSON whitespace (space, tab, LF, CR) is skipped") {
    check_err_at("\f{\"text\": \"x\"}", 0);
    check_err_at("{\"text\": \"x\"}\v", 13, "extra data");
    check_err_at("{\v\"text\": \"x\"}", 1);
    check_err_at("{\"text\":\xC2\xA0\"x\"}", 8);  // NBSP
}

TEST_CASE("json_line: every escape") {
    CHECK(text_of(with_text(R"(a\/b)")) == "a/b");  // pandas' to_json writes \/ (specs/data.md §6)
    CHECK(text_of(with_text(R"(http:\/\/x.org\/)")) == "http://x.org/");
    CHECK(text_of(with_text(R"(\"\\\/\b\f\n\r\t)")) == "\"\\/\b\f\n\r\t");
    CHECK(text_of(with_text(R"(\u0041\u00e9\u00E9\u20ac\uFFFF)")) ==
          "A\xC3\xA9\xC3\xA9\xE2\x82\xAC\xEF\xBF\xBF");
    CHECK(text_of(with_text(R"(\u007f\u0080\u07FF\u0800)")) == "\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80");
    std::string nul = text_of(with_text(R"(a\u0000b)"));
    CHECK(nul == std::string("a\0b", 3));
    // Escaped control characters are fine; raw ones are not (below).
    CHECK(text_of(with_text(R"(\u0009\u000a\u001f)")) == "\t\n\x1F");
}

TEST_CASE("json_line: surrogate pairs combine into one UTF-8 code point") {
    CHECK(text_of(with_text(R"(\ud83d\ude00)")) == "\xF0\x9F\x98\x80");        // U+1F600
    CHECK(text_of(with_text(R"(\uD83D\uDE00\uD83D\uDE00)")) == "\xF0\x9F\x98\x80\xF0\x9F\x98\x80");
    CHECK(text_of(with_text(R"(\uD800\uDC00)")) == "\xF0\x90\x80\x80");        // U+10000
    CHECK(text_of(with_text(R"(\uDBFF\uDFFF)")) == "\xF4\x8F\xBF\xBF");        // U+10FFFF
    CHECK(text_of(with_text(R"(x\ud83c\udf0dy)")) == "x\xF0\x9F\x8C\x8Dy");   // U+1F30D
}

TEST_CASE("json_line: a lone surrogate is an error in an extracted field only") {
    // Python accepts it and crashes later when the text is encoded to UTF-8; mds reports it at the
    // backslash of the escape.
    for (const char* raw : {R"(\ud800)", R"(\udbff)", R"(\udc00)", R"(\udfff)", R"(ab\ud83dcd)",
                            R"(\ud83d\u0041)", R"(\ude00\ud83d)", R"(\ud83d\ud83d\ude00)", R"(\ud83d\\ude00)"}) {
        std::string line = with_text(raw);
        check_err_at(line, at(line, "\\u"), "surrogate");
    }
    // The offset is that of the lone one, not of an earlier valid pair.
    {
        std::string line = with_text(R"(\ud83d\ude00 \ud800)");
        check_err_at(line, at(line, "\\u", 2), "surrogate");
    }
    // A high surrogate followed by a valid pair: the first is lone.
    {
        std::string line = with_text(R"(\ud83d\ud83d\ude00)");
        check_err_at(line, at(line, "\\u", 0), "surrogate");
    }
    // Other fields, keys and nested values may hold them, as in Python.
    CHECK(text_of(R"({"id": "\ud800", "text": "ok"})") == "ok");
    CHECK(text_of(R"({"\udc00": 1, "text": "ok"})") == "ok");
    CHECK(text_of(R"({"meta": {"text": "\udfff"}, "text": "ok", "l": ["\ud800x"]})") == "ok");
    CHECK(parse_ok(R"({"a": "\ud800", "text": "x"})", {"text"}).at(0) == "x");
    // ... but they are errors as soon as that field is extracted too.
    check_err_at(R"({"a": "\ud800", "text": "x"})", 7, "surrogate", {"text", "a"});
}

TEST_CASE("json_line: raw control characters in strings are rejected (strict=True)") {
    for (int c = 0; c < 0x20; ++c) {
        std::string line = "{\"text\": \"ab";
        line += static_cast<char>(c);
        line += "cd\"}";
        check_err_at(line, 12, "control character");
    }
    // In a key, in a skipped field, in a nested string: still an error.
    check_err_at(std::string("{\"a\x01\": \"a\", \"text\": \"b\"}"), 3, "control character");
    check_err_at(std::string("{\"other\": \"x\ty\", \"text\": \"b\"}"), 12, "control character");
    check_err_at(std::string("{\"l\": [\"\n\"], \"text\": \"b\"}"), 8, "control character");
}

TEST_CASE("json_line: invalid escapes point at the backslash") {
    for (const char* raw : {R"(a\x)", R"(a\U0041)", R"(a\a)", R"(a\0)", R"(a\')", R"(a\ )", R"(a\u12)",
                            R"(a\u12G4)", R"(a\u-123)", R"(a\u 123)"}) {
        std::string line = with_text(raw);
        check_err_at(line, 11);
    }
    // A backslash at the very end of the line: the string is unterminated.
    check_err_at(R"({"text": "a\)", 9, "unterminated string");
    check_err_at(R"({"text": "a\u12)", 11);
    // The escape after a high surrogate is checked too: an invalid one is an error at its backslash
    // (Python: "Invalid \uXXXX escape"), even in a field that is not extracted.
    {
        std::string line = with_text(R"(\ud83d\uzzzz)");
        check_err_at(line, at(line, "\\u", 1), "escape");
    }
    {
        std::string line = R"({"a": "\ud83d\u12x4", "text": "b"})";
        check_err_at(line, at(line, "\\u", 1), "escape");
    }
}

TEST_CASE("json_line: NaN, Infinity and -Infinity in other fields") {
    CHECK(text_of(R"({"a": NaN, "b": Infinity, "c": -Infinity, "text": "x"})") == "x");
    CHECK(text_of(R"({"a": [NaN, -Infinity, {"z": Infinity}], "text": "x"})") == "x");
    check_rejected(R"({"a": nan, "text": "x"})");
    check_rejected(R"({"a": inf, "text": "x"})");
    check_err_at(R"({"a": -NaN, "text": "x"})", 6);
    check_err_at(R"({"a": +Infinity, "text": "x"})", 6);
    check_err_at(R"({"a": Infinity1, "text": "x"})", 14);
    check_err_at(R"({"a": NaNa, "text": "x"})", 9);
    // In the extracted field they are a non-string value.
    check_err_at(R"({"text": NaN})", 9, "number");
    check_err_at(R"({"text": -Infinity})", 9, "number");
}

TEST_CASE("json_line: number grammar") {
    for (const char* num : {"0", "-0", "1", "-1", "10", "1.5", "-0.25", "1e5", "1E5", "1e+5", "1e-5", "1E+05", "-0.0e-0",
                            "123456789012345678901234567890", "1.0000000000000000000001", "1e400", "-1e-400"}) {
        std::string line = std::string("{\"a\": ") + num + ", \"text\": \"x\"}";
        INFO(line);
        CHECK(text_of(line) == "x");
    }
    // Python's number regex stops early; what follows is then not a delimiter (offsets as Python's).
    check_err_at(R"({"a": 01, "text": "x"})", 7);
    check_err_at(R"({"a": -01, "text": "x"})", 8);
    check_err_at(R"({"a": 00, "text": "x"})", 7);
    check_err_at(R"({"a": 1., "text": "x"})", 7);
    check_err_at(R"({"a": 1.e5, "text": "x"})", 7);
    check_err_at(R"({"a": 1e, "text": "x"})", 7);
    check_err_at(R"({"a": 1e+, "text": "x"})", 7);
    check_err_at(R"({"a": 1E-, "text": "x"})", 7);
    check_err_at(R"({"a": 0x10, "text": "x"})", 7);
    check_err_at(R"({"a": 1.5.2, "text": "x"})", 9);
    // Not a value at all.
    check_err_at(R"({"a": .5, "text": "x"})", 6, "value");
    check_err_at(R"({"a": -, "text": "x"})", 6, "value");
    check_err_at(R"({"a": --1, "text": "x"})", 6, "value");
    check_err_at(R"({"a": +1, "text": "x"})", 6, "value");
    check_err_at(R"({"a": -.5, "text": "x"})", 6, "value");
    // At the end of a top-level array or as the last value of the object.
    CHECK(text_of(R"({"text": "x", "a": [0, -1.5e3]})") == "x");
    CHECK(text_of(R"({"text": "x", "a": 1})") == "x");
    CHECK(text_of(R"({"text": "x", "a": 1e9})") == "x");
}

TEST_CASE("json_line: literals") {
    CHECK(text_of(R"({"a": true, "b": false, "c": null, "text": "x"})") == "x");
    check_err_at(R"({"a": tru, "text": "x"})", 6);
    check_err_at(R"({"a": True, "text": "x"})", 6);
    check_err_at(R"({"a": nul})", 6);
    check_err_at(R"({"a": undefined, "text": "x"})", 6);
    check_err_at(R"({"a": 'x', "text": "x"})", 6);
}

TEST_CASE("json_line: nested values are validated and skipped") {
    CHECK(text_of(R"({"a": {"b": [1, {"c": "text", "text": 5}], "d": [], "e": {}}, "text": "ok", "f": [[[]]]})") == "ok");
    CHECK(text_of(R"({"a": [ ], "b": { }, "text": "ok"})") == "ok");
    CHECK(text_of(R"({"a": [ "x" , { "y" : [ null ] } ] , "text" : "ok" })") == "ok");
    // Errors inside skipped values are still errors, at their own offset (as Python's).
    check_err_at(R"({"a": [1,], "text": "x"})", 9, "value");
    check_err_at(R"({"a": [,1], "text": "x"})", 7, "value");
    check_err_at(R"({"a": [1 2], "text": "x"})", 9);
    check_err_at(R"({"a": {"b":1,}, "text": "x"})", 13, "property name");
    check_err_at(R"({"a": {"b" 1}, "text": "x"})", 11, "':'");
    check_err_at(R"({"a": {1: 2}, "text": "x"})", 7, "property name");
    check_err_at(R"({"a": [1, 2, "text": "x"})", 19);
    check_err_at(R"({"a": [1, 2)", 11, "unterminated array");
}

TEST_CASE("json_line: duplicate keys, the last one wins") {
    CHECK(text_of(R"({"text": "a", "text": "b"})") == "b");
    CHECK(text_of(R"({"text": "a", "x": 1, "text": "b", "y": 2})") == "b");
    // An earlier occurrence that is not a usable string does not matter (Python keeps the last).
    CHECK(text_of(R"({"text": 1, "text": "b"})") == "b");
    CHECK(text_of(R"({"text": null, "text": "b"})") == "b");
    CHECK(text_of(R"({"text": {"x": 1}, "text": "b"})") == "b");
    CHECK(text_of(R"({"text": "\ud800", "text": "b"})") == "b");
    // A last occurrence that is not a string, or holds a lone surrogate, is an error at that value.
    {
        std::string line = R"({"text": "b", "text": 1})";
        check_err_at(line, 22, "number");
    }
    {
        std::string line = R"({"text": "b", "text": "\ud800"})";
        check_err_at(line, at(line, "\\u"), "surrogate");
    }
    // A syntax error after the field comes first, as json.loads fails before the lookup.
    check_err_at(R"({"text": 1, "x": tru})", 17, "value");
}

TEST_CASE("json_line: missing key and non-string values") {
    check_err_at(R"({"other": "x"})", 0, "'text' not found");
    check_err_at(R"({})", 0, "'text' not found");
    check_err_at(R"({"meta": {"text": "nested does not count"}})", 0, "'text' not found");
    check_err_at(R"({"text": "x"})", 0, "'id' not found", {"text", "id"});
    check_err_at(R"({"Text": "x"})", 0, "not found");
    check_err_at(R"({"text": null})", 9, "null");
    check_err_at(R"({"text": true})", 9, "boolean");
    check_err_at(R"({"text": false})", 9, "boolean");
    check_err_at(R"({"text": 12})", 9, "number");
    check_err_at(R"({"text": -1.5})", 9, "number");
    check_err_at(R"({"text": ["a"]})", 9, "array");
    check_err_at(R"({"text": {"a": "b"}})", 9, "object");
    check_err_at(R"({"text":    12})", 12, "number");
}

TEST_CASE("json_line: not an object, empty line, extra data, truncation") {
    check_err_at("", 0, "empty");
    check_err_at("   ", 3, "empty");
    check_err_at(R"(["text", "a"])", 0, "array");
    check_err_at(R"("text")", 0, "string");
    check_err_at("  12", 2, "scalar");
    check_err_at("null", 0);
    check_err_at(R"(["a")", 4);  // invalid JSON wins over "not an object"
    check_err_at(R"({"text": "a"} x)", 14, "extra data");
    check_err_at(R"({"text": "a"}{})", 13, "extra data");
    check_err_at(R"({"text": "a"},)", 13, "extra data");
    check_err_at(R"({"text": "a"}})", 13, "extra data");
    check_err_at(R"({"text": "a"}  ]  )", 15, "extra data");
    check_err_at(R"({"text": "a",})", 13, "property name");
    check_err_at(R"({,})", 1, "property name");
    check_err_at(R"({'text': 'a'})", 1, "property name");
    check_err_at(R"({text: "a"})", 1, "property name");
    check_err_at(R"({"text" "a"})", 8, "':'");
    check_err_at(R"({"text": "a" "b": "c"})", 13, "','");
    // Truncated lines.
    check_err_at(R"({)", 1);
    check_err_at(R"({"text")", 7, "':'");
    check_err_at(R"({"text": )", 9, "end of the line");
    check_err_at(R"({"text": "a")", 12, "unterminated object");
    check_err_at(R"({"text": "a", )", 14, "property name");
    // An unterminated string is reported at its opening quote (as Python does).
    check_err_at(R"({"text": "abc)", 9, "unterminated string");
    check_err_at(R"({"text": "abc\")", 9, "unterminated string");
    check_err_at(R"({"te)", 1, "unterminated string");
}

TEST_CASE("json_line: invalid UTF-8 is an error at the offending byte, in any string") {
    struct Case {
        const char* bytes;
        const char* what;
    };
    const Case bad[] = {
        {"\x80", "lone continuation byte"},
        {"\xBF", "lone continuation byte"},
        {"\xC0\xAF", "overlong 2-byte (C0)"},
        {"\xC1\xBF", "overlong 2-byte (C1)"},
        {"\xE0\x80\xAF", "overlong 3-byte"},
        {"\xE0\x9F\xBF", "overlong 3-byte (max)"},
        {"\xF0\x80\x80\xAF", "overlong 4-byte"},
        {"\xF0\x8F\xBF\xBF", "overlong 4-byte (max)"},
        {"\xED\xA0\x80", "encoded surrogate U+D800"},
        {"\xED\xBF\xBF", "encoded surrogate U+DFFF"},
        {"\xED\xA0\xBD\xED\xB8\x80", "CESU-8 pair"},
        {"\xF4\x90\x80\x80", "U+110000"},
        {"\xF5\x80\x80\x80", "lead byte F5"},
        {"\xF7\xBF\xBF\xBF", "lead byte F7"},
        {"\xF8\x88\x80\x80\x80", "5-byte form"},
        {"\xFC\x84\x80\x80\x80\x80", "6-byte form"},
        {"\xFE", "byte FE"},
        {"\xFF", "byte FF"},
        {"\xC3", "truncated 2-byte"},
        {"\xE2\x82", "truncated 3-byte"},
        {"\xF0\x9F\x98", "truncated 4-byte"},
        {"\xC3\x28", "bad continuation"},
        {"\xE2\x28\xA1", "bad second byte"},
        {"\xE2\x82\x28", "bad third byte"},
        {"\xF0\x9F\x28\x80", "bad third of 4"},
        {"\xF0\x9F\x98\x28", "bad fourth of 4"},
    };
    for (const auto& c : bad) {
        INFO(c.what);
        // In the extracted text, after some ASCII (past the 8-byte fast path) ...
        std::string prefix = "abcdefghijklmnop";
        std::string line = "{\"text\": \"" + prefix + c.bytes + "z\"}";
        check_err_at(line, 10 + prefix.size(), "UTF-8");
        // ... at the start of a string, right before the closing quote, in a key, in a skipped value.
        line = "{\"text\": \"" + std::string(c.bytes) + "\"}";
        check_err_at(line, 10, "UTF-8");
        line = "{\"k" + std::string(c.bytes) + "\": 1, \"text\": \"x\"}";
        check_err_at(line, 3, "UTF-8");
        line = "{\"a\": [\"" + std::string(c.bytes) + "\"], \"text\": \"x\"}";
        check_err_at(line, 8, "UTF-8");
    }
    // Boundaries that are valid.
    for (const char* ok : {"\xC2\x80", "\xDF\xBF", "\xE0\xA0\x80", "\xED\x9F\xBF", "\xEE\x80\x80", "\xEF\xBF\xBF",
                           "\xF0\x90\x80\x80", "\xF4\x8F\xBF\xBF", "\xEF\xBB\xBF"}) {
        std::string line = "{\"text\": \"" + std::string(ok) + "\"}";
        CHECK(text_of(line) == ok);
    }
    // Outside strings any non-ASCII byte is a syntax error anyway (a UTF-8 BOM too, as Python).
    check_err_at("\xEF\xBB\xBF{\"text\": \"x\"}", 0);
    check_err_at("{\"text\": \"x\"}\xC3\xA9", 13, "extra data");
}

TEST_CASE("json_line: utf8_valid_prefix") {
    using mds::utf8_valid_prefix;
    CHECK(utf8_valid_prefix("") == 0);
    const std::string ascii = "plain ascii text that is long enough for the fast path";
    CHECK(utf8_valid_prefix(ascii) == ascii.size());
    CHECK(utf8_valid_prefix("0123456789abcdef\x80") == 16);
    CHECK(utf8_valid_prefix("01234567\xC3\xA9" "89abcdef\xED\xA0\x80xyz") == 18);
    CHECK(utf8_valid_prefix("\xF4\x8F\xBF\xBF\xF4\x90\x80\x80") == 4);
    CHECK(utf8_valid_prefix("abc\xE2\x82") == 3);
    // Every position of a bad byte inside an 8-byte word is found.
    for (std::size_t pos = 0; pos < 24; ++pos) {
        std::string s(24, 'a');
        s[pos] = '\xFF';
        CHECK(utf8_valid_prefix(s) == pos);
    }
}

TEST_CASE("json_line: nesting depth is limited, never a stack overflow") {
    auto nested = [](int depth, char open, char close, const char* inner) {
        std::string s = "{\"a\": ";
        for (int i = 0; i < depth; ++i) s += open == '{' ? std::string("{\"k\": ") : std::string(1, open);
        s += inner;
        for (int i = 0; i < depth; ++i) s += close;
        return s + ", \"text\": \"ok\"}";
    };
    CHECK(text_of(nested(100, '[', ']', "1")) == "ok");
    CHECK(text_of(nested(100, '{', '}', "1")) == "ok");
    // The limit is 512 levels below the top-level object.
    CHECK(text_of(nested(512, '[', ']', "")) == "ok");
    {
        std::string line = nested(513, '[', ']', "");
        check_err_at(line, 6 + 512, "nesting");
    }
    {
        std::string line = nested(512, '[', ']', "1");
        check_err_at(line, 6 + 512, "nesting");
    }
    // Far deeper input: an error, not a crash.
    for (char open : {'[', '{'}) {
        std::string line = nested(200000, open, open == '[' ? ']' : '}', "1");
        CHECK(parse_err(line).thrown);
    }
    std::string unclosed(1000000, '[');
    CHECK(parse_err("{\"a\": " + unclosed).thrown);
    CHECK(parse_err(unclosed).thrown);
}

TEST_CASE("json_line: the parser is reusable after errors") {
    JsonLineParser parser({"text", "id"});
    std::vector<std::string> values;
    CHECK_THROWS_AS(parser.parse(R"({"text": "a"})", values), JsonError);
    CHECK_THROWS_AS(parser.parse(R"({"text": "a", "id": 1})", values), JsonError);
    parser.parse(R"({"id": "7", "text": "b"})", values);
    REQUIRE(values.size() == 2);
    CHECK(values[0] == "b");
    CHECK(values[1] == "7");
    parser.parse(R"({"text": "c", "id": "8"})", values);
    CHECK(values[0] == "c");
    CHECK(values[1] == "8");
    CHECK(parser.keys() == std::vector<std::string>{"text", "id"});
}

TEST_CASE("json_line: long strings") {
    std::string big(3 << 20, 'x');
    for (std::size_t i = 0; i < big.size(); i += 997) big[i] = ' ';
    std::string line = "{\"text\": \"" + big + "\\n\\u00e9\"}";
    CHECK(text_of(line) == big + "\n\xC3\xA9");
}

TEST_CASE("json_line: long values with many escapes, several keys and a reused parser") {
    // Values over 1 MiB are decoded into room reserved from the rest of the line: the result is the
    // same as for short ones, for every key, whatever the previous line left in the values.
    std::string raw, expect;
    for (int i = 0; i < 200000; ++i) {
        raw += "ab\\n\\u00e9\\\"\\ud83d\\ude00 ";
        expect += "ab\n\xC3\xA9\"\xF0\x9F\x98\x80 ";
    }
    const std::string line = "{\"meta\": \"" + raw + "\", \"n\": 1, \"text\": \"" + raw + "x\"}";
    JsonLineParser parser({"text", "meta"});
    std::vector<std::string> values;
    for (int round = 0; round < 2; ++round) {
        parser.parse(line, values);
        REQUIRE(values.size() == 2);
        CHECK(values[0] == expect + "x");
        CHECK(values[1] == expect);
        parser.parse("{\"text\": \"short\", \"meta\": \"\"}", values);
        CHECK(values[0] == "short");
        CHECK(values[1].empty());
    }
}

TEST_CASE("json_line: the --max-document-bytes flag and its message") {
    for (const auto& [arg, want] : std::vector<std::pair<std::string, std::uint64_t>>{
             {"100", 100}, {"64M", 64ull << 20}, {"64MiB", 64ull << 20}, {"2k", 2048}, {"1.5M", 1572864},
             {"1G", 1ull << 30}, {"4294967295", 4294967295ull}}) {
        CLI::App app;
        std::uint64_t v = 0;
        mds::add_max_document_bytes_flag(app, v, "help");
        CHECK_NOTHROW(app.parse(std::vector<std::string>{arg, "--max-document-bytes"}));
        CHECK(v == want);
    }
    for (const std::string arg : {"nan", "inf", "-1", "0", "4G", "abc", "1.5"}) {
        CLI::App app;
        std::uint64_t v = 0;
        mds::add_max_document_bytes_flag(app, v, "help");
        CHECK_THROWS_AS(app.parse(std::vector<std::string>{arg, "--max-document-bytes"}), CLI::ParseError);
    }
    CHECK(mds::too_long_line_reason(100, 64) == "line of 100 bytes is longer than --max-document-bytes 64");
}

TEST_CASE("check_json_depth refuses deep nesting before any parse, ignoring brackets in strings") {
    CHECK_NOTHROW(mds::check_json_depth(R"({"a": [1, {"b": [[]]}]})", "doc"));
    CHECK_NOTHROW(mds::check_json_depth(std::string(64, '[') + std::string(64, ']'), "doc"));
    CHECK_THROWS_WITH_AS(mds::check_json_depth(std::string(65, '['), "answer.json"),
                         doctest::Contains("answer.json: JSON nested deeper than 64 levels (at byte 64)"), mds::Error);
    CHECK_NOTHROW(mds::check_json_depth("[\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"]", "doc"));
    CHECK_THROWS_AS(mds::check_json_depth("[[[", "doc", 2), mds::Error);
}

// ---- chat message lists (parse_chat_messages, for mds-preprocess --messages-key) -------------------

namespace {

std::vector<mds::JsonChatMessage> chat_ok(std::string_view line, const std::string& key = "messages") {
    std::vector<mds::JsonChatMessage> out;
    try {
        mds::parse_chat_messages(line, key, out);
    } catch (const JsonError& e) {
        FAIL_CHECK("unexpected JsonError for " << std::string(line) << ": " << std::string(e.what()));
    }
    return out;
}

Failure chat_err(std::string_view line, const std::string& key = "messages") {
    std::vector<mds::JsonChatMessage> out;
    Failure f;
    try {
        mds::parse_chat_messages(line, key, out);
    } catch (const JsonError& e) {
        f.thrown = true;
        f.offset = e.offset();
        f.reason = e.reason();
    }
    return f;
}

}  // namespace

TEST_CASE("chat messages: roles and contents decoded, other fields ignored, offsets of each message") {
    const std::string line =
        R"({"id": 3, "messages": [{"role": "system", "content": "Be \"brief\"\n", "name": {"x": [1]}},)"
        R"( {"content": "caf\u00e9 \/ \ud83d\ude00", "role": "user"}, {"role": "assistant", "content": ""}], "z": null})";
    const auto m = chat_ok(line);
    REQUIRE(m.size() == 3);
    CHECK(m[0].role == "system");
    CHECK(m[0].content == "Be \"brief\"\n");
    CHECK(m[1].role == "user");
    CHECK(m[1].content == "caf\xC3\xA9 / \xF0\x9F\x98\x80");
    CHECK(m[2].content.empty());
    CHECK(line.substr(m[0].offset, 9) == R"({"role": )");
    CHECK(line.substr(m[1].offset, 12) == R"({"content": )");
    CHECK(chat_ok(R"({"messages": []})").empty());
    // Duplicates: the last wins, for the list (as Python's dict) and inside a message.
    const auto d = chat_ok(R"({"messages": 5, "messages": [{"role": "user", "role": "assistant", "content": "a"}]})");
    REQUIRE(d.size() == 1);
    CHECK(d[0].role == "assistant");
}

TEST_CASE("chat messages: every malformed shape is a JsonError pointing at the culprit") {
    Failure f = chat_err(R"({"text": "x"})");
    CHECK(f.thrown);
    CHECK(f.reason.find("'messages' not found") != std::string::npos);
    f = chat_err(R"({"messages": "hello"})");
    CHECK(f.offset == 13);
    CHECK(f.reason.find("is a string, expected a list of messages") != std::string::npos);
    f = chat_err(R"({"messages": [{"role": "user", "content": "a"}, "hi"]})");
    CHECK(f.offset == 48);
    CHECK(f.reason.find("message 2 is a string, expected an object") != std::string::npos);
    f = chat_err(R"({"messages": [{"role": "user"}]})");
    CHECK(f.offset == 14);
    CHECK(f.reason.find("message 1 has no \"content\" field") != std::string::npos);
    f = chat_err(R"({"messages": [{"role": "user", "content": ["part"]}]})");
    CHECK(f.offset == 42);
    CHECK(f.reason.find("\"content\" is an array, expected a string") != std::string::npos);
    f = chat_err(R"({"messages": [{"role": null, "content": "x"}]})");
    CHECK(f.reason.find("\"role\" is null, expected a string") != std::string::npos);
    f = chat_err(R"({"messages": [{"role": "user", "content": "a\udc00"}]})");
    CHECK(f.offset == 44);
    CHECK(f.reason.find("lone surrogate") != std::string::npos);
    // Syntax errors are found before any field is judged.
    f = chat_err(R"({"messages": [{"role": "user", "content": "a"},]})");
    CHECK(f.thrown);
    CHECK(f.reason.find("expected a value") != std::string::npos);
    CHECK(chat_err(R"([{"role": "user", "content": "a"}])").reason.find("expected a JSON object") != std::string::npos);
}
