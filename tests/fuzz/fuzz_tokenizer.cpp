// Fuzzes the GPT-2 tokenizer (tokenizer/tokenizer.h) loaded once from encoder.json + vocab.bpe in
// $MDS_GPT2_DIR (default: ../shared/data/gpt2 beside the checkout, compiled in).
// Invariants, for any bytes: every pre-tokenizer's pieces cover the text back to back; the heap
// BPE and the reference BPE agree on every GPT-2 piece; the cached Encoder (small, so that it is
// emptied often) gives the uncached ids; decode(encode(s)) == s, since byte-level BPE loses
// nothing and every GPT-2 merge result is in the vocabulary. For valid UTF-8, each GPT-2 and BLOOM
// piece is itself valid UTF-8 (no code point is cut).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "mds/tokenizer/tokenizer.h"
#include "mds/util/json_line.h"  // utf8_valid_prefix

namespace {

std::unique_ptr<mds::tok::Tokenizer> g_tokenizer;
std::unique_ptr<mds::tok::Encoder> g_cached;

void check_pieces(mds::tok::PreTokenizer kind, std::string_view text, bool valid_utf8,
                  std::vector<std::string_view>& pieces) {
    pieces.clear();
    mds::tok::pretokenize(kind, text, pieces);
    const char* at = text.data();
    for (std::string_view p : pieces) {
        MDS_FUZZ_CHECK(!p.empty());
        MDS_FUZZ_CHECK(p.data() == at);
        at += p.size();
        if (valid_utf8 && kind != mds::tok::PreTokenizer::Whole) MDS_FUZZ_CHECK(mds::utf8_valid_prefix(p) == p.size());
    }
    MDS_FUZZ_CHECK(at == text.data() + text.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* env = std::getenv("MDS_GPT2_DIR");
    const std::string dir = env ? env : MDS_GPT2_DIR_DEFAULT;
    if (!std::filesystem::exists(dir + "/encoder.json") || !std::filesystem::exists(dir + "/vocab.bpe")) {
        std::fprintf(stderr, "mds-fuzz: skipped: no GPT-2 files in %s (set MDS_GPT2_DIR)\n", dir.c_str());
        std::exit(0);
    }
    g_tokenizer = std::make_unique<mds::tok::Tokenizer>(
        mds::tok::Tokenizer::from_gpt2_files(dir + "/encoder.json", dir + "/vocab.bpe"));
    g_cached = std::make_unique<mds::tok::Encoder>(*g_tokenizer, 64);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const bool valid_utf8 = mds::utf8_valid_prefix(text) == text.size();
    const auto& tok = *g_tokenizer;

    std::vector<std::string_view> pieces;
    for (auto kind : {mds::tok::PreTokenizer::Bloom, mds::tok::PreTokenizer::Whole, mds::tok::PreTokenizer::Gpt2})
        check_pieces(kind, text, valid_utf8, pieces);
    std::vector<std::int32_t> fast, reference;
    for (std::string_view p : pieces) {  // GPT-2's, from the last call
        fast.clear();
        reference.clear();
        tok.model().encode_piece(p, fast);
        tok.model().encode_piece_reference(p, reference);
        MDS_FUZZ_CHECK(fast == reference);
    }

    std::vector<std::int32_t> ids, cached;
    tok.encode(text, ids);
    g_cached->encode(text, cached);
    MDS_FUZZ_CHECK(ids == cached);
    for (std::int32_t id : ids) MDS_FUZZ_CHECK(id >= 0 && static_cast<std::uint64_t>(id) < tok.vocab_size());
    std::string decoded;
    MDS_FUZZ_CHECK(mds::fuzz::only_mds_errors([&] { decoded = tok.decode(ids); }));
    MDS_FUZZ_CHECK(decoded == text);
    return 0;
}
