// The shape and numerics of a Megatron GPT / BLOOM model, independent of how it is trained.
// Built from mds-train's flags (train/train_args.h) with Megatron's derived values filled in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mds::model {

enum class PositionEmbedding { Absolute, Alibi };
enum class Precision { FP32, FP16, BF16 };

// The MLP's activation, as Megatron-DeepSpeed's ParallelMLP picks it (megatron/model/transformer.py):
// with bias_gelu_fusion (the default) the fused bias GeLU, whatever else is set; otherwise a GLU when
// --glu-activation is given, else --openai-gelu, else --onnx-safe, else torch's exact GeLU.
enum class Activation {
    FusedGelu,   // bias_gelu_impl: the tanh approximation (default)
    Gelu,        // --no-bias-gelu-fusion: F.gelu, the exact erf form
    OpenAiGelu,  // --openai-gelu: 0.5x(1 + tanh(0.7978845608028654·x·(1 + 0.044715x²)))
    ErfGelu,     // --onnx-safe: x·0.5·(erf(x / 1.41421) + 1) (Megatron's constant, not √2)
};
// --glu-activation: dense_h_to_4h outputs 2 × ffn_hidden_size; each tensor-parallel rank chunks its
// own output in halves x1, x2 and computes x1 · act(x2) (glu_activations.py).
enum class Glu { None, GeGLU, LiGLU, ReGLU, SwiGLU };

const char* precision_name(Precision p);  // "fp32", "fp16", "bf16"
// "geglu", "liglu", "reglu", "swiglu" (Megatron's names) ↔ Glu; glu_from_name throws mds::UsageError
// naming --glu-activation and its choices.
Glu glu_from_name(const std::string& name);
const char* glu_name(Glu g);  // "" for Glu::None

struct GptConfig {
    std::int64_t num_layers = 0;
    std::int64_t hidden_size = 0;
    std::int64_t ffn_hidden_size = 0;          // Megatron default 4 × hidden
    std::int64_t num_attention_heads = 0;
    std::int64_t kv_channels = 0;              // --kv-channels: the head size; 0: hidden / heads (Megatron's default)
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
    Activation activation = Activation::FusedGelu;
    Glu glu = Glu::None;
    bool residual_post_layernorm = false;      // --apply-residual-connection-post-layernorm
    // --fp32-residual-connection (fp16 / bf16 only): the hidden states between the blocks, and so the
    // residual sums, are fp32; LayerNorms take them in fp32 and return the model dtype (Megatron's
    // mixed-precision LayerNorm kernel).
    bool fp32_residual = false;
    // --cross-entropy-loss-fusion: the loss through model/fused_cross_entropy.h (fp32 or bf16, one tensor-parallel
    // rank) instead of ATen's fp32 copy of the logits and its cross entropy.
    bool cross_entropy_fusion = false;
    // --layernorm-backward-fusion: the blocks' and the final LayerNorms through model/fused_layer_norm.h (fp32 or
    // bf16; a LayerNorm whose input is fp32 under bf16 weights, --fp32-residual-connection, stays ATen's).
    bool layernorm_backward_fusion = false;
    // --bias-grad-fusion: the blocks' Linear layers with a bias through model/fused_linear.h (fp32 or bf16): the
    // bias's gradient from kernels/bias_grad.h instead of autograd's sum over the rows.
    bool bias_grad_fusion = false;
    // --gradient-accumulation-fusion (bf16): the blocks' Linear weights through model/fused_linear.h, whose backward
    // adds each weight's gradient into the trainer's fp32 main gradient (Parameter::main_grad, main_grad_sink.h).
    bool gradient_accumulation_fusion = false;
    // --residual-layernorm-fusion: each residual sum and the LayerNorm after it (post_attention_layernorm, the next
    // block's input_layernorm, the final one) through model/fused_layer_norm.h's fused_residual_layer_norm (fp32 or
    // bf16; not across activation-recomputation groups, not with --fp32-residual-connection).
    bool residual_layernorm_fusion = false;
    // --gelu-epilogue-fusion: each block's MLP through model/fused_linear.h's fused_gelu_mlp (fp32 or bf16, the fused
    // bias GeLU, one tensor-parallel rank): on a GPU its GeLU and GeLU's derivative inside cuBLASLt's products.
    bool gelu_epilogue_fusion = false;

    std::int64_t head_dim() const { return kv_channels > 0 ? kv_channels : hidden_size / num_attention_heads; }
    // Megatron's projection_size: the width of Q, K, V and of the attention output's input.
    std::int64_t projection_size() const { return head_dim() * num_attention_heads; }
    // Rows of dense_h_to_4h: 2 × ffn_hidden_size with a GLU.
    std::int64_t ffn_rows() const { return glu == Glu::None ? ffn_hidden_size : 2 * ffn_hidden_size; }
    // Throws mds::UsageError naming the Megatron flag when a value is out of range.
    void validate() const;
};

// ALiBi head slopes as Megatron's _build_alibi_tensor (and HF build_alibi_tensor) compute them:
// a geometric sequence for the largest power of two ≤ n, interleaved extra slopes beyond it.
std::vector<double> alibi_slopes(std::int64_t num_heads);

}  // namespace mds::model
