// Fuzzes Tokenizer::from_hf_json (tokenizer/tokenizer.h) on arbitrary bytes in a file.
// Invariants: loading throws nothing but mds::Error, whatever the JSON structure (wrong types,
// missing fields, huge ids); a tokenizer that loads encodes sample texts and the file itself
// without crashing, cached and uncached encodings agree, and decoding fails only with mds::Error.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "mds/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const std::string path = mds::fuzz::scratch_path("tokenizer.json");
    mds::fuzz::write_bytes(path, data, size);
    std::optional<mds::tok::Tokenizer> tok;
    if (!mds::fuzz::only_mds_errors([&] { tok.emplace(mds::tok::Tokenizer::from_hf_json(path)); })) return 0;

    mds::tok::Encoder cached(*tok, 16);
    const std::string_view file(reinterpret_cast<const char*>(data), size);
    for (std::string_view text : {std::string_view("Hello world! It's 2024 <|endoftext|> x</s>y"),
                                  std::string_view("  \u00e9t\u00e9\u2026 \u3002\u4e2d\u6587, ok?\n\n"), file}) {
        std::vector<std::int32_t> ids, ids_cached;
        tok->encode(text, ids);
        cached.encode(text, ids_cached);
        MDS_FUZZ_CHECK(ids == ids_cached);
        mds::fuzz::only_mds_errors([&] { (void)tok->decode(ids); });
    }
    (void)tok->token_id("<|endoftext|>");
    mds::fuzz::only_mds_errors([&] { tok->set_eod_token("</s>"); });
    return 0;
}
