// Very long texts (a whole book, or a file that lost its newlines, in one jsonl line) encoded and
// counted in chunks of about a mebibyte, with exactly the ids or pieces of one pass: chunks are cut
// only where every pre-tokenizer starts a new piece. One pass would hold 16 bytes of piece view per
// 4 or 5 bytes of text, several times the text itself (specs/data.md §3.3).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "mds/tokenizer/pretokenizer.h"
#include "mds/tokenizer/tokenizer.h"

namespace mds::tok {

// The first position p >= `from` where `text` may be cut for pre-tokenizer `kind` without changing
// its pieces, or text.size() when there is none: text[p] is a space after an ASCII letter. The
// GPT-2 pattern ends its letter run there and matches " ?..." from the space on, whatever came
// before; BLOOM's Split ends its match at the space; a chunk starting with a space gets no prefix
// space. With `added`, no position inside an occurrence of an added token is chosen (added tokens
// are cut out of the text before pre-tokenization). PreTokenizer::Whole is never cut.
std::size_t next_cut(std::string_view text, std::size_t from, PreTokenizer kind,
                     const std::vector<AddedToken>* added = nullptr);

// encoder.encode(text, out), chunk by chunk for texts longer than `chunk_bytes`; same ids.
void encode_long_text(Encoder& encoder, const Tokenizer& tokenizer, std::string_view text,
                      std::vector<std::int32_t>& out, std::size_t chunk_bytes = std::size_t{1} << 20);

}  // namespace mds::tok
