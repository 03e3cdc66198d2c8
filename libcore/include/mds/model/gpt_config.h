// The shape and numerics of a Megatron GPT / BLOOM model, independent of how it is trained.
// Built from mds-train's flags (train/train_args.h) with Megatron's derived values filled in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mds::model {

enum class PositionEmbedding { Absolute, Alibi };
enum class Precision { FP32, FP16, BF16 };

const char* precision_name(Precision p);  // "fp32", "fp16", "bf16"

struct GptConfig {
    std::int64_t num_layers = 0;
    std::int64_t hidden_size = 0;
    std::int64_t ffn_hidden_size = 0;          // Megatron default 4 × hidden
    std::int64_t num_attention_heads = 0;
    std::int64_t seq_length = 0;
    std::int64_t max_position_embeddings = 0;  // rows of the position table (absolute only)
    std::int64_t padded_vocab_size = 0;        // flags::padded_vocab_size (Megatron's padding)
    double init_method_std = 0.02;             // --init-method-std
    double layernorm_epsilon = 1e-5;
    double hidden_dropout = 0.1;
    double attention_dropout = 0.1;
    PositionEmbedding position_embedding = PositionEmbedding::Absolute;
    bool embed_layernorm = false;              // BLOOM: LayerNorm right after the word embedding
    bool checkpoint_activations = false;       // recompute each chunk of layers in backward
    std::int64_t checkpoint_num_layers = 1;    // layers per recomputed chunk
    Precision precision = Precision::FP32;     // dtype of weights and activations

    std::int64_t head_dim() const { return hidden_size / num_attention_heads; }
    // Throws mds::UsageError naming the Megatron flag when a value is out of range.
    void validate() const;
};

// ALiBi head slopes as Megatron's _build_alibi_tensor (and HF build_alibi_tensor) compute them:
// a geometric sequence for the largest power of two ≤ n, interleaved extra slopes beyond it.
std::vector<double> alibi_slopes(std::int64_t num_heads);

}  // namespace mds::model
