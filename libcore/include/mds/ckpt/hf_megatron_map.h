// Where each tensor of a Hugging Face GPT2 (GPT2LMHeadModel / GPT2Model) or BLOOM (BloomForCausalLM /
// BloomModel) state dict sits in a Megatron-DeepSpeed checkpoint, and how its bytes are laid out
// there (specs/checkpoints.md §4, §7.2, §7.3): the name map, GPT2's Conv1D weights ([in, out]) against
// Megatron's Linear ([out, in]), GPT2's fused QKV rows [3, heads, d] against Megatron's [heads, 3, d]
// (checkpoint_version 3), BMD's layer numbering and each parameter's global shape. mds-hf-to-ckpt
// reads Hugging Face folders with it; to_hf.cpp holds the same mapping in the other direction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mds::ckpt {

enum class HfArchitecture { Gpt2, Bloom };
const char* hf_architecture_name(HfArchitecture a);  // "gpt2", "bloom" (config.json's model_type)

// How a Hugging Face tensor's row-major bytes relate to the Megatron tensor of the same parameter.
enum class HfLayout {
    Same,          // identical: embeddings, LayerNorms, biases, every BLOOM tensor
    Transpose,     // GPT2 Conv1D weight [in, out] = Megatron's Linear weight [out, in] transposed
    Qkv,           // GPT2 c_attn.bias: rows [3, heads, d] where Megatron has [heads, 3, d]
    QkvTranspose,  // GPT2 c_attn.weight: transposed, then rows reordered as Qkv
};

// The three kinds of Megatron-DeepSpeed layer files (§1.3).
enum class MegatronPart { Embedding, Block, FinalNorm };

struct MegatronPlace {
    MegatronPart part = MegatronPart::Embedding;
    std::int64_t block = -1;  // transformer block (0-based) for MegatronPart::Block
    std::string name;         // inside the layer file: "word_embeddings.weight", "self_attention.dense.bias", "weight"
    HfLayout layout = HfLayout::Same;
    bool operator==(const MegatronPlace&) const = default;
};

// The Hugging Face name without the base model's prefix: "transformer.h.0.ln_1.weight" ->
// "h.0.ln_1.weight"; names without it (GPT2Model / BloomModel saved alone, the original gpt2
// pytorch_model.bin) are returned as they are, as transformers accepts both.
std::string_view hf_base_name(std::string_view hf_name);

// The Megatron place of a Hugging Face parameter (`hf_name` with or without "transformer."), or
// nullopt when the architecture has no such parameter. Buffers and the LM head are not parameters
// here (hf_is_buffer, "lm_head.weight").
std::optional<MegatronPlace> megatron_place(HfArchitecture arch, std::string_view hf_name);
// GPT2's causal-mask buffers (h.N.attn.bias, h.N.attn.masked_bias) that older transformers saved:
// not weights, ignored as transformers ignores them.
bool hf_is_buffer(HfArchitecture arch, std::string_view hf_name);
// The Hugging Face name ("transformer." prefix included) of a Megatron place: the inverse of
// megatron_place, for messages about missing tensors.
std::string hf_name_of(HfArchitecture arch, const MegatronPlace& place);

// Every Megatron parameter of a model of `num_layers` blocks, in layer-file order and, within a
// file, in the state-dict order Megatron-DeepSpeed saves (embedding: word_embeddings.weight, its
// LayerNorm for BLOOM, position_embeddings.weight for GPT2; a block's 12 tensors; the final norm's
// weight and bias).
std::vector<MegatronPlace> megatron_parameters(HfArchitecture arch, std::int64_t num_layers);

// BMD's layer file index (§1.3): the embedding 1, block b at b + 3, the final norm at num_layers + 4.
int megatron_layer_index(const MegatronPlace& place, std::int64_t num_layers);

// The model's sizes, for the global shapes.
struct HfModelSizes {
    std::int64_t hidden = 0, heads = 0, ffn = 0;
    std::int64_t vocab = 0;      // rows of the word embedding
    std::int64_t positions = 0;  // rows of GPT2's position embedding
};
// The global shape of a parameter in Megatron's layout ([out, in] for Linear weights).
std::vector<std::int64_t> megatron_shape(const MegatronPlace& place, const HfModelSizes& sizes);
// The shape of the same parameter as the Hugging Face state dict holds it (Conv1D weights [in, out]).
std::vector<std::int64_t> hf_shape(const MegatronPlace& place, const HfModelSizes& sizes);

// Fused QKV: Megatron's row `megatron_row` of [heads, 3, head_dim] rows is row
// (c * heads + head) * head_dim + e of GPT2's [3, heads, head_dim], where megatron_row =
// (head * 3 + c) * head_dim + e. The inverse of to_hf.cpp's reorder.
std::int64_t hf_qkv_row(std::int64_t megatron_row, std::int64_t heads, std::int64_t head_dim);

}  // namespace mds::ckpt
