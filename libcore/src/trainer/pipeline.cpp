#include "mds/trainer/pipeline.h"

#include <ATen/ATen.h>

#include <deque>

#include "mds/ckpt/partition.h"
#include "mds/trainer/comm.h"
#include "mds/util/error.h"

namespace mds::trainer {
namespace {

constexpr int kForwardTag = 0, kBackwardTag = 1;

// Parameters per TP rank of GPTModelPipe's layers, for the 'parameters' method.
struct LayerSizes {
    std::int64_t embedding = 0, block = 0, norm = 0;
};
LayerSizes layer_sizes(const model::GptConfig& c, std::int64_t tp) {
    const auto h = c.hidden_size, f = c.ffn_hidden_size;
    LayerSizes s;
    s.embedding = c.padded_vocab_size / tp * h + (c.position_embedding == model::PositionEmbedding::Absolute ? c.max_position_embeddings * h : 0) +
                  (c.embed_layernorm ? 2 * h : 0);
    s.block = 4 * h + (3 * h * h + 3 * h) / tp + h * h / tp + h + (f * h + f) / tp + h * f / tp + h;
    s.norm = 2 * h;
    return s;
}

}  // namespace

model::PipelineStage pipeline_stage(const model::GptConfig& config, int tp, int stage, int stages, const std::string& method) {
    const auto L = config.num_layers;
    model::PipelineStage out;
    out.rank = stage;
    out.size = stages;
    if (stages == 1) return out;
    std::vector<int> layers{model::kEmbeddingLayer};
    for (std::int64_t b = 0; b < L; ++b) layers.push_back(model::transformer_layer_index(b));
    layers.push_back(model::final_norm_layer_index(L));
    auto specs = ckpt::gpt_pipe_specs(layers, config.precision != model::Precision::FP32);
    const auto sizes = layer_sizes(config, tp);
    for (auto& s : specs) {
        if (s.type_name == "EmbeddingPipe") s.parameters = sizes.embedding;
        else if (s.type_name == "ParallelTransformerLayerPipe") s.parameters = sizes.block;
        else if (s.type_name == "MixedFusedLayerNorm") s.parameters = sizes.norm;
    }
    std::vector<int> parts;
    try {
        parts = ckpt::partition_pipe_specs(specs, method, stages, ckpt::PartitionAlgorithm::Dp);
    } catch (const Error& e) {
        throw UsageError(std::string("--pp-partition-method: ") + e.what());
    }
    // Stage of each spec entry, then where the embedding, the blocks and the head landed.
    auto stage_of = [&](std::size_t spec) {
        int s = 0;
        while (s + 1 < stages && static_cast<int>(spec) >= parts[static_cast<std::size_t>(s) + 1]) ++s;
        return s;
    };
    out.first_block = -1;
    out.end_block = -1;
    for (std::size_t i = 0; i < specs.size(); ++i) {
        const auto& s = specs[i];
        const int at = stage_of(i);
        const bool embedding_first = s.tied_embedding && s.layer == model::kEmbeddingLayer;
        if ((embedding_first && at != 0) || ((s.type_name == "MixedFusedLayerNorm" || (s.tied_embedding && s.layer < 0)) && at != stages - 1))
            throw UsageError("--pp-partition-method '" + method + "' puts " + (embedding_first ? "the embedding" : "the output layer") +
                             " on pipeline stage " + std::to_string(at) + " of " + std::to_string(stages) +
                             "; mds-train needs the embedding on the first stage and the final LayerNorm and output layer on the "
                             "last (try 'type:transformer')");
        if (s.type_name == "ParallelTransformerLayerPipe" && at == stage) {
            const std::int64_t block = s.layer - model::transformer_layer_index(0);
            if (out.first_block < 0) out.first_block = block;
            out.end_block = block + 1;
        }
    }
    if (out.first_block < 0) {
        // No block on this stage: an empty range where its neighbours meet.
        std::int64_t before = 0;
        for (std::size_t i = 0; i < specs.size(); ++i)
            if (specs[i].type_name == "ParallelTransformerLayerPipe" && stage_of(i) < stage) ++before;
        out.first_block = out.end_block = before;
    }
    return out;
}

namespace {

// A received activation or gradient: [mbs, seq, h] in the model dtype.
at::Tensor activation(const PipelineStep& step) {
    const auto& model = *step.model;
    return at::empty({step.micro_batch_size, step.seq_length, model.config().hidden_size},
                     at::TensorOptions().dtype(model.parameters().front().tensor.scalar_type()).device(model.device()));
}

// Micro batch j's tokens and labels where this stage uses them.
std::pair<at::Tensor, at::Tensor> inputs(const PipelineStep& step, std::int64_t j) {
    if (step.prev >= 0 && step.next >= 0) return {};
    return step.batch(j);
}

struct InFlight {
    at::Tensor input;   // the received activation (requires grad), undefined on the first stage
    at::Tensor output;  // this stage's output, or the loss on the last stage
};

}  // namespace

double pipeline_train(const PipelineStep& step, double loss_factor) {
    auto& model = *step.model;
    const bool first = step.prev < 0, last = step.next < 0;
    if ((!first || !last) && !step.comm) throw Error("a pipeline of several stages needs a communicator");
    const std::int64_t nmb = step.micro_batches;
    const std::int64_t warmup = std::min<std::int64_t>(nmb, model.pipeline_stage().size - model.pipeline_stage().rank - 1);
    double loss_sum = 0;
    std::int64_t next_forward = 0;
    std::deque<InFlight> queue;

    auto recv_forward = [&]() -> at::Tensor {
        if (first) return {};
        auto x = activation(step);
        step.comm->exchange({{x, step.prev, false, kForwardTag}});
        return x;
    };
    // Forward of the next micro batch with `input` (received); returns what the next stage needs.
    auto forward = [&](at::Tensor input) {
        const auto [tokens, labels] = inputs(step, next_forward++);
        if (input.defined()) input.requires_grad_(true);
        auto out = model.stage_forward(first ? tokens : input, labels);
        if (last) loss_sum += out.item<double>();
        queue.push_back({input, out});
        return out;
    };
    // Backward of the oldest micro batch in flight; returns the gradient for the previous stage.
    std::int64_t backwards = 0;
    auto backward = [&](const at::Tensor& grad_output) -> at::Tensor {
        auto f = std::move(queue.front());
        queue.pop_front();
        if (++backwards == nmb && step.before_last_backward) step.before_last_backward();
        if (last) (f.output * loss_factor).backward();
        else f.output.backward(grad_output);
        return first ? at::Tensor() : f.input.grad();
    };
    for (std::int64_t i = 0; i < warmup; ++i) {
        auto out = forward(recv_forward());
        step.comm->exchange({{out.detach(), step.next, true, kForwardTag}});
    }
    const std::int64_t steady = nmb - warmup;
    at::Tensor input = steady > 0 ? recv_forward() : at::Tensor();
    for (std::int64_t i = 0; i < steady; ++i) {
        auto out = forward(input);
        at::Tensor grad_out;
        if (!last) {
            grad_out = activation(step);
            step.comm->exchange({{out.detach(), step.next, true, kForwardTag}, {grad_out, step.next, false, kBackwardTag}});
        }
        auto grad_in = backward(grad_out);
        if (i + 1 == steady) {
            if (!first) step.comm->exchange({{grad_in, step.prev, true, kBackwardTag}});
        } else if (!first) {
            input = activation(step);
            step.comm->exchange({{grad_in, step.prev, true, kBackwardTag}, {input, step.prev, false, kForwardTag}});
        } else {
            input = at::Tensor();
        }
    }
    for (std::int64_t i = 0; i < warmup; ++i) {
        auto grad_out = activation(step);
        step.comm->exchange({{grad_out, step.next, false, kBackwardTag}});
        auto grad_in = backward(grad_out);
        if (!first) step.comm->exchange({{grad_in, step.prev, true, kBackwardTag}});
    }
    return loss_sum;
}

double pipeline_evaluate(const PipelineStep& step) {
    auto& model = *step.model;
    const bool first = step.prev < 0, last = step.next < 0;
    if ((!first || !last) && !step.comm) throw Error("a pipeline of several stages needs a communicator");
    double loss_sum = 0;
    for (std::int64_t j = 0; j < step.micro_batches; ++j) {
        const auto [tokens, labels] = inputs(step, j);
        at::Tensor input = tokens;
        if (!first) {
            input = activation(step);
            step.comm->exchange({{input, step.prev, false, kForwardTag}});
        }
        auto out = model.stage_forward(input, labels);
        if (last) loss_sum += out.item<double>();
        else step.comm->exchange({{out, step.next, true, kForwardTag}});
    }
    return loss_sum;
}

}  // namespace mds::trainer
