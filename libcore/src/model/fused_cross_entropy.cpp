#include "mds/model/fused_cross_entropy.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>

#include "mds/model/kernel_call.h"
#include "kernels/cross_entropy.h"
#include "kernels/cross_entropy_ref.h"
#include "mds/util/error.h"

namespace mds::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The CUDA launcher, or the CPU reference with the rows split over ATen's threads; nothing for no rows.
template <typename Cuda, typename Cpu>
void run(const char* op, const at::Tensor& logits, Cuda&& cuda, Cpu&& cpu) {
    if (logits.size(0) == 0) return;
    const auto what = [&] { return describe_rows(logits.size(0), logits.size(1), logits, "logits"); };
    run_kernel(op, logits, what, cuda, [&] {
        at::parallel_for(0, logits.size(0), 1, [&](std::int64_t begin, std::int64_t end) { cpu(begin, end); });
    });
}

struct FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
    static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& labels) {
        const kernels::CrossEntropyShape shape{logits.size(0), logits.size(1), logits.stride(0)};
        const auto fp32 = logits.options().dtype(at::kFloat);
        auto loss = at::empty({shape.rows}, fp32);
        auto lse = at::empty({shape.rows}, fp32);
        const auto dtype = kernel_dtype(logits);
        run(
            "fused cross entropy forward", logits,
            [&](void* stream) {
                kernels::cross_entropy_forward_cuda(logits.const_data_ptr(), dtype, shape, labels.const_data_ptr<std::int64_t>(),
                                                    loss.data_ptr<float>(), lse.data_ptr<float>(), stream);
            },
            [&](std::int64_t begin, std::int64_t end) {
                kernels::cross_entropy_forward_ref(logits.const_data_ptr(), dtype, shape, labels.const_data_ptr<std::int64_t>(),
                                                   loss.data_ptr<float>(), lse.data_ptr<float>(), begin, end);
            });
        ctx->save_for_backward({logits, labels, lse});
        return loss;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
        const auto saved = ctx->get_saved_variables();
        const auto& logits = saved[0];
        const auto& labels = saved[1];
        const auto& lse = saved[2];
        const auto dloss = grad_out[0].to(at::kFloat).contiguous();
        // The gradient has the logits' row stride, so one shape serves both (padding columns stay unwritten).
        auto dlogits = at::empty_strided(logits.sizes(), logits.strides(), logits.options());
        const kernels::CrossEntropyShape shape{logits.size(0), logits.size(1), logits.stride(0)};
        const auto dtype = kernel_dtype(logits);
        run(
            "fused cross entropy backward", logits,
            [&](void* stream) {
                kernels::cross_entropy_backward_cuda(logits.const_data_ptr(), dtype, shape, labels.const_data_ptr<std::int64_t>(),
                                                     lse.const_data_ptr<float>(), dloss.const_data_ptr<float>(),
                                                     dlogits.data_ptr(), stream);
            },
            [&](std::int64_t begin, std::int64_t end) {
                kernels::cross_entropy_backward_ref(logits.const_data_ptr(), dtype, shape, labels.const_data_ptr<std::int64_t>(),
                                                    lse.const_data_ptr<float>(), dloss.const_data_ptr<float>(), dlogits.data_ptr(),
                                                    begin, end);
            });
        return {dlogits, at::Tensor()};
    }
};

}  // namespace

std::string fused_cross_entropy_unsupported(const c10::Device& device, c10::ScalarType dtype) {
    return kernel_unsupported(device, dtype, "logits");
}

at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& labels) {
    if (logits.dim() != 2 || labels.dim() != 1 || labels.size(0) != logits.size(0)) {
        throw Error("fused cross entropy: logits [rows, vocab] and labels [rows] expected, got logits " +
                    c10::str(logits.sizes()) + " and labels " + c10::str(labels.sizes()));
    }
    if (const auto why = fused_cross_entropy_unsupported(logits.device(), logits.scalar_type()); !why.empty()) {
        throw Error("fused cross entropy: " + why);
    }
    if (labels.device() != logits.device()) {  // the kernels read the labels where the logits are
        throw Error("fused cross entropy: logits on " + logits.device().str() + " and labels on " + labels.device().str() +
                    ": one device expected");
    }
    // Each row contiguous; rows at any stride (a view of [B, T, V] logits keeps its row stride).
    const at::Tensor x = logits.stride(1) == 1 && logits.stride(0) >= logits.size(1) ? logits : logits.contiguous();
    const at::Tensor t = labels.to(at::kLong).contiguous();
    return FusedCrossEntropy::apply(x, t);
}

}  // namespace mds::model
