#include "mds/tokenizer/long_text.h"

namespace mds::tok {

namespace {

bool ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// True when some added token's occurrence starts before p and ends after it.
bool inside_added_token(std::string_view text, std::size_t p, const std::vector<AddedToken>& added) {
    for (const auto& a : added) {
        const std::size_t n = a.content.size();
        for (std::size_t k = 1; k < n && k <= p; ++k)
            if (text.compare(p - k, n, a.content) == 0) return true;
    }
    return false;
}

}  // namespace

std::size_t next_cut(std::string_view text, std::size_t from, PreTokenizer kind, const std::vector<AddedToken>* added) {
    if (kind == PreTokenizer::Whole) return text.size();
    for (std::size_t p = from < 1 ? 1 : from; p < text.size(); ++p) {
        p = text.find(' ', p);
        if (p == std::string_view::npos) break;
        if (!ascii_letter(text[p - 1])) continue;
        if (added && !added->empty() && inside_added_token(text, p, *added)) continue;
        return p;
    }
    return text.size();
}

void encode_long_text(Encoder& encoder, const Tokenizer& tokenizer, std::string_view text,
                      std::vector<std::int32_t>& out, std::size_t chunk_bytes) {
    std::size_t start = 0;
    while (text.size() - start > chunk_bytes) {
        const std::size_t cut = next_cut(text, start + chunk_bytes, tokenizer.pretokenizer(), &tokenizer.added_tokens());
        encoder.encode(text.substr(start, cut - start), out);
        start = cut;
    }
    encoder.encode(text.substr(start), out);
}

}  // namespace mds::tok
