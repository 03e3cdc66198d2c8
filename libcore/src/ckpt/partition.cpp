#include "mds/ckpt/partition.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <regex>

#include "mds/util/error.h"

namespace mds::ckpt {
namespace {

// Python's bisect.bisect_left on a prefix-sum list against a float key (ints and floats compare
// exactly in Python; the sums stay far below 2^53, so converting them to double is exact too).
int bisect_left(const std::vector<std::int64_t>& a, double x, int lo, int hi) {
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (static_cast<double>(a[static_cast<std::size_t>(mid)]) < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// a[i] with Python's negative indices (v0.6.5's _lprobe reads weights[parts[p] - 1] with parts[p] = 0).
std::int64_t py_at(const std::vector<std::int64_t>& a, int i) {
    return a[static_cast<std::size_t>(i < 0 ? i + static_cast<int>(a.size()) : i)];
}

// v0.6.5 _lprobe: greedily fills parts up to `bottleneck`; success when everything fits.
bool lprobe(const std::vector<std::int64_t>& prefix, int num_parts, double bottleneck, std::vector<int>& parts) {
    const int num_items = static_cast<int>(prefix.size());
    const std::int64_t total = prefix.back();
    parts.assign(static_cast<std::size_t>(num_parts) + 1, num_items);
    parts[0] = 0;
    double bsum = bottleneck;
    const int chunksize = num_items / num_parts;
    int step = chunksize;
    for (int p = 1; p < num_parts; ++p) {
        while (step < num_items && static_cast<double>(prefix[static_cast<std::size_t>(step)]) < bsum) step += chunksize;
        parts[static_cast<std::size_t>(p)] = bisect_left(prefix, bsum, step - chunksize, std::min(step, num_items));
        if (parts[static_cast<std::size_t>(p)] == num_items) {
            const std::int64_t part_size = prefix.back() - prefix[static_cast<std::size_t>(parts[static_cast<std::size_t>(p) - 1])];
            return static_cast<double>(part_size) < bottleneck;
        }
        bsum = static_cast<double>(py_at(prefix, parts[static_cast<std::size_t>(p)] - 1)) + bottleneck;
    }
    return bsum >= static_cast<double>(total);
}

std::vector<int> balanced_bisect(const std::vector<std::int64_t>& weights, int num_parts) {
    std::vector<std::int64_t> prefix(weights);
    for (std::size_t i = 1; i < prefix.size(); ++i) prefix[i] += prefix[i - 1];
    // _rb_partition_balanced: the smallest bottleneck _lprobe accepts, to within eps.
    constexpr double eps = 1e-3;
    const double total = static_cast<double>(prefix.back());
    double lower = total / num_parts, upper = total;
    std::vector<int> parts;
    while (upper > lower + eps) {
        const double mid = lower + ((upper - lower) / 2);
        if (lprobe(prefix, num_parts, mid, parts)) upper = mid;
        else lower = mid + eps;
    }
    if (!lprobe(prefix, num_parts, upper, parts))
        throw Error("partition_balanced (bisect): no partition of " + std::to_string(weights.size()) + " items into " +
                    std::to_string(num_parts) + " parts passes DeepSpeed's own check");
    return parts;
}

std::vector<int> balanced_dp(const std::vector<std::int64_t>& weights, int num_parts) {
    // The linear partition problem: minimise (heaviest - lightest part); ties go to the last
    // split point examined (`>=`), exactly as DeepSpeed's loops visit them.
    const std::size_t n = weights.size(), m = static_cast<std::size_t>(num_parts);
    constexpr double inf = std::numeric_limits<double>::infinity();
    const std::size_t cols = m + 1;
    std::vector<double> dp_max((n + 1) * cols, inf), dp_min((n + 1) * cols, inf), dp_cost((n + 1) * cols, inf);
    std::vector<int> position((n + 1) * cols, 0);
    std::vector<double> prefix(n + 1, 0.0);
    std::int64_t running = 0;
    for (std::size_t i = 0; i < n; ++i) {
        running += weights[i];
        prefix[i + 1] = static_cast<double>(running);
    }
    dp_max[0] = 0;
    dp_cost[0] = 0;
    for (std::size_t i = 1; i <= n; ++i)
        for (std::size_t j = 1; j <= std::min(i, m); ++j)
            for (std::size_t k = 0; k < i; ++k) {
                const double seg = prefix[i] - prefix[k];
                const double prev_max = dp_max[k * cols + j - 1], prev_min = dp_min[k * cols + j - 1];
                const double max_sum = seg > prev_max ? seg : prev_max;  // Python's max(a, b)
                const double min_sum = seg < prev_min ? seg : prev_min;  // Python's min(a, b)
                const double cost = max_sum - min_sum;
                if (dp_cost[i * cols + j] >= cost) {
                    dp_cost[i * cols + j] = cost;
                    dp_max[i * cols + j] = max_sum;
                    dp_min[i * cols + j] = min_sum;
                    position[i * cols + j] = static_cast<int>(k);
                }
            }
    std::vector<int> parts{static_cast<int>(n)};
    for (std::size_t i = m; i >= 1; --i) parts.push_back(position[static_cast<std::size_t>(parts.back()) * cols + i]);
    std::reverse(parts.begin(), parts.end());
    return parts;
}

void check_parts(int num_parts) {
    if (num_parts < 1) throw Error("pipeline partition: " + std::to_string(num_parts) + " stages; expected at least 1");
}

}  // namespace

const char* partition_algorithm_name(PartitionAlgorithm a) { return a == PartitionAlgorithm::Dp ? "dp" : "bisect"; }

std::optional<PartitionAlgorithm> parse_partition_algorithm(std::string_view name) {
    if (name == "dp") return PartitionAlgorithm::Dp;
    if (name == "bisect") return PartitionAlgorithm::Bisect;
    return std::nullopt;
}

std::vector<int> partition_uniform(int num_items, int num_parts, PartitionAlgorithm algorithm) {
    check_parts(num_parts);
    std::vector<int> parts(static_cast<std::size_t>(num_parts) + 1, 0);
    if (num_items <= num_parts) {
        for (int p = 0; p <= num_parts; ++p) parts[static_cast<std::size_t>(p)] = std::min(p, num_items);
        return parts;
    }
    const int chunk = num_items / num_parts;
    if (algorithm == PartitionAlgorithm::Bisect) {
        for (int p = 0; p < num_parts; ++p) parts[static_cast<std::size_t>(p)] = std::min(chunk * p, num_items);
        parts[static_cast<std::size_t>(num_parts)] = num_items;
    } else {
        const int residual = num_items - chunk * num_parts;
        for (int p = 0; p <= num_parts; ++p) parts[static_cast<std::size_t>(p)] = p * chunk + std::min(p, residual);
    }
    return parts;
}

std::vector<int> partition_balanced(const std::vector<std::int64_t>& weights, int num_parts, PartitionAlgorithm algorithm) {
    check_parts(num_parts);
    const int n = static_cast<int>(weights.size());
    if (n <= num_parts) return partition_uniform(n, num_parts, algorithm);
    for (auto w : weights)
        if (w < 0) throw Error("pipeline partition: negative weight " + std::to_string(w));
    return algorithm == PartitionAlgorithm::Dp ? balanced_dp(weights, num_parts) : balanced_bisect(weights, num_parts);
}

std::vector<PipeSpec> gpt_pipe_specs(const std::vector<int>& layers, bool half_precision) {
    if (layers.size() < 3) throw Error("pipeline spec list: expected embedding, transformer blocks and final norm layer files");
    const int embed = layers.front(), norm = layers.back();
    const int first_block = layers[1], last_block = layers[layers.size() - 2];
    if (embed < 1) throw Error("pipeline spec list: embedding at layer index " + std::to_string(embed) + "; expected >= 1");
    for (std::size_t i = 1; i + 1 < layers.size(); ++i)
        if (layers[i] != first_block + static_cast<int>(i) - 1)
            throw Error("pipeline spec list: transformer block layer indices are not contiguous (" + std::to_string(layers[i - 1]) +
                        " then " + std::to_string(layers[i]) + ")");
    std::vector<PipeSpec> specs;
    for (int i = 0; i < embed; ++i) specs.push_back({i == 0 ? "_to_float16" : "<lambda>", -1, false, 0});
    specs.push_back({"EmbeddingPipe", embed, true, 0});
    for (int i = embed + 1; i < first_block; ++i) specs.push_back({"<lambda>", -1, false, 0});
    for (int i = first_block; i <= last_block; ++i) specs.push_back({"ParallelTransformerLayerPipe", i, false, 0});
    for (int i = last_block + 1; i < norm; ++i) specs.push_back({"<lambda>", -1, false, 0});
    specs.push_back({"MixedFusedLayerNorm", norm, false, 0});
    specs.push_back({"EmbeddingPipe", -1, true, 0});
    if (half_precision) specs.push_back({"float16_to_fp32", -1, false, 0});
    return specs;
}

std::vector<int> partition_pipe_specs(const std::vector<PipeSpec>& specs, const std::string& method_in, int num_stages,
                                      PartitionAlgorithm algorithm) {
    std::string method = method_in;
    std::transform(method.begin(), method.end(), method.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (method == "uniform") return partition_uniform(static_cast<int>(specs.size()), num_stages, algorithm);
    std::vector<std::int64_t> weights(specs.size(), 0);
    if (method == "parameters") {
        for (std::size_t i = 0; i < specs.size(); ++i) weights[i] = specs[i].parameters;
    } else if (method.rfind("type:", 0) == 0) {
        const std::string pattern = method.substr(5);
        std::regex re;
        try {
            re = std::regex(pattern, std::regex::ECMAScript | std::regex::icase);
        } catch (const std::regex_error& e) {
            throw Error("partition method '" + method_in + "': bad regular expression: " + e.what());
        }
        bool any = false;
        for (std::size_t i = 0; i < specs.size(); ++i)
            if (std::regex_search(specs[i].type_name, re)) {
                weights[i] = 1;
                any = true;
            }
        if (!any) throw Error("partition method '" + method_in + "' matches no layer type (DeepSpeed refuses it too)");
    } else {
        throw Error("partition method '" + method_in + "' is not supported (DeepSpeed's: uniform, parameters, type:<regex>)");
    }
    return partition_balanced(weights, num_stages, algorithm);
}

GptShardParameters gpt_shard_parameters(std::int64_t hidden_size, std::int64_t ffn_hidden_size, std::int64_t padded_vocab_size,
                                        std::int64_t position_rows, bool embed_layernorm, std::int64_t tp,
                                        std::int64_t projection_size, bool glu) {
    const std::int64_t h = hidden_size, f = ffn_hidden_size, p = projection_size > 0 ? projection_size : hidden_size;
    const std::int64_t g = glu ? 2 : 1;
    const auto split = [tp](std::int64_t n) { return (n + tp - 1) / tp; };
    GptShardParameters s;
    // QKV 3p·h + 3p, attention output h·p, MLP g·f·h + g·f and f·h (p = kv-channels × heads, g = 2
    // with a GLU): split; attention output bias h, MLP output bias h and two LayerNorms 4h: whole.
    s.block = split(3 * p * h + 3 * p + h * p + g * f * h + g * f + f * h) + 6 * h;
    s.embedding = split(padded_vocab_size * h) + position_rows * h + (embed_layernorm ? 2 * h : 0);
    s.final_norm = 2 * h;
    return s;
}

std::vector<GptStageCut> gpt_stage_cuts(std::int64_t num_layers, int stages, const std::string& method, bool half_precision,
                                        std::int64_t embedding_parameters, std::int64_t block_parameters,
                                        std::int64_t norm_parameters, PartitionAlgorithm algorithm) {
    if (num_layers < 1 || stages < 1) throw Error("gpt_stage_cuts: " + std::to_string(num_layers) + " layers, " + std::to_string(stages) + " stages");
    // BMD's layer numbering: embedding 1, blocks 3 .. L+2, final norm L+4.
    std::vector<int> layers{1};
    for (std::int64_t b = 0; b < num_layers; ++b) layers.push_back(static_cast<int>(b) + 3);
    layers.push_back(static_cast<int>(num_layers) + 4);
    auto specs = gpt_pipe_specs(layers, half_precision);
    for (auto& s : specs) {
        if (s.type_name == "EmbeddingPipe") s.parameters = embedding_parameters;
        else if (s.type_name == "ParallelTransformerLayerPipe") s.parameters = block_parameters;
        else if (s.type_name == "MixedFusedLayerNorm") s.parameters = norm_parameters;
    }
    const auto parts = partition_pipe_specs(specs, method, stages, algorithm);
    std::vector<GptStageCut> cuts(static_cast<std::size_t>(stages));
    std::int64_t blocks_before = 0;
    for (int st = 0; st < stages; ++st) {
        auto& c = cuts[static_cast<std::size_t>(st)];
        c.first_block = c.end_block = blocks_before;
        for (int i = parts[static_cast<std::size_t>(st)]; i < parts[static_cast<std::size_t>(st) + 1]; ++i) {
            const auto& s = specs[static_cast<std::size_t>(i)];
            if (s.type_name == "ParallelTransformerLayerPipe") ++c.end_block;
            else if (s.type_name == "MixedFusedLayerNorm") c.final_norm = true;
            else if (s.tied_embedding) (s.layer >= 0 ? c.embedding : c.output_layer) = true;
        }
        blocks_before = c.end_block;
    }
    return cuts;
}

}  // namespace mds::ckpt
