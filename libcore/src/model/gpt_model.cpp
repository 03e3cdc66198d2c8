#include "mds/model/gpt_model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/SDPBackend.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <tuple>

#include "mds/model/fused_cross_entropy.h"
#include "mds/model/fused_layer_norm.h"
#include "mds/model/fused_linear.h"
#include "mds/util/error.h"
#include "recompute.h"

namespace mds::model {
namespace {

c10::ScalarType scalar_type(Precision p) {
    switch (p) {
    case Precision::FP16: return at::kHalf;
    case Precision::BF16: return at::kBFloat16;
    case Precision::FP32: break;
    }
    return at::kFloat;
}

}  // namespace

at::Tensor mlp_activation(const at::Tensor& x, Activation activation, Glu glu) {
    if (glu != Glu::None) {
        // glu_activations.py: x1, x2 = x.chunk(2, dim=-1); x1 * act(x2). GeGLU's act is F.gelu (erf).
        const auto halves = x.chunk(2, -1);
        const at::Tensor& x1 = halves[0];
        const at::Tensor& x2 = halves[1];
        switch (glu) {
        case Glu::GeGLU: return x1 * at::gelu(x2);
        case Glu::ReGLU: return x1 * at::relu(x2);
        case Glu::SwiGLU: return x1 * at::silu(x2);
        case Glu::LiGLU:
        case Glu::None: break;
        }
        return x1 * x2;
    }
    switch (activation) {
    case Activation::Gelu: return at::gelu(x);
    case Activation::OpenAiGelu:  // megatron/model/utils.py gelu_impl, written out as it is (autograd through it)
        return 0.5 * x * (1.0 + at::tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)));
    case Activation::ErfGelu:  // megatron/model/utils.py erf_gelu, with its 1.41421
        return x * 0.5 * (at::erf(x / 1.41421) + 1.0);
    case Activation::FusedGelu: break;
    }
    return at::gelu(x, "tanh");  // fused_bias_gelu.py: the tanh approximation and its exact derivative
}

std::string Parameter::full_name() const {
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%02d.", layer);
    return prefix + name;
}

at::Tensor GptModel::add(int layer, const std::string& name, at::Tensor value, TpSplit split, bool weight_decay) {
    // Only this pipeline stage's layers; the last stage also holds the tied word embeddings.
    bool held = false, tied_copy = false;
    if (layer == kEmbeddingLayer) {
        held = stage_.first();
        if (!held && stage_.last() && name == "word_embeddings.weight") held = tied_copy = true;
    } else if (layer == final_norm_layer_index(config_.num_layers)) {
        held = stage_.last();
    } else {
        const std::int64_t block = layer - transformer_layer_index(0);
        held = block >= stage_.first_block && block < stage_.end_block;
    }
    if (!held) return {};
    // This rank's shard of the full tensor (initialized whole, as on one process).
    if (tp_.size > 1 && split != TpSplit::Replicated) {
        const int dim = split == TpSplit::ColumnParallel ? 0 : 1;
        const auto part = value.size(dim) / tp_.size;
        value = value.narrow(dim, tp_.rank * part, part).contiguous();
    }
    at::Tensor t = value.to(device_, scalar_type(config_.precision)).detach().requires_grad_(true);
    params_.push_back({layer, name, t, split, weight_decay, tied_copy, {}});
    return t;
}

c10::intrusive_ptr<MainGradSink> GptModel::main_grad_sink(const at::Tensor& w) {
    if (!config_.gradient_accumulation_fusion || !w.defined()) return {};
    for (auto& p : params_)
        if (p.tensor.unsafeGetTensorImpl() == w.unsafeGetTensorImpl()) return p.main_grad = c10::make_intrusive<MainGradSink>();
    throw Error("internal: a Linear weight that is not among the model's parameters");
}

GptModel::GptModel(const GptConfig& config, c10::Device device, std::uint64_t seed, TensorParallel tp, PipelineStage stage)
    : config_(config), device_(device), tp_(std::move(tp)), stage_(stage) {
    config_.validate();
    const auto h = config_.hidden_size, f = config_.ffn_hidden_size, L = config_.num_layers;
    const auto proj = config_.projection_size(), f_rows = config_.ffn_rows();
    if (stage_.end_block < 0) stage_.end_block = L;
    if (stage_.size < 1 || stage_.rank < 0 || stage_.rank >= stage_.size || stage_.first_block < 0 ||
        stage_.first_block > stage_.end_block || stage_.end_block > L || (stage_.size == 1 && (stage_.first_block != 0 || stage_.end_block != L)))
        throw Error("pipeline stage " + std::to_string(stage_.rank) + " of " + std::to_string(stage_.size) + " with blocks [" +
                    std::to_string(stage_.first_block) + ", " + std::to_string(stage_.end_block) + ") of a " + std::to_string(L) +
                    "-layer model");
    const std::int64_t t = tp_.size;
    if (t < 1 || tp_.rank < 0 || tp_.rank >= t) throw Error("tensor-parallel rank " + std::to_string(tp_.rank) + " of " + std::to_string(t));
    if (t > 1) {
        if (!tp_.all_reduce_sum || !tp_.all_reduce_max) throw Error("tensor parallelism needs the group's reductions");
        for (const auto& [what, n] : {std::pair<const char*, std::int64_t>{"--num-attention-heads", config_.num_attention_heads},
                                      {"--ffn-hidden-size", f},
                                      {"the padded vocabulary", config_.padded_vocab_size}})
            if (n % t != 0)
                throw Error(std::string(what) + " " + std::to_string(n) + " is not divisible by --tensor-model-parallel-size " +
                            std::to_string(t));
    }
    if (config_.gelu_epilogue_fusion && t > 1)
        throw UsageError("--gelu-epilogue-fusion: not with --tensor-model-parallel-size " + std::to_string(t) +
                         " (the MLP's second product is summed over the ranks before its bias)");
    if (config_.cross_entropy_fusion && t > 1)
        throw UsageError("--cross-entropy-loss-fusion: not with --tensor-model-parallel-size " + std::to_string(t) +
                         " (the vocabulary-parallel cross entropy sums over the ranks' shards)");
    // A fusion that cannot run here: its flag's error, before any weight is made.
    const auto dtype = scalar_type(config_.precision);
    const auto refuse = [](bool on, const char* flag, const std::string& why) {
        if (on && !why.empty()) throw UsageError(std::string(flag) + ": " + why);
    };
    refuse(config_.cross_entropy_fusion, "--cross-entropy-loss-fusion", fused_cross_entropy_unsupported(device_, dtype));
    refuse(config_.layernorm_backward_fusion, "--layernorm-backward-fusion", fused_layer_norm_unsupported(device_, dtype));
    refuse(config_.bias_grad_fusion, "--bias-grad-fusion", fused_linear_unsupported(device_, dtype));
    refuse(config_.residual_layernorm_fusion, "--residual-layernorm-fusion", fused_layer_norm_unsupported(device_, dtype));
    refuse(config_.gradient_accumulation_fusion, "--gradient-accumulation-fusion",
           gradient_accumulation_fusion_unsupported(device_, dtype));
    refuse(config_.gelu_epilogue_fusion, "--gelu-epilogue-fusion", gelu_epilogue_fusion_unsupported(device_, dtype));
    local_heads_ = config_.num_attention_heads / t;
    local_vocab_ = config_.padded_vocab_size / t;
    vocab_start_ = tp_.rank * local_vocab_;
    auto gen = at::detail::createCPUGenerator(seed);
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    const double std = config_.init_method_std;
    const double out_std = std / std::sqrt(2.0 * static_cast<double>(L));  // scaled_init_method_normal
    auto normal = [&](std::vector<std::int64_t> shape, double sd) { return at::empty(shape, f32).normal_(0.0, sd, gen); };
    auto zeros = [&](std::int64_t n) { return at::zeros({n}, f32); };
    auto ones = [&](std::int64_t n) { return at::ones({n}, f32); };

    word_embeddings_ = add(kEmbeddingLayer, "word_embeddings.weight", normal({config_.padded_vocab_size, h}, std), TpSplit::ColumnParallel, true);
    if (config_.embed_layernorm) {
        embed_ln_w_ = add(kEmbeddingLayer, "word_embeddings.norm.weight", ones(h), TpSplit::Replicated, false);
        embed_ln_b_ = add(kEmbeddingLayer, "word_embeddings.norm.bias", zeros(h), TpSplit::Replicated, false);
    }
    if (config_.position_embedding == PositionEmbedding::Absolute)
        position_embeddings_ = add(kEmbeddingLayer, "position_embeddings.weight", normal({config_.max_position_embeddings, h}, std),
                                   TpSplit::Replicated, true);
    for (std::int64_t i = 0; i < L; ++i) {
        const int layer = transformer_layer_index(i);
        Block b;
        b.ln1_w = add(layer, "input_layernorm.weight", ones(h), TpSplit::Replicated, false);
        b.ln1_b = add(layer, "input_layernorm.bias", zeros(h), TpSplit::Replicated, false);
        b.qkv_w = add(layer, "self_attention.query_key_value.weight", normal({3 * proj, h}, std), TpSplit::ColumnParallel, true);
        b.qkv_b = add(layer, "self_attention.query_key_value.bias", zeros(3 * proj), TpSplit::ColumnParallel, false);
        b.dense_w = add(layer, "self_attention.dense.weight", normal({h, proj}, out_std), TpSplit::RowParallel, true);
        b.dense_b = add(layer, "self_attention.dense.bias", zeros(h), TpSplit::Replicated, false);
        b.ln2_w = add(layer, "post_attention_layernorm.weight", ones(h), TpSplit::Replicated, false);
        b.ln2_b = add(layer, "post_attention_layernorm.bias", zeros(h), TpSplit::Replicated, false);
        // With a GLU, rank r's rows r·2f/T … of the whole tensor, as Megatron's CPU initialization
        // (_initialize_affine_weight_cpu) cuts them: that rank's [x1; x2].
        b.fc1_w = add(layer, "mlp.dense_h_to_4h.weight", normal({f_rows, h}, std), TpSplit::ColumnParallel, true);
        b.fc1_b = add(layer, "mlp.dense_h_to_4h.bias", zeros(f_rows), TpSplit::ColumnParallel, false);
        b.fc2_w = add(layer, "mlp.dense_4h_to_h.weight", normal({h, f}, out_std), TpSplit::RowParallel, true);
        b.fc2_b = add(layer, "mlp.dense_4h_to_h.bias", zeros(h), TpSplit::Replicated, false);
        b.qkv_sink = main_grad_sink(b.qkv_w);
        b.fc1_sink = main_grad_sink(b.fc1_w);
        if (t == 1) {
            b.dense_sink = main_grad_sink(b.dense_w);
            b.fc2_sink = main_grad_sink(b.fc2_w);
        }
        blocks_.push_back(std::move(b));
    }
    const int last = final_norm_layer_index(L);
    final_ln_w_ = add(last, "weight", ones(h), TpSplit::Replicated, false);
    final_ln_b_ = add(last, "bias", zeros(h), TpSplit::Replicated, false);

    if (config_.position_embedding == PositionEmbedding::Alibi) {
        const auto slopes = alibi_slopes(config_.num_attention_heads);
        alibi_slopes_ = at::tensor(std::vector<double>(slopes.begin(), slopes.end()), at::TensorOptions().dtype(at::kDouble))
                            .narrow(0, tp_.rank * local_heads_, local_heads_)
                            .to(device_, at::kFloat);
    }
    // Megatron's _set_random_seed and model_parallel_cuda_manual_seed.
    const std::uint64_t stage_seed = seed + 100 * static_cast<std::uint64_t>(stage_.rank);
    if (device_.is_cuda()) {
        dropout_gen_ = attention_gen_ = at::globalContext().defaultGenerator(device_);
    } else {
        dropout_gen_ = at::detail::createCPUGenerator(stage_seed);
        attention_gen_ = at::detail::createCPUGenerator(stage_seed + 2718 + static_cast<std::uint64_t>(tp_.rank));
    }
}

Parameter& GptModel::parameter(int layer, const std::string& name) {
    for (auto& p : params_)
        if (p.layer == layer && p.name == name) return p;
    char buf[16];
    std::snprintf(buf, sizeof buf, "%02d", layer);
    throw Error(std::string("the model has no parameter \"") + name + "\" in layer_" + buf);
}

std::int64_t GptModel::parameter_count() const {
    std::int64_t n = 0;
    for (const auto& p : params_) n += p.tensor.numel();
    return n;
}

// The additive attention bias: for ALiBi slope_h × key position, and -inf above the diagonal;
// with segment ids also -inf between positions of different segments (each row keeps at least its
// own position, so no softmax row is empty). Adding slope × (key position) instead of slope × (key −
// query) is what Megatron and HF BLOOM do: softmax is invariant to a per-row constant, so within a
// packed example it equals the example's own ALiBi. Undefined for absolute positions without segments
// (SDPA's own causal mask is used).
at::Tensor GptModel::attention_bias(std::int64_t seq, c10::ScalarType dtype, const at::Tensor& segment_ids) {
    const bool alibi = config_.position_embedding == PositionEmbedding::Alibi;
    if (!alibi && !segment_ids.defined()) return {};
    const auto opts = at::TensorOptions().device(device_).dtype(at::kFloat);
    auto blocked = at::ones({1, 1, seq, seq}, opts.dtype(at::kBool)).triu(1);  // [1, 1, s, s]
    if (segment_ids.defined()) {
        if (segment_ids.dim() != 2 || segment_ids.size(1) != seq) throw Error("segment ids must be [batch, seq] as the tokens");
        const auto seg = segment_ids.to(device_, at::kLong);
        blocked = blocked.logical_or(seg.unsqueeze(2).ne(seg.unsqueeze(1)).unsqueeze(1));  // [b, 1, s, s]
    }
    auto bias = at::zeros({1, 1, seq, seq}, opts);
    if (alibi) {
        auto pos = at::arange(seq, opts);
        bias = (alibi_slopes_.view({-1, 1, 1}) * pos.view({1, 1, seq})).expand({local_heads_, seq, seq}).unsqueeze(0);  // [1, n, s, s]
    }
    // Megatron keeps alibi in the model dtype.
    return bias.masked_fill(blocked, -std::numeric_limits<float>::infinity()).to(dtype);
}

std::string GptModel::attention_kernel(std::int64_t batch, std::int64_t seq, bool segments) const {
    const double p = config_.attention_dropout;
    const bool alibi = config_.position_embedding == PositionEmbedding::Alibi;
    const std::string mask = segments ? (alibi ? "ALiBi and packed-example bias" : "packed-example bias")
                             : alibi  ? "ALiBi bias"
                                      : "causal";
    if (p > 0 && !device_.is_cuda())
        return "unfused (" + mask + ", attention dropout on a CPU: scores and probabilities in memory)";
    // The q, k, v views and the bias block_forward gives SDPA; only their shapes, strides and dtype count.
    const auto opts = at::TensorOptions().device(device_).dtype(scalar_type(config_.precision));
    const auto qkv = at::empty({batch, seq, local_heads_, 3, config_.head_dim()}, opts).unbind(3);
    const auto q = qkv[0].transpose(1, 2), k = qkv[1].transpose(1, 2), v = qkv[2].transpose(1, 2);
    std::optional<at::Tensor> bias;
    if (alibi || segments) bias = at::empty({segments ? batch : 1, alibi ? local_heads_ : 1, seq, seq}, opts);
    const std::string with = " (SDPA, " + mask + ")";
    at::SDPBackend choice = at::SDPBackend::error;
    try {
        choice = static_cast<at::SDPBackend>(at::_fused_sdp_choice(q, k, v, bias, p, /*is_causal=*/!bias));
    } catch (const c10::Error& e) {  // no kernel left that takes these inputs (--attention-backend)
        const std::string why = e.what_without_backtrace();
        return "none: SDPA refuses these inputs" + with + ": " + why.substr(0, why.find('\n'));
    }
    switch (choice) {
        case at::SDPBackend::flash_attention: return "flash attention" + with;
        case at::SDPBackend::efficient_attention: return "memory-efficient attention" + with;
        case at::SDPBackend::cudnn_attention: return "cuDNN attention" + with;
        case at::SDPBackend::math: return "unfused math path" + with + ": scores and probabilities in memory";
        case at::SDPBackend::overrideable: return "a device-specific kernel" + with;
        default: return "none: SDPA refuses these inputs" + with;
    }
}

at::Tensor GptModel::reduce_from_tp(const at::Tensor& x) const {
    if (tp_.size == 1) return x;
    auto sum = x.detach().contiguous().clone();
    tp_.all_reduce_sum(sum);
    return sum + (x - x.detach());  // the value of the sum, exactly; the gradient of x, unchanged
}

at::Tensor GptModel::layer_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps) const {
    if (x.scalar_type() == w.scalar_type()) {
        if (config_.layernorm_backward_fusion) return fused_layer_norm(x, w, b, eps);
        return at::layer_norm(x, {config_.hidden_size}, w, b, eps);
    }
    // fp32 hidden states with half-precision weights (--fp32-residual-connection): Megatron's mixed
    // LayerNorm kernel computes in fp32 and writes the weights' dtype.
    return at::layer_norm(x.to(at::kFloat), {config_.hidden_size}, w.to(at::kFloat), b.to(at::kFloat), eps).to(w.scalar_type());
}

at::Tensor GptModel::copy_to_tp(const at::Tensor& x) const {
    if (tp_.size == 1) return x;
    auto y = x.view_as(x);
    sum_grad_over_tp(y);
    return y;
}

void GptModel::sum_grad_over_tp(at::Tensor& x) const {
    if (tp_.size == 1 || !x.requires_grad()) return;
    const auto reduce = tp_.all_reduce_sum;
    x.register_hook([reduce](const at::Tensor& grad) {
        auto g = grad.contiguous().clone();
        reduce(g);
        return g;
    });
}

std::pair<at::Tensor, at::Tensor> GptModel::residual_layer_norm(const at::Tensor& base, const at::Tensor& delta,
                                                                 const at::Tensor& w, const at::Tensor& b) const {
    const double eps = config_.layernorm_epsilon;
    if (!delta.defined()) return {base, layer_norm(base, w, b, eps)};
    if (config_.residual_layernorm_fusion && base.scalar_type() == w.scalar_type() && delta.scalar_type() == w.scalar_type())
        return fused_residual_layer_norm(base, delta, w, b, eps);
    auto sum = base + delta;
    return {sum, layer_norm(sum, w, b, eps)};
}

at::Tensor GptModel::block_forward(std::int64_t i, const at::Tensor& x, const at::Tensor& attn_bias) {
    const Block& b = blocks_[static_cast<std::size_t>(i)];
    const auto [base, delta] = block_terms(i, x, layer_norm(x, b.ln1_w, b.ln1_b, config_.layernorm_epsilon), attn_bias);
    return base + delta;
}

std::pair<at::Tensor, at::Tensor> GptModel::block_terms(std::int64_t i, const at::Tensor& x, at::Tensor ln,
                                                        const at::Tensor& attn_bias) {
    const Block& b = blocks_[static_cast<std::size_t>(i)];
    const auto n = local_heads_, d = config_.head_dim();
    const auto batch = x.size(0), seq = x.size(1);
    const bool post_ln = config_.residual_post_layernorm;
    // A Linear with its bias: --bias-grad-fusion's bias gradient and --gradient-accumulation-fusion's weight gradient
    // where the input has the weights' dtype.
    const auto linear = [&](const at::Tensor& in, const at::Tensor& w, const at::Tensor& bias,
                            const c10::intrusive_ptr<MainGradSink>& sink) {
        if (in.scalar_type() != w.scalar_type() || !(config_.bias_grad_fusion || sink)) return at::linear(in, w, bias);
        return fused_linear(in, w, bias, {config_.bias_grad_fusion, sink});
    };

    // Megatron's [n, 3, d] per token. unbind, not three selects: its backward stacks dq, dk, dv into one tensor in
    // one copy, where each select's backward fills a zero tensor of the whole QKV size and autograd adds the three.
    const auto qkv = linear(copy_to_tp(ln), b.qkv_w, b.qkv_b, b.qkv_sink).view({batch, seq, n, 3, d}).unbind(3);
    auto q = qkv[0].transpose(1, 2);  // [b, n, s, d]
    auto k = qkv[1].transpose(1, 2);
    auto v = qkv[2].transpose(1, 2);
    const double p_attn = training_ ? config_.attention_dropout : 0.0;
    auto ctx = p_attn > 0 && !device_.is_cuda() ? attention_with_dropout(q, k, v, attn_bias, p_attn)
               : attn_bias.defined() ? at::scaled_dot_product_attention(q, k, v, attn_bias, p_attn, /*is_causal=*/false)
                                     : at::scaled_dot_product_attention(q, k, v, {}, p_attn, /*is_causal=*/true);
    ctx = ctx.transpose(1, 2).reshape({batch, seq, n * d});
    // Row-parallel: the partial products are summed over the group, then the (replicated) bias.
    auto attn = tp_.size == 1 ? linear(ctx, b.dense_w, b.dense_b, b.dense_sink) : reduce_from_tp(at::linear(ctx, b.dense_w)) + b.dense_b;
    at::Tensor y;
    std::tie(y, ln) = residual_layer_norm(post_ln ? ln : x, dropout(attn, config_.hidden_dropout, /*seq_first=*/true),
                                          b.ln2_w, b.ln2_b);
    at::Tensor out;
    if (config_.gelu_epilogue_fusion && ln.scalar_type() == b.fc1_w.scalar_type()) {  // one rank (the constructor checks)
        out = fused_gelu_mlp(ln, b.fc1_w, b.fc1_b, b.fc2_w, b.fc2_b, {config_.bias_grad_fusion, b.fc1_sink, b.fc2_sink});
    } else {
        auto m = mlp_activation(linear(copy_to_tp(ln), b.fc1_w, b.fc1_b, b.fc1_sink), config_.activation, config_.glu);
        out = tp_.size == 1 ? linear(m, b.fc2_w, b.fc2_b, b.fc2_sink) : reduce_from_tp(at::linear(m, b.fc2_w)) + b.fc2_b;
    }
    return {post_ln ? ln : y, dropout(out, config_.hidden_dropout, /*seq_first=*/true)};
}

at::Tensor GptModel::dropout(const at::Tensor& x, double p, bool seq_first) const {
    if (!training_ || p <= 0 || x.numel() == 0) return x;
    if (device_.is_cuda()) return at::dropout(x, p, true);
    // torch's CPU dropout (_dropout_impl): a Bernoulli(1 - p) mask in the input's dtype, divided by
    // 1 - p, times the input; drawn here from the model's generator, in Megatron's layout.
    auto noise = seq_first ? at::empty({x.size(1), x.size(0), x.size(2)}, x.options())
                           : at::empty(x.sizes(), x.options());
    noise.bernoulli_(1 - p, dropout_gen_);
    noise.div_(1 - p);
    return x * (seq_first ? noise.transpose(0, 1) : noise);
}

at::Tensor GptModel::attention_with_dropout(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& attn_bias, double p) const {
    // q, k, v [b, n, s, d]. Scores and softmax in fp32 (Megatron's attention_softmax_in_fp32 with
    // query-key layer scaling), probabilities back in the model dtype, as the fused kernel returns them.
    const auto seq = q.size(2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    auto scores = at::matmul(q, k.transpose(-2, -1)).to(at::kFloat).mul_(scale);
    if (attn_bias.defined()) {
        scores = scores + attn_bias.to(at::kFloat);
    } else {
        auto future = at::ones({seq, seq}, scores.options().dtype(at::kBool)).triu(1);
        scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    }
    auto probs = at::softmax(scores, -1).to(q.scalar_type());
    // Megatron: `with get_cuda_rng_tracker().fork(): attention_dropout(attention_probs)` on [b, n, s, s].
    auto noise = at::empty(probs.sizes(), probs.options());
    noise.bernoulli_(1 - p, attention_gen_);
    noise.div_(1 - p);
    return at::matmul(probs * noise, v);
}

at::Tensor GptModel::embed(const at::Tensor& tokens, const at::Tensor& position_ids) {
    if (tokens.dim() != 2) throw Error("tokens must be [batch, seq]");
    if (position_ids.defined() && position_ids.sizes() != tokens.sizes())
        throw Error("position ids must be [batch, seq] as the tokens");
    const auto seq = tokens.size(1);
    if (config_.position_embedding == PositionEmbedding::Absolute && seq > config_.max_position_embeddings)
        throw Error("sequence of " + std::to_string(seq) + " tokens exceeds --max-position-embeddings " +
                    std::to_string(config_.max_position_embeddings));
    at::Tensor x;
    if (tp_.size == 1) {
        x = at::embedding(word_embeddings_, tokens);
    } else {
        // Vocab-parallel: this rank embeds the tokens of its vocabulary rows, zeros elsewhere, summed.
        const auto outside = tokens.lt(vocab_start_).logical_or(tokens.ge(vocab_start_ + local_vocab_));
        const auto local = (tokens - vocab_start_).masked_fill(outside, 0);
        x = reduce_from_tp(at::embedding(word_embeddings_, local).masked_fill(outside.unsqueeze(-1), 0));
    }
    // Megatron-DeepSpeed's VocabParallelEmbedding builds this LayerNorm with its default eps (1e-5),
    // whatever --layernorm-epsilon says.
    if (config_.embed_layernorm) x = at::layer_norm(x, {config_.hidden_size}, embed_ln_w_, embed_ln_b_, 1e-5);
    if (position_embeddings_.defined()) {
        if (position_ids.defined()) {
            x = x + at::embedding(position_embeddings_, position_ids.to(device_, at::kLong));
        } else {
            // Positions 0 … seq-1: the table's first rows, as the embedding of arange(seq) gives them; their backward
            // is a copy into those rows, where the embedding's sorts its indices first (several kernels on a GPU).
            x = x + position_embeddings_.narrow(0, 0, seq).unsqueeze(0);
        }
    }
    x = dropout(x, config_.hidden_dropout, /*seq_first=*/false);  // Megatron: on [b, s, h], before the transpose
    return config_.fp32_residual ? x.to(at::kFloat) : x;  // GPTModelPipe: .float() after the embedding
}

std::pair<at::Tensor, at::Tensor> GptModel::run_blocks(at::Tensor x, const at::Tensor& segment_ids) {
    if (x.dim() != 3 || x.size(2) != config_.hidden_size) throw Error("hidden states must be [batch, seq, hidden]");
    const auto bias = attention_bias(x.size(1), scalar_type(config_.precision), segment_ids);
    const bool recompute = config_.checkpoint_activations && c10::GradMode::is_enabled();
    // The hidden states are base + delta (delta undefined: base alone): each block's last residual sum is left to
    // the next block's input_layernorm (or the final LayerNorm), which --residual-layernorm-fusion computes with it.
    at::Tensor base = std::move(x), delta;
    for (std::int64_t i = stage_.first_block; i < stage_.end_block;) {
        if (recompute) {  // a recomputed group takes and gives whole hidden states
            const auto count = std::min(config_.checkpoint_num_layers, stage_.end_block - i);
            base = recomputed_blocks(*this, i, count, delta.defined() ? base + delta : base, bias);
            delta = at::Tensor();
            i += count;
        } else {
            const Block& b = blocks_[static_cast<std::size_t>(i)];
            const auto [input, ln] = residual_layer_norm(base, delta, b.ln1_w, b.ln1_b);
            std::tie(base, delta) = block_terms(i, input, ln, bias);
            ++i;
        }
    }
    return {base, delta};
}

at::Tensor GptModel::final_norm(const std::pair<at::Tensor, at::Tensor>& x) {
    auto out = residual_layer_norm(x.first, x.second, final_ln_w_, final_ln_b_).second;
    sum_grad_over_tp(out);  // the input of the (vocab-parallel) output projection
    return out;
}

at::Tensor GptModel::hidden_states(const at::Tensor& tokens, const at::Tensor& position_ids, const at::Tensor& segment_ids) {
    if (stage_.size > 1) throw Error("hidden_states() needs the whole model; a pipeline stage runs stage_forward()");
    return final_norm(run_blocks(embed(tokens, position_ids), segment_ids));
}

at::Tensor GptModel::stage_forward(const at::Tensor& input, const at::Tensor& labels, const at::Tensor& loss_mask,
                                   const at::Tensor& position_ids, const at::Tensor& segment_ids) {
    auto x = run_blocks(stage_.first() ? embed(input, position_ids) : input, segment_ids);
    if (stage_.last()) return loss_from_hidden(final_norm(x), labels, loss_mask);
    return x.second.defined() ? x.first + x.second : x.first;  // the hidden states sent to the next stage
}

// With tensor parallelism: this rank's vocabulary shard of the logits.
at::Tensor GptModel::logits(const at::Tensor& tokens, const at::Tensor& position_ids, const at::Tensor& segment_ids) {
    return at::linear(hidden_states(tokens, position_ids, segment_ids), word_embeddings_);
}

at::Tensor GptModel::loss(const at::Tensor& tokens, const at::Tensor& labels, const at::Tensor& loss_mask,
                          const at::Tensor& position_ids, const at::Tensor& segment_ids) {
    return loss_from_hidden(hidden_states(tokens, position_ids, segment_ids), labels, loss_mask);
}

at::Tensor GptModel::loss_from_hidden(const at::Tensor& hidden, const at::Tensor& labels, const at::Tensor& loss_mask) {
    // Megatron computes the cross entropy on fp32 logits (fp16_lm_cross_entropy is off by default).
    const auto half_logit = at::linear(hidden, word_embeddings_);
    const auto vocab = half_logit.size(-1);
    const auto lab = labels.reshape({-1});
    at::Tensor losses;  // per token, fp32
    if (tp_.size > 1) {
        // Megatron's vocab_parallel_cross_entropy: the max, the sum of exponentials and the target's
        // logit over the shards; the gradient is softmax - one-hot on each shard.
        auto z = half_logit.to(at::kFloat).view({-1, vocab});
        auto max = std::get<0>(z.detach().max(-1)).contiguous();
        tp_.all_reduce_max(max);
        z = z - max.unsqueeze(-1);
        auto sum_exp = reduce_from_tp(z.exp().sum(-1));
        const auto outside = lab.lt(vocab_start_).logical_or(lab.ge(vocab_start_ + vocab));
        const auto local = (lab - vocab_start_).masked_fill(outside, 0);
        auto target = reduce_from_tp(z.gather(1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0));
        losses = sum_exp.log() - target;
        if (!loss_mask.defined()) return losses.mean();
    } else if (config_.cross_entropy_fusion) {
        losses = fused_cross_entropy(half_logit.view({-1, vocab}), lab);
        if (!loss_mask.defined()) return losses.mean();
    } else if (device_.is_cuda() && half_logit.scalar_type() == at::kHalf) {
        // The same function without the fp32 copy of the logits: CUDA's log-softmax reads the fp16 logits,
        // computes in fp32 and writes fp32; its backward writes the logits' gradient in fp16 (what the cast's
        // backward did). Less memory traffic on the step's largest tensors. (LibTorch 2.11 converts fp16
        // only: "conversion is supported for Half type only" for bf16, seen on an H200.)
        const auto logp = at::_log_softmax(half_logit.view({-1, vocab}), -1, /*half_to_float=*/true);
        if (!loss_mask.defined()) return at::nll_loss(logp, lab);
        losses = at::nll_loss(logp, lab, {}, at::Reduction::None);
    } else {
        const auto logit = half_logit.to(at::kFloat).view({-1, vocab});
        // Without a mask, the fused mean reduction: ~15% faster per step on CPU than per-token losses + mean.
        if (!loss_mask.defined()) return at::cross_entropy_loss(logit, lab);
        losses = at::cross_entropy_loss(logit, lab, {}, at::Reduction::None);
    }
    const auto mask = loss_mask.reshape({-1}).to(at::kFloat);
    return (losses * mask).sum() / mask.sum();
}

}  // namespace mds::model
