#include "mds/model/gpt_config.h"

#include <cmath>

#include "mds/util/error.h"

namespace mds::model {

const char* precision_name(Precision p) {
    switch (p) {
    case Precision::FP16: return "fp16";
    case Precision::BF16: return "bf16";
    case Precision::FP32: break;
    }
    return "fp32";
}

Glu glu_from_name(const std::string& name) {
    if (name == "geglu") return Glu::GeGLU;
    if (name == "liglu") return Glu::LiGLU;
    if (name == "reglu") return Glu::ReGLU;
    if (name == "swiglu") return Glu::SwiGLU;
    throw UsageError("--glu-activation " + name + ": expected one of geglu, liglu, reglu, swiglu");
}

const char* glu_name(Glu g) {
    switch (g) {
    case Glu::GeGLU: return "geglu";
    case Glu::LiGLU: return "liglu";
    case Glu::ReGLU: return "reglu";
    case Glu::SwiGLU: return "swiglu";
    case Glu::None: break;
    }
    return "";
}

void GptConfig::validate() const {
    auto positive = [](std::int64_t v, const char* flag) {
        if (v <= 0) throw UsageError(std::string(flag) + " must be positive, got " + std::to_string(v));
    };
    positive(num_layers, "--num-layers");
    positive(hidden_size, "--hidden-size");
    positive(ffn_hidden_size, "--ffn-hidden-size");
    positive(num_attention_heads, "--num-attention-heads");
    positive(seq_length, "--seq-length");
    positive(padded_vocab_size, "padded vocabulary size");
    positive(checkpoint_num_layers, "--checkpoint-num-layers");
    if (kv_channels < 0) throw UsageError("--kv-channels must be positive, got " + std::to_string(kv_channels));
    // Megatron asks hidden to divide by the heads only to derive kv_channels.
    if (kv_channels == 0 && hidden_size % num_attention_heads != 0)
        throw UsageError("--hidden-size " + std::to_string(hidden_size) + " is not divisible by --num-attention-heads " +
                         std::to_string(num_attention_heads));
    if (position_embedding == PositionEmbedding::Absolute && max_position_embeddings < seq_length)
        throw UsageError("--max-position-embeddings " + std::to_string(max_position_embeddings) + " is smaller than --seq-length " +
                         std::to_string(seq_length));
    if (glu != Glu::None && activation == Activation::FusedGelu)
        throw UsageError(std::string("--glu-activation ") + glu_name(glu) +
                         " needs --no-bias-gelu-fusion (Megatron-DeepSpeed refuses the fused bias GeLU with a GLU)");
    if (fp32_residual && precision == Precision::FP32)
        throw UsageError("--fp32-residual-connection needs --fp16 or --bf16 (as in Megatron-DeepSpeed)");
    if (cross_entropy_fusion && precision == Precision::FP16)
        throw UsageError("--cross-entropy-loss-fusion takes fp32 or bf16 logits, not --fp16 (whose cross entropy already "
                         "reads the fp16 logits without an fp32 copy on a GPU)");
    if (layernorm_backward_fusion && precision == Precision::FP16)
        throw UsageError("--layernorm-backward-fusion takes fp32 or bf16, not --fp16");
    if (bias_grad_fusion && precision == Precision::FP16) throw UsageError("--bias-grad-fusion takes fp32 or bf16, not --fp16");
    if (residual_layernorm_fusion && precision == Precision::FP16)
        throw UsageError("--residual-layernorm-fusion takes fp32 or bf16, not --fp16");
    if (gelu_epilogue_fusion && precision == Precision::FP16) throw UsageError("--gelu-epilogue-fusion takes fp32 or bf16, not --fp16");
    if (gelu_epilogue_fusion && (activation != Activation::FusedGelu || glu != Glu::None))
        throw UsageError("--gelu-epilogue-fusion fuses the bias GeLU (Megatron's default MLP): not with --glu-activation, "
                         "--no-bias-gelu-fusion or --openai-gelu");
    if (gradient_accumulation_fusion && precision != Precision::BF16)
        throw UsageError("--gradient-accumulation-fusion takes --bf16 (the precision mds keeps fp32 main gradients for), not " +
                         std::string(precision == Precision::FP16 ? "--fp16" : "fp32"));
    if (!(init_method_std > 0)) throw UsageError("--init-method-std must be positive");
    if (hidden_dropout < 0 || hidden_dropout >= 1) throw UsageError("--hidden-dropout must be in [0, 1)");
    if (attention_dropout < 0 || attention_dropout >= 1) throw UsageError("--attention-dropout must be in [0, 1)");
}

std::vector<double> alibi_slopes(std::int64_t num_heads) {
    // For n a power of two: start = 2^(-8/n), slopes = start^1 … start^n. Otherwise the slopes of
    // the largest power of two p2 below n, then every other slope of 2·p2 (odd powers).
    auto power_of_2 = [](std::int64_t n) {
        const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(n)) - 3)));
        std::vector<double> s;
        for (std::int64_t i = 0; i < n; ++i) s.push_back(std::pow(start, static_cast<double>(i + 1)));
        return s;
    };
    if (num_heads <= 0) return {};
    const auto p2 = std::int64_t{1} << static_cast<int>(std::floor(std::log2(static_cast<double>(num_heads))));
    auto slopes = power_of_2(p2);
    if (p2 != num_heads) {
        const auto extra = power_of_2(2 * p2);
        for (std::int64_t k = 0; k < num_heads - p2; ++k) slopes.push_back(extra[static_cast<std::size_t>(2 * k)]);
    }
    return slopes;
}

}  // namespace mds::model
