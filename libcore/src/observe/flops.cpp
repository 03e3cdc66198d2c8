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
