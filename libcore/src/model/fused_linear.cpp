#include "mds/model/fused_linear.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mm.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>

#include "kernels/bias_grad.h"
#include "kernels/bias_grad_ref.h"
#include "mds/model/kernel_call.h"
#include "mds/util/error.h"

namespace mds::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Σ over the rows of g2 [rows, cols] → [cols] fp32, by kernels/bias_grad.h.
at::Tensor bias_grad(const at::Tensor& g2) {
    const kernels::BiasGradShape shape{g2.size(0), g2.size(1)};
    const auto fp32 = g2.options().dtype(at::kFloat);
    auto db = at::empty({shape.cols}, fp32);
    const auto dtype = kernel_dtype(g2);
    run_kernel(
        "fused bias grad", g2, [&] { return describe_rows(shape.rows, shape.cols, g2); },
        [&](void* stream) {
            auto scratch = at::empty({kernels::bias_grad_scratch_floats(shape)}, fp32);
            kernels::bias_grad_cuda(g2.const_data_ptr(), dtype, shape, db.data_ptr<float>(), scratch.data_ptr<float>(), stream);
        },
        [&] { kernels::bias_grad_ref(g2.const_data_ptr(), dtype, shape, db.data_ptr<float>()); });
    return db;
}

struct FusedLinear : public torch::autograd::Function<FusedLinear> {
    static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
        ctx->save_for_backward({x, weight});
        return at::linear(x, weight, bias);
    }

    static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
        const auto saved = ctx->get_saved_variables();
        const auto& x = saved[0];
        const auto& weight = saved[1];
        const auto out = weight.size(0), in = weight.size(1);
        const auto g2 = grad_out[0].to(x.scalar_type()).reshape({-1, out}).contiguous();
        at::Tensor dx, dw, db;
        if (ctx->needs_input_grad(0)) dx = at::mm(g2, weight).view(x.sizes());
        if (ctx->needs_input_grad(1)) dw = at::mm(g2.t(), x.reshape({-1, in}));
        if (ctx->needs_input_grad(2) && g2.size(0) > 0) db = bias_grad(g2).to(weight.scalar_type());
        return {dx, dw, db};
    }
};

}  // namespace

std::string fused_linear_unsupported(const c10::Device& device, c10::ScalarType dtype) {
    return kernel_unsupported(device, dtype);
}

at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
    if (x.dim() < 1 || weight.dim() != 2 || bias.dim() != 1 || weight.size(1) != x.size(-1) || bias.size(0) != weight.size(0) ||
        weight.scalar_type() != x.scalar_type() || bias.scalar_type() != x.scalar_type()) {
        throw Error("fused linear: x [..., in], weight [out, in] and bias [out] of x's dtype expected, got x " +
                    c10::str(x.sizes()) + " " + c10::toString(x.scalar_type()) + ", weight " + c10::str(weight.sizes()) +
                    " " + c10::toString(weight.scalar_type()) + ", bias " + c10::str(bias.sizes()));
    }
    if (const auto why = fused_linear_unsupported(x.device(), x.scalar_type()); !why.empty()) throw Error("fused linear: " + why);
    return FusedLinear::apply(x.contiguous(), weight, bias);
}

}  // namespace mds::model
