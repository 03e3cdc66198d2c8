#include "recompute.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/ops/stack.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>
#include <vector>

#include "mds/model/gpt_model.h"

namespace mds::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The generators dropout draws from (the model's: the device's default one, and on the CPU the
// tracker's for attention dropout), whose states are replayed during recomputation.
std::vector<at::Generator> dropout_generators(const GptModel& model) {
    std::vector<at::Generator> gens{model.dropout_generator()};
    if (model.separate_attention_dropout_generator()) gens.push_back(model.attention_dropout_generator());
    return gens;
}

at::Tensor generator_states(const GptModel& model) {
    std::vector<at::Tensor> states;
    for (auto& gen : dropout_generators(model)) {
        std::lock_guard<std::mutex> lock(gen.mutex());
        states.push_back(gen.get_state());
    }
    return at::stack(states);
}

void set_generator_states(const GptModel& model, const at::Tensor& states) {
    auto gens = dropout_generators(model);
    for (std::size_t i = 0; i < gens.size(); ++i) {
        std::lock_guard<std::mutex> lock(gens[i].mutex());
        gens[i].set_state(states[static_cast<std::int64_t>(i)].clone());
    }
}

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
        if (model->training()) ctx->saved_data["rng"] = generator_states(*model);
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
                // Replay the dropout masks of the first pass, then put the generators back.
                const at::Tensor current = generator_states(*model);
                set_generator_states(*model, ctx->saved_data["rng"].toTensor());
                y = run_blocks(*model, first, count, x, bias);
                set_generator_states(*model, current);
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
