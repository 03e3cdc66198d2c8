// TFLOPs per GPU and parameter counts (specs/perf.md §3.2).
#include "mds/observe/flops.h"

namespace mds::observe {

double flops_per_iteration(const ThroughputShape& shape) {
    const double coefficient = shape.glu_activation ? 32.0 : 24.0;
    const double recompute_factor = shape.checkpoint_activations ? 4.0 : 3.0;
    const auto b = static_cast<double>(shape.global_batch_size);
    const auto s = static_cast<double>(shape.seq_length);
    const auto l = static_cast<double>(shape.num_layers);
    const auto h = static_cast<double>(shape.hidden_size);
    const auto v = static_cast<double>(shape.padded_vocab_size);
    // Same association as the Python expression, so the printed TFLOPs match to the last digit.
    return (coefficient * recompute_factor * b * s * l * (h * h)) * (1. + (s / (6. * h)) + (v / (16. * l * h)));
}

double tflops_per_gpu(const ThroughputShape& shape, double seconds_per_iteration, std::int64_t world_size) {
    return flops_per_iteration(shape) / (seconds_per_iteration * static_cast<double>(world_size) * 1e12);
}

double model_flops_utilization(const ThroughputShape& shape, double seconds_per_iteration, std::int64_t world_size,
                               double peak_tflops) {
    ThroughputShape model = shape;
    model.checkpoint_activations = false;
    return tflops_per_gpu(model, seconds_per_iteration, world_size) / peak_tflops;
}

std::optional<double> gpu_peak_tflops(std::string_view name, bool half) {
    struct Peak {
        const char* part;  // in the product name; the first row that matches wins
        double half, fp32;
    };
    // NVIDIA's datasheets, dense (without the 2:4 sparsity factor). H200 and GH200 are the H100 SXM die
    // and clocks; the PCIe / NVL H100 runs slower clocks.
    static constexpr Peak kPeaks[] = {
        {"H100 PCIe", 756.5, 51.2}, {"H100 NVL", 835.5, 60.0}, {"H200", 989.4, 66.9}, {"H100", 989.4, 66.9},
        {"H800", 989.4, 66.9},      {"A100", 312.0, 19.5},     {"A800", 312.0, 19.5}, {"L40S", 362.1, 91.6},
        {"L40", 181.0, 90.5},       {"A10G", 70.0, 31.2},      {"A10", 125.0, 31.2},  {"L4", 121.0, 30.3},
        {"V100", 125.0, 15.7},
    };
    for (const auto& p : kPeaks)
        if (name.find(p.part) != std::string_view::npos) return half ? p.half : p.fp32;
    return std::nullopt;
}

std::int64_t parameter_count_without_embeddings(const ModelShape& m) {
    const std::int64_t h = m.hidden_size;
    const std::int64_t f = m.ffn_hidden_size;
    const std::int64_t g = m.glu_activation ? 2 : 1;
    const std::int64_t p = m.projection_size > 0 ? m.projection_size : h;
    const std::int64_t per_layer = 4 * h                    // input and post-attention LayerNorms
                                   + 3 * p * h + 3 * p      // QKV
                                   + h * p + h              // attention output
                                   + h * f * g + f * g      // MLP up (gate and up for GLU)
                                   + f * h + h;             // MLP down
    return m.num_layers * per_layer + 2 * h                 // final LayerNorm
           + (m.embedding_layernorm ? 2 * h : 0);
}

std::int64_t parameter_count(const ModelShape& m) {
    return parameter_count_without_embeddings(m) + m.padded_vocab_size * m.hidden_size +
           m.max_position_embeddings * m.hidden_size;
}

}  // namespace mds::observe
