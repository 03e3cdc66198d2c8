#include "mds/model/fused_layer_norm.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/native_layer_norm.h>
#include <ATen/ops/zeros_like.h>
#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <string>
#include <utility>

#include "mds/model/kernel_call.h"
#include "kernels/layer_norm.h"
#include "kernels/layer_norm_ref.h"
#include "mds/util/error.h"

namespace mds::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// LayerNorm's gradients {dx, dw, db} (dw and db in the weight's dtype) from dy, the LayerNorm's input x and the
// forward's per-row mean and rstd (fp32), by kernels/layer_norm.h's backward; `dres` (may be undefined), x's gradient
// along another path, added into dx by the kernel.
std::array<at::Tensor, 3> layer_norm_backward(const at::Tensor& dy_in, const at::Tensor& x, const at::Tensor& weight,
                                              const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& dres_in = {}) {
    // No rows or no columns: nothing to add up (the kernels take one of each at least).
    if (x.numel() == 0) return {at::zeros_like(x), at::zeros_like(weight), at::zeros_like(weight)};
    const auto dy = dy_in.to(x.scalar_type()).contiguous();
    const auto dres = dres_in.defined() ? dres_in.to(x.scalar_type()).contiguous() : at::Tensor();
    const void* dres_ptr = dres.defined() ? dres.const_data_ptr() : nullptr;
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
                                              scratch.data_ptr<float>(), stream, dres_ptr);
        },
        [&] {
            kernels::layer_norm_backward_ref(dy.const_data_ptr(), x.const_data_ptr(), weight.const_data_ptr(), dtype,
                                             mean.const_data_ptr<float>(), rstd.const_data_ptr<float>(), shape,
                                             dx.data_ptr(), dw.data_ptr<float>(), db.data_ptr<float>(), dres_ptr);
        });
    return {dx, dw.to(weight.scalar_type()), db.to(weight.scalar_type())};
}

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
        auto [dx, dw, db] = layer_norm_backward(grad_out[0], saved[0], saved[1], saved[2], saved[3]);
        return {dx, dw, db, at::Tensor()};
    }
};

// s = a + b and y = LayerNorm(s) in one pass (kernels/layer_norm.h's forward with the residual sum).
struct FusedResidualLayerNorm : public torch::autograd::Function<FusedResidualLayerNorm> {
    static variable_list forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b, const at::Tensor& weight,
                                 const at::Tensor& bias, double eps) {
        auto s = at::empty_like(a), y = at::empty_like(a);
        const kernels::LayerNormShape shape{a.numel() / a.size(-1), a.size(-1)};
        const auto fp32 = a.options().dtype(at::kFloat);
        auto mean = at::empty({shape.rows}, fp32), rstd = at::empty({shape.rows}, fp32);
        if (a.numel() > 0) {
            const auto dtype = kernel_dtype(a);
            const auto e = static_cast<float>(eps);
            run_kernel(
                "fused residual layer norm", a, [&] { return describe_rows(shape.rows, shape.cols, a); },
                [&](void* stream) {
                    kernels::residual_layer_norm_forward_cuda(a.const_data_ptr(), b.const_data_ptr(), weight.const_data_ptr(),
                                                              bias.const_data_ptr(), dtype, e, shape, s.data_ptr(), y.data_ptr(),
                                                              mean.data_ptr<float>(), rstd.data_ptr<float>(), stream);
                },
                [&] {
                    kernels::residual_layer_norm_forward_ref(a.const_data_ptr(), b.const_data_ptr(), weight.const_data_ptr(),
                                                             bias.const_data_ptr(), dtype, e, shape, s.data_ptr(), y.data_ptr(),
                                                             mean.data_ptr<float>(), rstd.data_ptr<float>());
                });
        }
        ctx->save_for_backward({s, weight, mean, rstd});
        return {s, y};
    }

    // The residual stream's gradient: the LayerNorm's input gradient plus what came back along s itself (added by the
    // backward kernel); a and b get it both, as their sum's.
    static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
        const auto saved = ctx->get_saved_variables();
        const auto& s = saved[0];
        const auto& weight = saved[1];
        at::Tensor ds, dw, db;
        if (grad_out[1].defined()) {
            auto g = layer_norm_backward(grad_out[1], s, weight, saved[2], saved[3], grad_out[0]);
            ds = std::move(g[0]);
            dw = std::move(g[1]);
            db = std::move(g[2]);
        } else {
            ds = grad_out[0].defined() ? grad_out[0].to(s.scalar_type()) : at::zeros_like(s);
            dw = at::zeros_like(weight);
            db = at::zeros_like(weight);
        }
        return {ds, ds, dw, db, at::Tensor()};
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

std::pair<at::Tensor, at::Tensor> fused_residual_layer_norm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& weight,
                                                             const at::Tensor& bias, double eps) {
    if (a.dim() < 1 || a.sizes() != b.sizes() || weight.dim() != 1 || bias.dim() != 1 || weight.size(0) != a.size(-1) ||
        bias.size(0) != a.size(-1) || b.scalar_type() != a.scalar_type() || weight.scalar_type() != a.scalar_type() ||
        bias.scalar_type() != a.scalar_type()) {
        throw Error("fused residual layer norm: a and b [..., C] and weight and bias [C], all of a's dtype, expected; got a " +
                    c10::str(a.sizes()) + " " + c10::toString(a.scalar_type()) + ", b " + c10::str(b.sizes()) + " " +
                    c10::toString(b.scalar_type()) + ", weight " + c10::str(weight.sizes()) + " " +
                    c10::toString(weight.scalar_type()));
    }
    if (const auto why = fused_layer_norm_unsupported(a.device(), a.scalar_type()); !why.empty())
        throw Error("fused residual layer norm: " + why);
    const auto out = FusedResidualLayerNorm::apply(a.contiguous(), b.contiguous(), weight.contiguous(), bias.contiguous(), eps);
    return {out[0], out[1]};
}

}  // namespace mds::model
