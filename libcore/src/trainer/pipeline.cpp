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
    const auto n = ckpt::gpt_shard_parameters(c.hidden_size, c.ffn_hidden_size, c.padded_vocab_size,
                                              c.position_embedding == model::PositionEmbedding::Absolute ? c.max_position_embeddings : 0,
                                              c.embed_layernorm, tp, c.projection_size(), c.glu != model::Glu::None);
    return {n.embedding, n.block, n.final_norm};
}

}  // namespace

model::PipelineStage pipeline_stage(const model::GptConfig& config, int tp, int stage, int stages, const std::string& method) {
    model::PipelineStage out;
    out.rank = stage;
    out.size = stages;
    if (stages == 1) return out;
    const auto sizes = layer_sizes(config, tp);
    std::vector<ckpt::GptStageCut> cuts;
    try {
        cuts = ckpt::gpt_stage_cuts(config.num_layers, stages, method, config.precision != model::Precision::FP32, sizes.embedding,
                                    sizes.block, sizes.norm);
    } catch (const Error& e) {
        throw UsageError(std::string("--pp-partition-method: ") + e.what());
    }
    for (int s = 0; s < stages; ++s) {
        const auto& c = cuts[static_cast<std::size_t>(s)];
        const char* misplaced = c.embedding && s != 0                   ? "the embedding"
                                : c.output_layer && s != stages - 1     ? "the output layer"
                                : c.final_norm && s != stages - 1       ? "the final LayerNorm"
                                                                        : nullptr;
        if (misplaced)
            throw UsageError("--pp-partition-method '" + method + "' puts " + misplaced + " on pipeline stage " + std::to_string(s) +
                             " of " + std::to_string(stages) +
                             "; mds-train needs the embedding on the first stage and the final LayerNorm and output layer on the "
                             "last (try 'type:transformer')");
    }
    out.first_block = cuts[static_cast<std::size_t>(stage)].first_block;
    out.end_block = cuts[static_cast<std::size_t>(stage)].end_block;
    return out;
}

namespace {

// A received activation or gradient: [mbs, seq, h] in the model dtype (fp32 with --fp32-residual-connection).
at::Tensor activation(const PipelineStep& step) {
    const auto& model = *step.model;
    const auto dtype = model.config().fp32_residual ? at::kFloat : model.parameters().front().tensor.scalar_type();
    return at::empty({step.micro_batch_size, step.seq_length, model.config().hidden_size},
                     at::TensorOptions().dtype(dtype).device(model.device()));
}

// Micro batch j's tokens, position ids, labels, loss mask and segment ids where this stage uses them
// (the segment ids, when the batches have them, on every stage).
MicroBatchInputs inputs(const PipelineStep& step, std::int64_t j) {
    if (step.prev >= 0 && step.next >= 0 && !step.batch_on_every_stage) return {};
    return step.batch(j);
}

// The last stage's micro-batch losses, added up on the device in float64 (the double they used to be added
// up in on the host, in the same order: the same sum to the bit). One read at the end of the step instead
// of a host synchronisation after every micro batch's forward, which on a GPU kept the host from queueing
// the backward behind it.
class LossSum {
public:
    void add(const at::Tensor& loss) {
        if (sum_.defined()) sum_.add_(loss.detach());  // promoted to float64 before the addition
        else sum_ = loss.detach().to(at::kDouble, /*non_blocking=*/false, /*copy=*/true);
    }
    double value() const { return sum_.defined() ? sum_.item<double>() : 0.0; }

private:
    at::Tensor sum_;
};

struct InFlight {
    at::Tensor input;   // the received activation (requires grad), undefined on the first stage
    at::Tensor output;  // this stage's output, or the loss on the last stage
};

}  // namespace

double pipeline_train(const PipelineStep& step, double loss_factor) {
    using observe::ScopedTimer;
    auto& model = *step.model;
    const bool first = step.prev < 0, last = step.next < 0;
    if ((!first || !last) && !step.comm) throw Error("a pipeline of several stages needs a communicator");
    const std::int64_t nmb = step.micro_batches;
    const std::int64_t warmup = std::min<std::int64_t>(nmb, model.pipeline_stage().size - model.pipeline_stage().rank - 1);
    LossSum loss_sum;
    std::int64_t next_forward = 0;
    std::deque<InFlight> queue;

    auto recv_forward = [&]() -> at::Tensor {
        if (first) return {};
        auto x = activation(step);
        ScopedTimer t(step.timers, "forward-recv");
        step.comm->exchange({{x, step.prev, false, kForwardTag}});
        return x;
    };
    // Forward of the next micro batch with `input` (received); returns what the next stage needs.
    auto forward = [&](at::Tensor input) {
        ScopedTimer t(step.timers, "forward-compute");
        const auto in = [&] {
            ScopedTimer b(step.timers, "batch-generator");
            return inputs(step, next_forward++);
        }();
        if (input.defined()) input.requires_grad_(true);
        auto out = model.stage_forward(first ? in.tokens : input, in.labels, in.loss_mask, in.position_ids, in.segment_ids);
        if (last) loss_sum.add(out);
        queue.push_back({input, out});
        return out;
    };
    // Backward of the oldest micro batch in flight; returns the gradient for the previous stage.
    std::int64_t backwards = 0;
    auto backward = [&](const at::Tensor& grad_output) -> at::Tensor {
        ScopedTimer t(step.timers, "backward-compute");
        auto f = std::move(queue.front());
        queue.pop_front();
        if (++backwards == nmb && step.before_last_backward) step.before_last_backward();
        if (last) (f.output * loss_factor).backward();
        else f.output.backward(grad_output);
        return first ? at::Tensor() : f.input.grad();
    };
    for (std::int64_t i = 0; i < warmup; ++i) {
        auto out = forward(recv_forward());
        ScopedTimer t(step.timers, "forward-send");
        step.comm->exchange({{out.detach(), step.next, true, kForwardTag}});
    }
    const std::int64_t steady = nmb - warmup;
    at::Tensor input = steady > 0 ? recv_forward() : at::Tensor();
    for (std::int64_t i = 0; i < steady; ++i) {
        auto out = forward(input);
        at::Tensor grad_out;
        if (!last) {
            grad_out = activation(step);
            ScopedTimer t(step.timers, "forward-send-backward-recv");
            step.comm->exchange({{out.detach(), step.next, true, kForwardTag}, {grad_out, step.next, false, kBackwardTag}});
        }
        auto grad_in = backward(grad_out);
        if (i + 1 == steady) {
            if (!first) {
                ScopedTimer t(step.timers, "backward-send");
                step.comm->exchange({{grad_in, step.prev, true, kBackwardTag}});
            }
        } else if (!first) {
            input = activation(step);
            ScopedTimer t(step.timers, "backward-send-forward-recv");
            step.comm->exchange({{grad_in, step.prev, true, kBackwardTag}, {input, step.prev, false, kForwardTag}});
        } else {
            input = at::Tensor();
        }
    }
    for (std::int64_t i = 0; i < warmup; ++i) {
        auto grad_out = activation(step);
        {
            ScopedTimer t(step.timers, "backward-recv");
            step.comm->exchange({{grad_out, step.next, false, kBackwardTag}});
        }
        auto grad_in = backward(grad_out);
        if (!first) {
            ScopedTimer t(step.timers, "backward-send");
            step.comm->exchange({{grad_in, step.prev, true, kBackwardTag}});
        }
    }
    return loss_sum.value();
}

double pipeline_evaluate(const PipelineStep& step) {
    auto& model = *step.model;
    const bool first = step.prev < 0, last = step.next < 0;
    if ((!first || !last) && !step.comm) throw Error("a pipeline of several stages needs a communicator");
    LossSum loss_sum;
    for (std::int64_t j = 0; j < step.micro_batches; ++j) {
        const auto in = inputs(step, j);
        at::Tensor input = in.tokens;
        if (!first) {
            input = activation(step);
            step.comm->exchange({{input, step.prev, false, kForwardTag}});
        }
        auto out = model.stage_forward(input, in.labels, in.loss_mask, in.position_ids, in.segment_ids);
        if (last) loss_sum.add(out);
        else step.comm->exchange({{out, step.next, true, kForwardTag}});
    }
    return loss_sum.value();
}

}  // namespace mds::trainer
