#include "mds/util/json_line.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "mds/util/cli.h"  // number_in

namespace mds {

std::size_t utf8_valid_prefix(std::string_view s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    std::size_t n = s.size(), i = 0;
    while (i < n) {
        // Fast path: 8 ASCII bytes at a time.
        if (i + 8 <= n) {
            std::uint64_t w;
            std::memcpy(&w, p + i, 8);
            if ((w & 0x8080808080808080ULL) == 0) {
                i += 8;
                continue;
            }
        }
        unsigned char c = p[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        std::size_t len;
        unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;       // no overlong
            if (c == 0xED) hi = 0x9F;       // no surrogates
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;       // no overlong
            if (c == 0xF4) hi = 0x8F;       // <= U+10FFFF
        } else {
            return i;
        }
        if (i + len > n) return i;
        if (p[i + 1] < lo || p[i + 1] > hi) return i;
        for (std::size_t k = 2; k < len; ++k)
            if ((p[i + k] & 0xC0) != 0x80) return i;
        i += len;
    }
    return n;
}

namespace {

constexpr int kMaxDepth = 512;  // Python raises RecursionError near 1000; stay well below

struct Cursor {
    const char* begin;
    const char* p;
    const char* end;

    [[noreturn]] void fail(const std::string& reason) const {
        throw JsonError(static_cast<std::size_t>(p - begin), reason);
    }
    void skip_ws() {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) ++p;
    }
    bool at_end() const { return p >= end; }
    char peek() const { return p < end ? *p : '\0'; }
    bool consume_literal(const char* lit) {
        std::size_t n = std::strlen(lit);
        if (static_cast<std::size_t>(end - p) >= n && std::memcmp(p, lit, n) == 0) {
            p += n;
            return true;
        }
        return false;
    }
};

std::string describe(char c) {
    if (c >= 0x20 && c < 0x7F) return std::string("'") + c + "'";
    char buf[16];
    std::snprintf(buf, sizeof buf, "byte 0x%02X", static_cast<unsigned char>(c));
    return buf;
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// Reads 4 hex digits after "\u"; `esc` is the backslash, where errors point.
std::uint32_t read_hex4(Cursor& c, const char* esc) {
    auto fail_at_escape = [&](const std::string& reason) {
        c.p = esc;
        c.fail(reason);
    };
    if (c.end - c.p < 4) fail_at_escape("truncated \\u escape");
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
        int h = hex_value(c.p[k]);
        if (h < 0) fail_at_escape("invalid \\u escape: expected 4 hex digits");
        v = v * 16 + static_cast<std::uint32_t>(h);
    }
    c.p += 4;
    return v;
}

constexpr std::size_t kNone = static_cast<std::size_t>(-1);

// Parses a string starting at the opening quote; decodes into `out` when non-null. Python accepts
// lone surrogates and fails only when such text is encoded to UTF-8, which Megatron does for the
// tokenized fields alone; they are kept (as WTF-8) and the offset of the first one is stored in
// `*lone_surrogate_at` when given, for the caller to reject once it knows the field is used.
void parse_string(Cursor& c, std::string* out, std::size_t* lone_surrogate_at = nullptr) {
    const char* const open_quote = c.p;
    auto unterminated = [&] {
        c.p = open_quote;  // as Python: "Unterminated string starting at"
        c.fail("unterminated string");
    };
    ++c.p;  // opening quote
    for (;;) {
        // Copy a run of plain bytes.
        const char* run = c.p;
        while (c.p < c.end) {
            unsigned char ch = static_cast<unsigned char>(*c.p);
            if (ch == '"' || ch == '\\' || ch < 0x20) break;
            ++c.p;
        }
        if (c.p > run) {
            std::string_view chunk(run, static_cast<std::size_t>(c.p - run));
            std::size_t ok = utf8_valid_prefix(chunk);
            if (ok != chunk.size()) {
                c.p = run + ok;
                c.fail("invalid UTF-8 in string");
            }
            if (out) out->append(chunk);
        }
        if (c.at_end()) unterminated();
        char ch = *c.p;
        if (ch == '"') {
            ++c.p;
            return;
        }
        if (ch != '\\') c.fail("invalid control character " + describe(ch) + " in string (must be escaped)");
        ++c.p;
        if (c.at_end()) unterminated();
        char e = *c.p++;
        switch (e) {
            case '"': if (out) *out += '"'; break;
            case '\\': if (out) *out += '\\'; break;
            case '/': if (out) *out += '/'; break;
            case 'b': if (out) *out += '\b'; break;
            case 'f': if (out) *out += '\f'; break;
            case 'n': if (out) *out += '\n'; break;
            case 'r': if (out) *out += '\r'; break;
            case 't': if (out) *out += '\t'; break;
            case 'u': {
                const char* esc = c.p - 2;
                std::uint32_t cp = read_hex4(c, esc);
                bool lone = cp >= 0xDC00 && cp <= 0xDFFF;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    // A high surrogate combines with an immediately following low one. Python
                    // reads the second escape whenever one follows, so a bad one is an error.
                    if (c.end - c.p >= 6 && c.p[0] == '\\' && c.p[1] == 'u') {
                        Cursor look = c;
                        look.p += 2;
                        std::uint32_t lo = read_hex4(look, c.p);
                        if (lo >= 0xDC00 && lo <= 0xDFFF) {
                            c.p = look.p;
                            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                            if (out) append_utf8(*out, cp);
                            break;
                        }
                    }
                    lone = true;
                }
                if (lone && lone_surrogate_at && *lone_surrogate_at == kNone)
                    *lone_surrogate_at = static_cast<std::size_t>(esc - c.begin);
                if (out) append_utf8(*out, cp);
                break;
            }
            default:
                c.p -= 2;
                c.fail("invalid escape \\" + std::string(1, e));
        }
    }
}

void parse_number(Cursor& c) {
    const char* start = c.p;
    if (c.peek() == '-') {
        ++c.p;
        if (c.consume_literal("Infinity")) return;
    }
    if (c.peek() == '0') {
        ++c.p;
    } else if (c.peek() >= '1' && c.peek() <= '9') {
        while (c.peek() >= '0' && c.peek() <= '9') ++c.p;
    } else {
        c.p = start;
        c.fail("expected a value");
    }
    if (c.peek() == '.' && c.p + 1 < c.end && c.p[1] >= '0' && c.p[1] <= '9') {
        ++c.p;
        while (c.peek() >= '0' && c.peek() <= '9') ++c.p;
    }
    if (c.peek() == 'e' || c.peek() == 'E') {
        const char* e = c.p;
        ++c.p;
        if (c.peek() == '+' || c.peek() == '-') ++c.p;
        if (c.peek() >= '0' && c.peek() <= '9') {
            while (c.peek() >= '0' && c.peek() <= '9') ++c.p;
        } else {
            c.p = e;  // Python's regex leaves the exponent out; the delimiter check then fails
        }
    }
}

// What the top-level object held for one requested key (its last occurrence, as Python's dict).
struct FieldState {
    bool found = false;
    char kind = 0;                 // 's' string, 'o' object, 'a' array, 'n' null, 'b' bool, 'd' number
    std::size_t value_at = 0;      // offset of the value
    std::size_t lone_surrogate_at = kNone;
};

void parse_value(Cursor& c, int depth, std::string* out_string, char* out_kind, std::size_t* lone_surrogate_at);

// Parses an object starting at '{'. For the top-level object `keys` is given: the values of those
// keys are decoded into `values` and described in `fields`; all other values are only validated.
void parse_object_body(Cursor& c, int depth, const std::vector<std::string>* keys,
                       std::vector<std::string>* values, std::vector<FieldState>* fields, std::string& key) {
    ++c.p;  // '{'
    c.skip_ws();
    if (c.peek() == '}') {
        ++c.p;
        return;
    }
    for (;;) {
        if (c.peek() != '"') c.fail("expected a property name in double quotes");
        key.clear();
        parse_string(c, &key);
        c.skip_ws();
        if (c.peek() != ':') c.fail("expected ':' after a property name");
        ++c.p;
        c.skip_ws();
        std::size_t target = keys ? keys->size() : 0;
        if (keys)
            for (std::size_t i = 0; i < keys->size(); ++i)
                if ((*keys)[i] == key) target = i;
        if (keys && target < keys->size()) {
            // A later duplicate replaces this one, so nothing about the value is an error yet.
            FieldState& f = (*fields)[target];
            f = FieldState{};
            f.found = true;
            f.value_at = static_cast<std::size_t>(c.p - c.begin);
            std::string& v = (*values)[target];
            v.clear();
            // A long value is decoded into room reserved once: decoding never makes text longer,
            // so the rest of the line bounds it, and a huge document costs its size, not the 3
            // times of a string doubling while escapes are appended piece by piece. Pages of the
            // reservation that are never written take no memory.
            if (const auto rest = static_cast<std::size_t>(c.end - c.p); rest > (std::size_t{1} << 20) && c.peek() == '"')
                v.reserve(rest);
            parse_value(c, depth + 1, &v, &f.kind, &f.lone_surrogate_at);
        } else {
            parse_value(c, depth + 1, nullptr, nullptr, nullptr);
        }
        c.skip_ws();
        if (c.peek() == ',') {
            ++c.p;
            c.skip_ws();
            continue;
        }
        if (c.peek() == '}') {
            ++c.p;
            return;
        }
        c.fail(c.at_end() ? "unterminated object" : "expected ',' or '}' after a value, found " + describe(c.peek()));
    }
}

void parse_value(Cursor& c, int depth, std::string* out_string, char* out_kind, std::size_t* lone_surrogate_at) {
    if (depth > kMaxDepth) c.fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    c.skip_ws();
    if (c.at_end()) c.fail("expected a value, found the end of the line");
    char ch = c.peek();
    char kind;
    if (ch == '"') {
        kind = 's';
        parse_string(c, out_string, lone_surrogate_at);
    } else if (ch == '{') {
        kind = 'o';
        std::string key;
        parse_object_body(c, depth, nullptr, nullptr, nullptr, key);
    } else if (ch == '[') {
        kind = 'a';
        ++c.p;
        c.skip_ws();
        if (c.peek() == ']') {
            ++c.p;
        } else {
            for (;;) {
                parse_value(c, depth + 1, nullptr, nullptr, nullptr);
                c.skip_ws();
                if (c.peek() == ',') {
                    ++c.p;
                    continue;
                }
                if (c.peek() == ']') {
                    ++c.p;
                    break;
                }
                c.fail(c.at_end() ? "unterminated array" : "expected ',' or ']' in an array, found " + describe(c.peek()));
            }
        }
    } else if (c.consume_literal("null")) {
        kind = 'n';
    } else if (c.consume_literal("true") || c.consume_literal("false")) {
        kind = 'b';
    } else if (c.consume_literal("NaN") || c.consume_literal("Infinity")) {
        kind = 'd';
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        kind = 'd';
        parse_number(c);
    } else {
        c.fail("expected a value, found " + describe(ch));
    }
    if (out_kind) *out_kind = kind;
}

const char* kind_name(char kind) {
    switch (kind) {
        case 's': return "a string";
        case 'o': return "an object";
        case 'a': return "an array";
        case 'n': return "null";
        case 'b': return "a boolean";
        default: return "a number";
    }
}

// The whole line: one JSON object, nothing after it; the values of `keys` decoded into `values` and
// described in `fields`.
void parse_top_level(std::string_view line, const std::vector<std::string>& keys, std::vector<std::string>& values,
                     std::vector<FieldState>& fields, std::string& scratch) {
    values.resize(keys.size());
    fields.assign(keys.size(), FieldState{});
    Cursor c{line.data(), line.data(), line.data() + line.size()};
    c.skip_ws();
    if (c.at_end()) c.fail("empty line, expected a JSON object");
    if (c.peek() != '{') {
        // Validate what it is, for a precise message (a syntax error wins).
        char kind = 0;
        Cursor v = c;
        parse_value(v, 0, nullptr, &kind, nullptr);
        c.fail("expected a JSON object, found " + std::string(kind == 'a' ? "an array" : kind == 's' ? "a string" : "a scalar"));
    }
    parse_object_body(c, 0, &keys, &values, &fields, scratch);
    c.skip_ws();
    if (!c.at_end()) c.fail("extra data after the JSON object: " + describe(c.peek()));
}

}  // namespace

JsonLineParser::JsonLineParser(std::vector<std::string> keys) : keys_(std::move(keys)) {}

void JsonLineParser::parse(std::string_view line, std::vector<std::string>& values) {
    std::vector<FieldState> fields;
    parse_top_level(line, keys_, values, fields, scratch_);
    // Only now, as Megatron looks the keys up after json.loads, in --json-keys order.
    for (std::size_t i = 0; i < keys_.size(); ++i) {
        const FieldState& f = fields[i];
        if (!f.found) throw JsonError(0, "field '" + keys_[i] + "' not found");
        if (f.kind != 's')
            throw JsonError(f.value_at, "field '" + keys_[i] + "' is " + kind_name(f.kind) + ", expected a string");
        if (f.lone_surrogate_at != kNone)
            throw JsonError(f.lone_surrogate_at, "lone surrogate \\" +
                                                     std::string(line.substr(f.lone_surrogate_at + 1, 5)) +
                                                     " in field '" + keys_[i] + "' cannot be encoded as UTF-8");
    }
}

namespace {

// One message object of a chat list, starting at '{' (the line was validated already, so only the
// fields' types and values are judged here). `index` is the 1-based position for messages.
JsonChatMessage parse_chat_message(Cursor& c, std::size_t index, std::string& key) {
    JsonChatMessage m;
    m.offset = static_cast<std::size_t>(c.p - c.begin);
    const std::string what = "message " + std::to_string(index);
    if (c.peek() != '{') {
        char kind = 0;
        Cursor v = c;
        parse_value(v, 0, nullptr, &kind, nullptr);
        c.fail(what + " is " + kind_name(kind) + ", expected an object with \"role\" and \"content\"");
    }
    const std::vector<std::string> names = {"role", "content"};
    std::vector<std::string> values(2);
    std::vector<FieldState> fields(2);
    parse_object_body(c, 1, &names, &values, &fields, key);
    for (std::size_t i = 0; i < 2; ++i) {
        const FieldState& f = fields[i];
        if (!f.found) throw JsonError(m.offset, what + " has no \"" + names[i] + "\" field");
        if (f.kind != 's')
            throw JsonError(f.value_at, what + ": \"" + names[i] + "\" is " + kind_name(f.kind) + ", expected a string");
        if (f.lone_surrogate_at != kNone)
            throw JsonError(f.lone_surrogate_at, what + ": lone surrogate in \"" + names[i] + "\" cannot be encoded as UTF-8");
    }
    m.role = std::move(values[0]);
    m.content = std::move(values[1]);
    return m;
}

}  // namespace

void parse_chat_messages(std::string_view line, const std::string& key, std::vector<JsonChatMessage>& messages) {
    messages.clear();
    const std::vector<std::string> keys = {key};
    std::vector<std::string> values;
    std::vector<FieldState> fields;
    std::string scratch;
    parse_top_level(line, keys, values, fields, scratch);
    const FieldState& f = fields[0];
    if (!f.found) throw JsonError(0, "field '" + key + "' not found");
    if (f.kind != 'a')
        throw JsonError(f.value_at, "field '" + key + "' is " + kind_name(f.kind) + ", expected a list of messages");
    // Second pass over the list, whose syntax the first pass checked.
    Cursor c{line.data(), line.data() + f.value_at, line.data() + line.size()};
    ++c.p;  // '['
    c.skip_ws();
    if (c.peek() == ']') return;
    for (;;) {
        c.skip_ws();
        messages.push_back(parse_chat_message(c, messages.size() + 1, scratch));
        c.skip_ws();
        if (c.peek() == ',') {
            ++c.p;
            continue;
        }
        return;  // ']'
    }
}

void add_max_document_bytes_flag(CLI::App& app, std::uint64_t& max_bytes, const std::string& help) {
    // "64M" -> "67108864"; anything else is left for number_in to judge (and refuse nan, -1, ...).
    auto suffix = [](std::string& input) -> std::string {
        std::string s = input;
        while (!s.empty() && s.back() == ' ') s.pop_back();
        std::string unit;
        while (!s.empty() && std::isalpha(static_cast<unsigned char>(s.back()))) {
            unit.insert(unit.begin(), static_cast<char>(std::tolower(static_cast<unsigned char>(s.back()))));
            s.pop_back();
        }
        double factor = 0;
        if (unit == "k" || unit == "kb" || unit == "kib") factor = 1024.0;
        else if (unit == "m" || unit == "mb" || unit == "mib") factor = 1048576.0;
        else if (unit == "g" || unit == "gb" || unit == "gib") factor = 1073741824.0;
        else if (unit == "b") factor = 1.0;
        if (factor == 0 || s.empty()) return {};
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (end == s.c_str() || *end != '\0' || !std::isfinite(v)) return {};
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.0f", v * factor);
        input = buf;
        return {};
    };
    app.add_option("--max-document-bytes", max_bytes, help + " (suffixes K, M, G: KiB, MiB, GiB)")
        ->default_str("64M")
        ->type_name("BYTES")
        ->transform(CLI::Validator(suffix, "", "size"))
        ->check(number_in(1, 4294967295.0));
}

std::string too_long_line_reason(std::uint64_t bytes, std::uint64_t max_bytes) {
    std::string m = "line of ";
    m += std::to_string(bytes);
    m += " bytes is longer than --max-document-bytes ";
    m += std::to_string(max_bytes);
    return m;
}

void check_jsonl_flags(const std::vector<std::string>& inputs, const std::vector<std::string>& json_keys,
                       unsigned workers) {
    if (inputs.empty()) throw UsageError("no input: give --input FILE (.jsonl, .jsonl.zst or - for stdin)");
    if (json_keys.empty()) throw UsageError("--json-keys needs at least one key");
    if (workers < 1) throw UsageError("--workers must be at least 1");
    for (std::size_t i = 0; i < json_keys.size(); ++i)
        for (std::size_t j = 0; j < i; ++j)
            if (json_keys[i] == json_keys[j]) throw UsageError("--json-keys lists '" + json_keys[i] + "' twice");
}

}  // namespace mds
