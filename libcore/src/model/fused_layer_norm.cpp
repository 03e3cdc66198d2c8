#include "mds/model/fused_layer_norm.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/native_layer_norm.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>

#include "mds/model/kernel_call.h"
#include "kernels/layer_norm.h"
#include "kernels/layer_norm_ref.h"
#include "mds/util/error.h"

namespace mds::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedLayerNorm : public torch::autograd::Function<FusedLayerNorm> {
    static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                              double eps) {
        const auto [out, mean, rstd] = at::native_layer_norm(x, {x.size(-1)}, weight, bias, eps);
        // ATen keeps them in fp32 on CUDA; on the CPU in x's dtype.
        ctx->save_for_backward({x, weight, mean.to(at::kFloat).contiguous(), rstd.to(at::kFloat).contiguous()});
        return out;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
        const auto saved = ctx->get_saved_variables();
        const auto& x = saved[0];
        const auto& weight = saved[1];
        const auto& mean = saved[2];
        const auto& rstd = saved[3];
        // No rows or no columns: nothing to add up (the kernels take one of each at least).
        if (x.numel() == 0) return {at::zeros_like(x), at::zeros_like(weight), at::zeros_like(weight), at::Tensor()};
        const auto dy = grad_out[0].to(x.scalar_type()).contiguous();
        const kernels::LayerNormShape shape{x.numel() / x.size(-1), x.size(-1)};
        auto dx = at::empty_like(x);
        const auto fp32 = x.options().dtype(at::kFloat);
        auto dw = at::empty({shape.cols}, fp32);
        auto db = at::empty({shape.cols}, fp32);
        const auto dtype = kernel_dtype(x);
        run_kernel(
            "fused layer norm backward", x, [&] { return describe_rows(shape.rows, shape.cols, x); },
            [&](void* stream) {
                auto scratch = at::empty({kernels::layer_norm_scratch_floats(shape)}, fp32);
                kernels::layer_norm_backward_cuda(dy.const_data_ptr(), x.const_data_ptr(), weight.const_data_ptr(), dtype,
                                                  mean.const_data_ptr<float>(), rstd.const_data_ptr<float>(), shape,
                                                  dx.data_ptr(), dw.data_ptr<float>(), db.data_ptr<float>(),
                                                  scratch.data_ptr<float>(), stream);
            },
            [&] {
                kernels::layer_norm_backward_ref(dy.const_data_ptr(), x.const_data_ptr(), weight.const_data_ptr(), dtype,
                                                 mean.const_data_ptr<float>(), rstd.const_data_ptr<float>(), shape,
                                                 dx.data_ptr(), dw.data_ptr<float>(), db.data_ptr<float>());
            });
        return {dx, dw.to(weight.scalar_type()), db.to(weight.scalar_type()), at::Tensor()};
    }
};

}  // namespace

std::string fused_layer_norm_unsupported(const c10::Device& device, c10::ScalarType dtype) {
    return kernel_unsupported(device, dtype);
}

at::Tensor fused_layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
    if (x.dim() < 1 || weight.dim() != 1 || bias.dim() != 1 || weight.size(0) != x.size(-1) || bias.size(0) != x.size(-1) ||
        weight.scalar_type() != x.scalar_type() || bias.scalar_type() != x.scalar_type()) {
        throw Error("fused layer norm: x [..., C] and weight and bias [C] of x's dtype expected, got x " + c10::str(x.sizes()) +
                    " " + c10::toString(x.scalar_type()) + ", weight " + c10::str(weight.sizes()) + " " +
                    c10::toString(weight.scalar_type()));
    }
    if (const auto why = fused_layer_norm_unsupported(x.device(), x.scalar_type()); !why.empty())
        throw Error("fused layer norm: " + why);
    return FusedLayerNorm::apply(x.contiguous(), weight.contiguous(), bias.contiguous(), eps);
}

}  // namespace mds::model
