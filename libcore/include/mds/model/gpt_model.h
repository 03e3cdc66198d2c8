// The Megatron GPT model (and its BLOOM options) on LibTorch, written as plain ATen ops over named
// parameter tensors, so that parameter names, shapes and layouts are those of Megatron-DeepSpeed
// checkpoints and the forward pass computes what Megatron computes:
//   embedding:  word_embeddings(tokens) [→ LayerNorm (BLOOM)] [+ position_embeddings(pos)] → dropout
//   L blocks:   x + dropout(dense(attention(qkv(LN(x)))));  x + dropout(4h_to_h(gelu(h_to_4h(LN(x)))))
//   head:       final LayerNorm → logits = x · word_embeddingsᵀ (tied) → fp32 cross entropy
// Fused QKV rows are ordered [heads, 3, head_dim] (checkpoint_version 3.0), head_dim = --kv-channels
// (hidden / heads by default); the MLP's activation is GptConfig::activation / glu (the tanh form of
// Megatron's fused bias_gelu by default); attention is causal with 1/sqrt(head_dim) scaling (Megatron's
// query-key layer scaling cancels out), plus the ALiBi bias for BLOOM. With
// --apply-residual-connection-post-layernorm each residual is the LayerNorm's output, not its input.
// With a GLU the h→4h weight has 2·ffn rows, and each tensor-parallel rank's shard is [its x1 rows;
// its x2 rows] (the rank chunks its own output), as Megatron's per-rank checkpoint files hold them;
// cut from the whole initialized tensor as below, a fresh GLU model's function depends on T (as BMD's).
//
// Parameters are grouped by the DeepSpeed pipeline layer that saves them (layer_01 embedding,
// layer_03 … layer_{L+2} transformer blocks, layer_{L+4} final norm), and carry their tensor-
// parallel split, so that pipeline cuts, TP sharding and checkpoint files all name the same thing.
//
// Tensor parallelism (Megatron's): with a TensorParallel of size T > 1 the model holds rank r's
// shards — rows r·n/T … of column-parallel weights (fused QKV: whole heads; h→4h; the vocabulary of
// the word embeddings), columns of row-parallel weights (attention dense, 4h→h) — cut from the
// full tensors initialized as on one process, so every T starts from the same model. Forward:
// the vocab-parallel embedding and row-parallel outputs are summed over the group (their
// gradients pass through), the inputs of column-parallel layers get their gradients summed over
// the group, and the cross entropy is computed over the vocabulary shards (max, sum of
// exponentials and target logit summed across the group). LayerNorms and row-parallel biases are
// replicated; their gradients are equal on every rank.
//
// Pipeline parallelism (DeepSpeed's PipelineModule as Megatron-DeepSpeed's GPTModelPipe builds it):
// with a PipelineStage the model holds one stage's layers — the embedding (and its LayerNorm) on the
// first stage, transformer blocks [first_block, end_block), the final LayerNorm on the last stage —
// initialized from the same random stream as the whole model. The last stage also holds a copy of
// the word embeddings for the tied output projection (tied_copy: not saved in layer files, not
// counted twice in norms); the trainer keeps the two in step by summing their gradients.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mds/model/gpt_config.h"
#include "mds/model/main_grad_sink.h"

namespace mds::model {

// How Megatron splits a parameter over tensor-parallel ranks (specs/checkpoints.md §4).
enum class TpSplit {
    Replicated,
    ColumnParallel,  // split along dim 0 (output rows): Megatron's ColumnParallelLinear, VocabParallelEmbedding
    RowParallel,     // split along dim 1 (input columns): Megatron's RowParallelLinear
};

struct Parameter {
    int layer = 0;          // DeepSpeed pipeline layer index: 1, 3 … L+2, L+4
    std::string name;       // name inside that layer: "self_attention.query_key_value.weight"
    at::Tensor tensor;      // leaf tensor, requires_grad, in the model's dtype
    TpSplit split = TpSplit::Replicated;
    bool weight_decay = true;  // Megatron: no weight decay for biases and LayerNorm parameters
    bool tied_copy = false;    // the last pipeline stage's copy of the word embeddings (first stage owns them)
    // --gradient-accumulation-fusion: where this weight's backward adds into the fp32 main gradient (null: it does not).
    c10::intrusive_ptr<MainGradSink> main_grad;
    std::string full_name() const;  // "03.self_attention.query_key_value.weight"
};

// Pipeline layer indices of the DeepSpeed layout for `num_layers` transformer blocks.
constexpr int kEmbeddingLayer = 1;
inline int transformer_layer_index(std::int64_t block) { return static_cast<int>(block) + 3; }
inline int final_norm_layer_index(std::int64_t num_layers) { return static_cast<int>(num_layers) + 4; }

// The tensor-parallel group a model shard belongs to: its rank and size, and in-place reductions
// over the group (a trainer::Communicator's).
struct TensorParallel {
    int rank = 0;
    int size = 1;
    std::function<void(at::Tensor&)> all_reduce_sum;
    std::function<void(at::Tensor&)> all_reduce_max;
};

// The pipeline stage a model holds: stage `rank` of `size`, transformer blocks
// [first_block, end_block) (end_block -1: through the last block).
struct PipelineStage {
    int rank = 0;
    int size = 1;
    std::int64_t first_block = 0;
    std::int64_t end_block = -1;
    bool first() const { return rank == 0; }
    bool last() const { return rank == size - 1; }
};

// The MLP's activation on dense_h_to_4h's output (bias added) as Megatron-DeepSpeed's ParallelMLP
// computes it; with a GLU, `x`'s last dimension is this rank's 2·ffn/TP and the result has half of it.
at::Tensor mlp_activation(const at::Tensor& x, Activation activation, Glu glu);

class GptModel {
public:
    // Builds and initializes the model as Megatron does: normal(0, init_method_std) for embeddings
    // and input projections, normal(0, std / sqrt(2 × num_layers)) for the two output projections
    // of each block, zero biases, LayerNorm weight 1 and bias 0. Initialization runs on the CPU in
    // fp32 from `seed`, so a model is the same on every device and precision.
    // `tp`: this model's shard of a tensor-parallel group (throws mds::Error when heads, FFN or the
    // padded vocabulary do not divide by its size).
    // `stage`: the pipeline stage to hold (throws mds::Error on blocks outside the model).
    GptModel(const GptConfig& config, c10::Device device, std::uint64_t seed, TensorParallel tp = {}, PipelineStage stage = {});
    const TensorParallel& tensor_parallel() const { return tp_; }
    const PipelineStage& pipeline_stage() const { return stage_; }

    const GptConfig& config() const { return config_; }
    c10::Device device() const { return device_; }
    std::vector<Parameter>& parameters() { return params_; }
    const std::vector<Parameter>& parameters() const { return params_; }
    // The parameter `name` of pipeline layer `layer`; throws mds::Error when absent.
    Parameter& parameter(int layer, const std::string& name);
    std::int64_t parameter_count() const;

    // Dropout on (training) or off (evaluation).
    void set_training(bool training) { training_ = training; }
    bool training() const { return training_; }

    // Dropout's random streams, as Megatron keeps them (mpu/random.py): the device's default
    // generator (embedding and hidden dropout; checkpoints' cuda_rng_state) and the tensor-parallel
    // tracker's 'model-parallel-rng' (attention dropout; rng_tracker_states), seeded as
    // _set_random_seed does: seed + 100 × pipeline rank, and that + 2718 + tensor-parallel rank.
    // On the CPU both are the model's own CPU generators, and the masks are drawn in Megatron's
    // layouts ([s, b, h] hidden states, [b, n, s, s] attention probabilities), so a checkpoint's
    // states continue the same masks as the real program's. On a GPU the device's default generator
    // serves both (the fused attention kernel draws from it); the tracker is not kept apart there.
    at::Generator dropout_generator() const { return dropout_gen_; }
    at::Generator attention_dropout_generator() const { return attention_gen_; }
    bool separate_attention_dropout_generator() const { return !device_.is_cuda(); }

    // Position ids: `position_ids` [b, s] int64 (--reset-position-ids: they restart after each EOD
    // token) index the absolute position embeddings; an undefined tensor means 0 … s-1 for every
    // sample. ALiBi has no position embeddings and ignores them, as Megatron's Embedding does.
    // The attention is causal: Megatron-DeepSpeed's GPTModelPipe drops the batch's attention mask
    // (pretrain_gpt.py sets pretrain_causal_attention), so --reset-attention-mask has no effect.
    // Segment ids (--sft's packed rows): `segment_ids` [b, s] int64, when defined, also keeps every
    // position's attention within the positions of its own segment id (causal and same segment), so
    // packed examples do not see each other; an undefined tensor means one segment per sample.

    // tokens [b, s] int64 → logits [b, s, padded_vocab] in the model dtype.
    at::Tensor logits(const at::Tensor& tokens, const at::Tensor& position_ids = {}, const at::Tensor& segment_ids = {});
    // Mean cross entropy over the positions where loss_mask is 1 (Megatron's lm loss), in fp32.
    // labels [b, s] int64; loss_mask [b, s] float (an undefined tensor means all ones).
    at::Tensor loss(const at::Tensor& tokens, const at::Tensor& labels, const at::Tensor& loss_mask = {},
                    const at::Tensor& position_ids = {}, const at::Tensor& segment_ids = {});

    // One pipeline stage's forward: `input` is the tokens [b, s] on the first stage, else the
    // previous stage's output [b, s, h]. Returns this stage's output [b, s, h], or on the last stage
    // the lm loss over `labels` (as loss()). `position_ids`: read by the first stage only;
    // `segment_ids`: by every stage.
    at::Tensor stage_forward(const at::Tensor& input, const at::Tensor& labels, const at::Tensor& loss_mask = {},
                             const at::Tensor& position_ids = {}, const at::Tensor& segment_ids = {});

    // Which attention kernel a training step of `batch` sequences of `seq` tokens runs (with packed
    // segments or not): the SDPA backend LibTorch picks for this device, dtype, head size and mask
    // (flash, memory-efficient, cuDNN or the unfused math path), or the unfused CPU path with dropout.
    std::string attention_kernel(std::int64_t batch, std::int64_t seq, bool segments) const;

    // One transformer block and the final hidden states; public for activation recomputation.
    at::Tensor block_forward(std::int64_t block, const at::Tensor& x, const at::Tensor& attn_bias);
    at::Tensor hidden_states(const at::Tensor& tokens, const at::Tensor& position_ids = {}, const at::Tensor& segment_ids = {});

private:
    struct Block {
        at::Tensor ln1_w, ln1_b, qkv_w, qkv_b, dense_w, dense_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
        // --gradient-accumulation-fusion: the Linear weights' sinks (null without it, and for the row-parallel
        // weights under tensor parallelism, whose products ATen computes)
        c10::intrusive_ptr<MainGradSink> qkv_sink, dense_sink, fc1_sink, fc2_sink;
    };
    // A sink for the weight `w` just added (its Parameter::main_grad) with --gradient-accumulation-fusion, else null.
    c10::intrusive_ptr<MainGradSink> main_grad_sink(const at::Tensor& w);
    at::Tensor add(int layer, const std::string& name, at::Tensor value, TpSplit split, bool weight_decay);
    at::Tensor embed(const at::Tensor& tokens, const at::Tensor& position_ids);
    // This stage's blocks on hidden states x: their output as {base, delta}, whose sum it is (delta undefined: base).
    std::pair<at::Tensor, at::Tensor> run_blocks(at::Tensor x, const at::Tensor& segment_ids);
    at::Tensor final_norm(const std::pair<at::Tensor, at::Tensor>& x);  // the final LayerNorm of base + delta
    // {base + delta, its LayerNorm with w and b}: one kernel with --residual-layernorm-fusion where the dtypes allow;
    // delta undefined: {base, the LayerNorm of base}.
    std::pair<at::Tensor, at::Tensor> residual_layer_norm(const at::Tensor& base, const at::Tensor& delta, const at::Tensor& w,
                                                          const at::Tensor& b) const;
    // Block i of input x, with `ln` its input_layernorm's output: the two terms of the block's last residual sum.
    std::pair<at::Tensor, at::Tensor> block_terms(std::int64_t i, const at::Tensor& x, at::Tensor ln, const at::Tensor& attn_bias);
    at::Tensor loss_from_hidden(const at::Tensor& hidden, const at::Tensor& labels, const at::Tensor& loss_mask);
    // The additive attention bias [1 or b, n or 1, s, s] for ALiBi and / or segments; undefined when
    // the attention is plainly causal (SDPA's own causal mask).
    at::Tensor attention_bias(std::int64_t seq, c10::ScalarType dtype, const at::Tensor& segment_ids);
    // Dropout with probability p of x [b, s, h] (training only); `seq_first`: the mask drawn for
    // Megatron's [s, b, h] layout of the same values.
    at::Tensor dropout(const at::Tensor& x, double p, bool seq_first) const;
    // softmax(q kᵀ / sqrt(d) + bias or causal mask) with attention dropout, times v, written out
    // (the CPU path with dropout, which draws its mask from the tracker's generator).
    at::Tensor attention_with_dropout(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& attn_bias, double p) const;
    // Megatron's mappings (mpu/mappings.py): the forward sum over the group with the gradient passed
    // through, and the input of a column-parallel layer whose gradient is summed over the group.
    at::Tensor reduce_from_tp(const at::Tensor& x) const;
    void sum_grad_over_tp(at::Tensor& x) const;
    // The input of a column-parallel layer: an alias of x whose gradient alone is summed over the
    // group (Megatron's copy_to_tensor_model_parallel_region), so that other uses of x (a post-
    // LayerNorm residual) keep their own gradient.
    at::Tensor copy_to_tp(const at::Tensor& x) const;
    // LayerNorm over the hidden size, in fp32 for fp32 inputs with half weights (returning the weights' dtype).
    at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps) const;

    GptConfig config_;
    c10::Device device_;
    TensorParallel tp_;
    PipelineStage stage_;
    std::int64_t local_heads_ = 0, vocab_start_ = 0, local_vocab_ = 0;
    bool training_ = true;
    std::vector<Parameter> params_;
    at::Tensor word_embeddings_, position_embeddings_, embed_ln_w_, embed_ln_b_, final_ln_w_, final_ln_b_;
    std::vector<Block> blocks_;
    at::Tensor alibi_slopes_;  // [heads] fp32 on the device, for BLOOM
    at::Generator dropout_gen_, attention_gen_;
};

}  // namespace mds::model
