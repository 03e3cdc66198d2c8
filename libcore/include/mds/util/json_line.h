// One JSON object per line (jsonl), parsed with the acceptance rules of Python's json.loads, which
// Megatron's preprocess_data.py uses (specs/data.md §2.2): strict strings (no raw control
// characters), `\/` and `\uXXXX` escapes with surrogate pairs combined, NaN/Infinity accepted,
// duplicate keys resolved to the last. Where Python would go on and crash later (a lone surrogate
// that cannot be encoded to UTF-8, invalid UTF-8 in the file) this parser reports an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>  // CLI::App

#include "mds/util/error.h"

namespace mds {

// A malformed line; `offset` is the byte offset in the line (0-based) where parsing stopped.
class JsonError : public Error {
public:
    JsonError(std::size_t offset, const std::string& reason)
        : Error(reason + " (at byte " + std::to_string(offset) + ")"), offset_(offset), reason_(reason) {}
    std::size_t offset() const { return offset_; }
    const std::string& reason() const { return reason_; }

private:
    std::size_t offset_;
    std::string reason_;
};

class JsonLineParser {
public:
    // `keys`: the top-level fields to extract, each of which must be a string.
    explicit JsonLineParser(std::vector<std::string> keys);

    // Parses a whole line; on success values[i] holds the decoded (UTF-8) value of keys[i].
    // Throws JsonError for malformed JSON, a missing key, or a value that is not a string.
    void parse(std::string_view line, std::vector<std::string>& values);

    const std::vector<std::string>& keys() const { return keys_; }

private:
    std::vector<std::string> keys_;
    std::string scratch_;
};

// One message of a chat-style list, as Hugging Face chat templates take them: {"role": ..., "content": ...}.
struct JsonChatMessage {
    std::string role;
    std::string content;
    std::size_t offset = 0;  // byte offset of the message object in the line (0-based)
};

// Parses a whole line with the rules of JsonLineParser and returns, in `messages`, the list held by the top-level
// field `key` (its last occurrence, as Python's dict keeps it): every element an object with string fields "role"
// and "content" (other fields are validated and ignored; a duplicate field keeps its last value). Throws JsonError,
// with the offset of the culprit, for malformed JSON, a missing field, a value that is not a list, an element that
// is not an object, a "role" or "content" that is missing or not a string, and a lone surrogate in either. An empty
// list is returned as such (the caller decides what it lacks).
void parse_chat_messages(std::string_view line, const std::string& key, std::vector<JsonChatMessage>& messages);

// The checks every jsonl-reading tool makes of its flags (mds::UsageError naming the flag): at
// least one --input, at least one --json-keys key and none twice, --workers >= 1.
void check_jsonl_flags(const std::vector<std::string>& inputs, const std::vector<std::string>& json_keys,
                       unsigned workers);

// --max-document-bytes BYTES for the jsonl tools: the longest input line read (default 64 MiB,
// at most 4 GiB - 1); K, M, G suffixes (KiB, MiB, GiB; "1.5M" too) are accepted.
void add_max_document_bytes_flag(CLI::App& app, std::uint64_t& max_bytes, const std::string& help);

// Why a line longer than --max-document-bytes (LineBatchReader dropped its text) is refused:
// "line of N bytes is longer than --max-document-bytes M", for the caller to put after
// "file:line: " and throw, or count as a skipped line.
std::string too_long_line_reason(std::uint64_t bytes, std::uint64_t max_bytes);

// Length of the valid UTF-8 prefix of `s` (== s.size() when all of it is valid); strict as Python's
// decoder: no overlong forms, no encoded surrogates, nothing above U+10FFFF.
std::size_t utf8_valid_prefix(std::string_view s);

}  // namespace mds
