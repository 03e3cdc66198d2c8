// Throughput arithmetic of Megatron-DeepSpeed's training log (specs/perf.md §3.2): the TFLOPs per
// GPU BigScience printed (bigscience-workshop/Megatron-DeepSpeed megatron/training.py
// training_log, PR #251 / #283; the same formula as megatron/utils.py throughput_calculator in
// microsoft/Megatron-DeepSpeed), and the exact parameter count of a GPT / BLOOM model.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace mds::observe {

// What the FLOP formula needs to know about one training iteration.
struct ThroughputShape {
    std::int64_t num_layers = 0;         // --num-layers
    std::int64_t hidden_size = 0;        // --hidden-size
    std::int64_t padded_vocab_size = 0;  // vocabulary padded to a multiple of
                                         // --make-vocab-size-divisible-by × TP
    std::int64_t seq_length = 0;         // --seq-length (the curriculum seqlen when curriculum is on)
    std::int64_t global_batch_size = 0;  // micro batch × micro batches × data parallel size
    bool checkpoint_activations = false; // --checkpoint-activations: forward recomputed, factor 4 not 3
    bool glu_activation = false;         // --glu-activation: coefficient 32 instead of 24
};

// FLOPs of one iteration (hardware FLOPs: with activation recomputation the forward is counted
// twice). Narayanan et al. 2021 Eq. 3:
//   c·f·B·s·l·h² · (1 + s/(6h) + V/(16·l·h)),  c = 24 (32 with GLU), f = 3 (4 with recomputation).
double flops_per_iteration(const ThroughputShape& shape);

// TFLOPs per GPU as Megatron-DeepSpeed logs it: flops_per_iteration / (seconds × world size × 1e12).
double tflops_per_gpu(const ThroughputShape& shape, double seconds_per_iteration, std::int64_t world_size);

// Model FLOPs utilization, as a fraction: the model's FLOPs per iteration (the forward counted once,
// whatever --checkpoint-activations recomputes: Chowdhery et al. 2022's MFU, not the hardware FLOPs
// that Megatron's TFLOPs count) per second and GPU, over `peak_tflops` (the device's dense peak).
double model_flops_utilization(const ThroughputShape& shape, double seconds_per_iteration, std::int64_t world_size,
                               double peak_tflops);

// The dense peak TFLOP/s of a known NVIDIA data-centre GPU from its product name as the driver gives it
// ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"): with `half` the bf16 / fp16 tensor-core rate
// (fp32 accumulation, no sparsity; V100 fp16 only), else plain fp32, as NVIDIA's datasheets give them.
// nullopt for a name not in the table (mds-train's --peak-tflops gives it then).
std::optional<double> gpu_peak_tflops(std::string_view product_name, bool half);

// The parameters of a GPT-2 / BLOOM style model.
struct ModelShape {
    std::int64_t num_layers = 0;
    std::int64_t hidden_size = 0;
    std::int64_t ffn_hidden_size = 0;        // 4 × hidden_size unless --ffn-hidden-size
    std::int64_t padded_vocab_size = 0;
    std::int64_t max_position_embeddings = 0;  // learned absolute positions (GPT-2); 0 for ALiBi (BLOOM)
    bool embedding_layernorm = false;        // BLOOM's word_embeddings_layernorm
    bool glu_activation = false;             // the first MLP matrix (and bias) is twice as wide
    std::int64_t projection_size = 0;        // --kv-channels × heads (Q, K, V width); 0: hidden_size
};

// Every weight and bias: word embeddings V·h, position embeddings P·h, the optional embedding
// LayerNorm 2h, per layer 2 LayerNorms (4h), QKV (3h² + 3h), attention output (h² + h), MLP
// (h·f·g + f·g + f·h + h with g = 2 for GLU), and the final LayerNorm 2h. Output embeddings are
// tied to the input ones, as in GPT-2 and BLOOM. For f = 4h, no GLU: 12·l·h² + 13·l·h + V·h + P·h + 2h.
std::int64_t parameter_count(const ModelShape& shape);
// The same without the embedding matrices (word and position), as Megatron-DeepSpeed's
// get_parameters_in_billions(exclude_embeddings=True) counts for gigaflos_no_embeds.
std::int64_t parameter_count_without_embeddings(const ModelShape& shape);

}  // namespace mds::observe
