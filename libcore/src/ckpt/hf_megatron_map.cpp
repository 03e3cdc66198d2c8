#include "mds/ckpt/hf_megatron_map.h"

#include <array>
#include <charconv>
#include <utility>

namespace mds::ckpt {
namespace {

// A block's tensors in Megatron's state-dict order, with GPT2's names and layouts (BLOOM keeps
// Megatron's names under h.N.).
struct BlockKey {
    const char* megatron;
    const char* gpt2;
    HfLayout gpt2_layout;
};
constexpr std::array<BlockKey, 12> kBlock = {{
    {"input_layernorm.weight", "ln_1.weight", HfLayout::Same},
    {"input_layernorm.bias", "ln_1.bias", HfLayout::Same},
    {"self_attention.query_key_value.weight", "attn.c_attn.weight", HfLayout::QkvTranspose},
    {"self_attention.query_key_value.bias", "attn.c_attn.bias", HfLayout::Qkv},
    {"self_attention.dense.weight", "attn.c_proj.weight", HfLayout::Transpose},
    {"self_attention.dense.bias", "attn.c_proj.bias", HfLayout::Same},
    {"post_attention_layernorm.weight", "ln_2.weight", HfLayout::Same},
    {"post_attention_layernorm.bias", "ln_2.bias", HfLayout::Same},
    {"mlp.dense_h_to_4h.weight", "mlp.c_fc.weight", HfLayout::Transpose},
    {"mlp.dense_h_to_4h.bias", "mlp.c_fc.bias", HfLayout::Same},
    {"mlp.dense_4h_to_h.weight", "mlp.c_proj.weight", HfLayout::Transpose},
    {"mlp.dense_4h_to_h.bias", "mlp.c_proj.bias", HfLayout::Same},
}};

// Embedding tensors: (Hugging Face base name, Megatron name), in Megatron's order.
constexpr std::array<std::pair<const char*, const char*>, 2> kGpt2Embedding = {{
    {"wte.weight", "word_embeddings.weight"},
    {"wpe.weight", "position_embeddings.weight"},
}};
constexpr std::array<std::pair<const char*, const char*>, 3> kBloomEmbedding = {{
    {"word_embeddings.weight", "word_embeddings.weight"},
    {"word_embeddings_layernorm.weight", "word_embeddings.norm.weight"},
    {"word_embeddings_layernorm.bias", "word_embeddings.norm.bias"},
}};

// "h.<n>.<rest>": the block number and the rest; nullopt for anything else (no sign, no leading
// zeros but "0", no overflow).
std::optional<std::pair<std::int64_t, std::string_view>> split_block(std::string_view n) {
    if (!n.starts_with("h.")) return std::nullopt;
    const auto dot = n.find('.', 2);
    if (dot == std::string_view::npos || dot == 2) return std::nullopt;
    const std::string_view digits = n.substr(2, dot - 2);
    if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
    std::int64_t block = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), block);
    if (ec != std::errc() || end != digits.data() + digits.size() || block < 0) return std::nullopt;
    return std::make_pair(block, n.substr(dot + 1));
}

}  // namespace

const char* hf_architecture_name(HfArchitecture a) { return a == HfArchitecture::Bloom ? "bloom" : "gpt2"; }

std::string_view hf_base_name(std::string_view hf_name) {
    constexpr std::string_view kPrefix = "transformer.";
    return hf_name.starts_with(kPrefix) ? hf_name.substr(kPrefix.size()) : hf_name;
}

std::optional<MegatronPlace> megatron_place(HfArchitecture arch, std::string_view hf_name) {
    const std::string_view n = hf_base_name(hf_name);
    const bool bloom = arch == HfArchitecture::Bloom;
    if (const auto b = split_block(n)) {
        for (const auto& k : kBlock) {
            if (b->second == (bloom ? k.megatron : k.gpt2))
                return MegatronPlace{MegatronPart::Block, b->first, k.megatron, bloom ? HfLayout::Same : k.gpt2_layout};
        }
        return std::nullopt;
    }
    if (n == "ln_f.weight") return MegatronPlace{MegatronPart::FinalNorm, -1, "weight", HfLayout::Same};
    if (n == "ln_f.bias") return MegatronPlace{MegatronPart::FinalNorm, -1, "bias", HfLayout::Same};
    if (bloom) {
        for (const auto& [hf, meg] : kBloomEmbedding)
            if (n == hf) return MegatronPlace{MegatronPart::Embedding, -1, meg, HfLayout::Same};
    } else {
        for (const auto& [hf, meg] : kGpt2Embedding)
            if (n == hf) return MegatronPlace{MegatronPart::Embedding, -1, meg, HfLayout::Same};
    }
    return std::nullopt;
}

bool hf_is_buffer(HfArchitecture arch, std::string_view hf_name) {
    if (arch != HfArchitecture::Gpt2) return false;
    const auto b = split_block(hf_base_name(hf_name));
    return b && (b->second == "attn.bias" || b->second == "attn.masked_bias");
}

std::string hf_name_of(HfArchitecture arch, const MegatronPlace& place) {
    const bool bloom = arch == HfArchitecture::Bloom;
    switch (place.part) {
    case MegatronPart::FinalNorm: return "transformer.ln_f." + place.name;
    case MegatronPart::Embedding:
        if (bloom) {
            for (const auto& [hf, meg] : kBloomEmbedding)
                if (place.name == meg) return std::string("transformer.") + hf;
        } else {
            for (const auto& [hf, meg] : kGpt2Embedding)
                if (place.name == meg) return std::string("transformer.") + hf;
        }
        break;
    case MegatronPart::Block:
        for (const auto& k : kBlock)
            if (place.name == k.megatron)
                return "transformer.h." + std::to_string(place.block) + "." + (bloom ? k.megatron : k.gpt2);
        break;
    }
    return "transformer.?" + place.name;
}

std::vector<MegatronPlace> megatron_parameters(HfArchitecture arch, std::int64_t num_layers) {
    const bool bloom = arch == HfArchitecture::Bloom;
    std::vector<MegatronPlace> out;
    if (bloom) {
        for (const auto& [hf, meg] : kBloomEmbedding) out.push_back({MegatronPart::Embedding, -1, meg, HfLayout::Same});
    } else {
        for (const auto& [hf, meg] : kGpt2Embedding) out.push_back({MegatronPart::Embedding, -1, meg, HfLayout::Same});
    }
    for (std::int64_t b = 0; b < num_layers; ++b)
        for (const auto& k : kBlock) out.push_back({MegatronPart::Block, b, k.megatron, bloom ? HfLayout::Same : k.gpt2_layout});
    out.push_back({MegatronPart::FinalNorm, -1, "weight", HfLayout::Same});
    out.push_back({MegatronPart::FinalNorm, -1, "bias", HfLayout::Same});
    return out;
}

int megatron_layer_index(const MegatronPlace& place, std::int64_t num_layers) {
    switch (place.part) {
    case MegatronPart::Embedding: return 1;
    case MegatronPart::Block: return static_cast<int>(place.block + 3);
    case MegatronPart::FinalNorm: break;
    }
    return static_cast<int>(num_layers + 4);
}

std::vector<std::int64_t> megatron_shape(const MegatronPlace& place, const HfModelSizes& s) {
    const std::string& n = place.name;
    if (place.part == MegatronPart::Embedding) {
        if (n == "word_embeddings.weight") return {s.vocab, s.hidden};
        if (n == "position_embeddings.weight") return {s.positions, s.hidden};
        return {s.hidden};  // the embedding LayerNorm
    }
    if (place.part == MegatronPart::FinalNorm) return {s.hidden};
    if (n == "self_attention.query_key_value.weight") return {3 * s.hidden, s.hidden};
    if (n == "self_attention.query_key_value.bias") return {3 * s.hidden};
    if (n == "self_attention.dense.weight") return {s.hidden, s.hidden};
    if (n == "mlp.dense_h_to_4h.weight") return {s.ffn, s.hidden};
    if (n == "mlp.dense_h_to_4h.bias") return {s.ffn};
    if (n == "mlp.dense_4h_to_h.weight") return {s.hidden, s.ffn};
    return {s.hidden};  // LayerNorms, the attention output and 4h->h biases
}

std::vector<std::int64_t> hf_shape(const MegatronPlace& place, const HfModelSizes& sizes) {
    auto shape = megatron_shape(place, sizes);
    if (place.layout == HfLayout::Transpose || place.layout == HfLayout::QkvTranspose) std::swap(shape[0], shape[1]);
    return shape;
}

std::int64_t hf_qkv_row(std::int64_t megatron_row, std::int64_t heads, std::int64_t head_dim) {
    const std::int64_t head = megatron_row / (3 * head_dim), c = megatron_row / head_dim % 3, e = megatron_row % head_dim;
    return (c * heads + head) * head_dim + e;
}

}  // namespace mds::ckpt
