#include "recompute.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>

#include "mds/model/gpt_model.h"

namespace mds::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The generator dropout draws from on `device`, whose state is replayed during recomputation.
at::Generator dropout_generator(const at::Tensor& x) { return at::globalContext().defaultGenerator(x.device()); }

at::Tensor run_blocks(GptModel& model, std::int64_t first, std::int64_t count, at::Tensor x, const at::Tensor& bias) {
    for (std::int64_t i = first; i < first + count; ++i) x = model.block_forward(i, x, bias);
    return x;
}

struct RecomputedBlocks : public torch::autograd::Function<RecomputedBlocks> {
    // The attention bias is passed by pointer: it needs no gradient, and may be undefined, which
    // autograd does not accept for a tensor input.
    static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor* bias_ptr, GptModel* model,
                                 std::int64_t first, std::int64_t count) {
        const at::Tensor& bias = *bias_ptr;
        // Function::apply runs forward with gradients off: nothing inside is recorded.
        ctx->saved_data["model"] = reinterpret_cast<std::int64_t>(model);
        ctx->saved_data["first"] = first;
        ctx->saved_data["count"] = count;
        if (bias.defined()) ctx->saved_data["bias"] = bias;
        if (model->training()) {
            auto gen = dropout_generator(x);
            std::lock_guard<std::mutex> lock(gen.mutex());
            ctx->saved_data["rng"] = gen.get_state();
        }
        ctx->save_for_backward({x});
        return {run_blocks(*model, first, count, x, bias)};
    }

    static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
        auto* model = reinterpret_cast<GptModel*>(ctx->saved_data["model"].toInt());
        const auto first = ctx->saved_data["first"].toInt();
        const auto count = ctx->saved_data["count"].toInt();
        const at::Tensor bias = ctx->saved_data.count("bias") ? ctx->saved_data["bias"].toTensor() : at::Tensor();
        auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);

        at::Tensor y;
        {
            at::AutoGradMode grad_on(true);
            if (ctx->saved_data.count("rng")) {
                // Replay the dropout masks of the first pass, then put the generator back.
                auto gen = dropout_generator(x);
                at::Tensor current;
                {
                    std::lock_guard<std::mutex> lock(gen.mutex());
                    current = gen.get_state();
                    gen.set_state(ctx->saved_data["rng"].toTensor());
                }
                y = run_blocks(*model, first, count, x, bias);
                std::lock_guard<std::mutex> lock(gen.mutex());
                gen.set_state(current);
            } else {
                y = run_blocks(*model, first, count, x, bias);
            }
        }
        // Accumulates into the parameters' .grad, as the first pass would have.
        torch::autograd::backward({y}, {grad_out[0]});
        return {x.grad(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

}  // namespace

at::Tensor recomputed_blocks(GptModel& model, std::int64_t first, std::int64_t count, const at::Tensor& x,
                             const at::Tensor& attn_bias) {
    return RecomputedBlocks::apply(x, &attn_bias, &model, first, count)[0];
}

}  // namespace mds::model
