// Pipeline stage boundaries as DeepSpeed's PipelineModule computes them (specs/checkpoints.md §1.3,
// §6.1): partition_uniform / partition_balanced of two DeepSpeed generations (the binary search of
// v0.6.5, which BLOOM-era checkpoints were cut with, and the dynamic programming that replaced it in
// commit 2bdf061f), the partition_method weighting ('uniform', 'parameters', 'type:<regex>'), and
// Megatron-DeepSpeed's GPTModelPipe spec list rebuilt from the layer files on disk.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mds::ckpt {

// Which DeepSpeed's partition functions to reproduce. Stage boundaries decide which layers (and so
// which optimizer flat buffers) a stage holds, so a checkpoint is only loadable by the DeepSpeed
// generation whose boundaries it was cut with.
enum class PartitionAlgorithm {
    Dp,      // DeepSpeed since 2bdf061f (Dec 2023): linear-partition dynamic programming;
             // partition_uniform spreads the remainder over the first parts
    Bisect,  // DeepSpeed up to then (v0.6.5, the BLOOM branch): binary search over the heaviest
             // part with _lprobe (eps 1e-3); partition_uniform gives the remainder to the last part
};
const char* partition_algorithm_name(PartitionAlgorithm a);  // "dp", "bisect"
std::optional<PartitionAlgorithm> parse_partition_algorithm(std::string_view name);

// DeepSpeed's partition_uniform(num_items, num_parts): num_parts + 1 boundaries, part p holding
// items [parts[p], parts[p+1]).
std::vector<int> partition_uniform(int num_items, int num_parts, PartitionAlgorithm algorithm);

// DeepSpeed's partition_balanced(weights, num_parts), boundaries as above, with the same ties and
// quirks (Bisect can leave leading parts empty, as v0.6.5 does). Throws mds::Error where DeepSpeed
// would fail its own `assert success`.
std::vector<int> partition_balanced(const std::vector<std::int64_t>& weights, int num_parts, PartitionAlgorithm algorithm);

// One entry of the pipeline's spec list.
struct PipeSpec {
    std::string type_name;        // what 'type:<regex>' is matched against: class or function name
    int layer = -1;               // on-disk layer index when the entry saves a layer file, else -1
    bool tied_embedding = false;  // TiedLayerSpec('embed', EmbeddingPipe): the stage builds tied_modules.embed
    std::int64_t parameters = 0;  // trainable parameters per TP rank ('parameters' weighting)
};

// Megatron-DeepSpeed's GPTModelPipe spec list from the sorted on-disk layer indices (first =
// embedding, last = final norm, the rest = contiguous transformer blocks):
//   [_to_float16, <lambda>...] EmbeddingPipe [<lambda>...] ParallelTransformerLayerPipe x L
//   [<lambda>...] MixedFusedLayerNorm EmbeddingPipe (tied LM head, not saved) [float16_to_fp32]
// The unsaved entries are counted from the gaps between indices, so BMD's +3 numbering, the later
// one with an extra lambda and MMD's +2 all come out right. `half_precision` (fp16 or bf16 args)
// adds the final float16_to_fp32. Parameter counts are left 0 for the caller to fill.
std::vector<PipeSpec> gpt_pipe_specs(const std::vector<int>& layers, bool half_precision);

// Stage boundaries (num_stages + 1 spec indices) for DeepSpeed's partition_method: 'uniform',
// 'parameters' or 'type:<regex>' (lower-cased first, then matched case-insensitively with search
// semantics, as PipelineModule does). Anything else is an mds::Error.
std::vector<int> partition_pipe_specs(const std::vector<PipeSpec>& specs, const std::string& method, int num_stages,
                                      PartitionAlgorithm algorithm);

// Trainable parameters per tensor-parallel rank of GPTModelPipe's pieces, as Megatron splits them
// (column-parallel QKV and h→4h with their biases, row-parallel attention output and 4h→h weights,
// vocabulary-parallel word embeddings, all divided by `tp`; the row-parallel output biases, the
// LayerNorms and the position table whole on every rank): the 'parameters' partition weights of
// mds-train's pipeline and the per-GPU count of its --dry-run.
struct GptShardParameters {
    std::int64_t embedding = 0;   // word embeddings V·h/t, positions P·h, optional embedding LayerNorm 2h
    std::int64_t block = 0;       // one transformer layer: (4h² + 2hf + 3h + f)/t + 6h (12h² + 13h at t = 1, f = 4h)
    std::int64_t final_norm = 0;  // the LayerNorm after the last layer: 2h
};
// `position_rows` is 0 without an absolute position table (ALiBi). The split sums are rounded up,
// which matters only for sizes Megatron refuses (heads or FFN or vocabulary not divisible by tp).
// `projection_size`: --kv-channels × heads (0: hidden_size, the default); `glu`: --glu-activation
// (dense_h_to_4h has 2·ffn rows).
GptShardParameters gpt_shard_parameters(std::int64_t hidden_size, std::int64_t ffn_hidden_size, std::int64_t padded_vocab_size,
                                        std::int64_t position_rows, bool embed_layernorm, std::int64_t tp,
                                        std::int64_t projection_size = 0, bool glu = false);

// One pipeline stage of a GPT cut as above: transformer blocks [first_block, end_block) (counted
// from 0), and whether it holds the embedding (first EmbeddingPipe) and the output layer (the tied
// EmbeddingPipe at the end) and final LayerNorm.
struct GptStageCut {
    std::int64_t first_block = 0, end_block = 0;
    bool embedding = false, final_norm = false, output_layer = false;
};
// The stages DeepSpeed cuts Megatron-DeepSpeed's GPTModelPipe of `num_layers` blocks into with
// `method`; for 'parameters' the weights are `embedding_parameters` per EmbeddingPipe,
// `block_parameters` per block and `norm_parameters` for the final LayerNorm (per TP rank).
// Throws mds::Error as partition_pipe_specs.
std::vector<GptStageCut> gpt_stage_cuts(std::int64_t num_layers, int stages, const std::string& method, bool half_precision,
                                        std::int64_t embedding_parameters, std::int64_t block_parameters,
                                        std::int64_t norm_parameters, PartitionAlgorithm algorithm = PartitionAlgorithm::Dp);

}  // namespace mds::ckpt
