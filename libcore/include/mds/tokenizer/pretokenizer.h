// Pre-tokenizers of byte-level BPE: split text into pieces that BPE encodes independently.
//  - Gpt2: the GPT-2 pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//    as a hand-written scanner with the regex module's semantics (specs/data.md §3.3).
//  - Bloom: BLOOM's Split pre-tokenizer, pattern ` ?[^(\s|[.,!?…。，、।۔،])]+` with behaviour
//    Isolated: matches and the gaps between them are pieces.
//  - Whole: no split (tokenizer.json ByteLevel with use_regex=false and nothing before it).
// Input must be valid UTF-8. Pieces are views into the text and cover it without gaps.
#pragma once

#include <string_view>
#include <vector>

namespace mds::tok {

enum class PreTokenizer { Gpt2, Bloom, Whole };

void pretokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace mds::tok
