#include "mds/trainer/main_grads.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <string>

#include "grad_hooks.h"
#include "mds/util/error.h"

namespace mds::trainer {

struct MainGrads::Impl {
    std::vector<model::Parameter>& params;
    at::Tensor flat;
    std::vector<at::Tensor> views;
    std::function<void(std::size_t)> listener;

    explicit Impl(std::vector<model::Parameter>& p) : params(p) {}

    // Parameter k's micro-batch gradient, just accumulated into its .grad by autograd, into the fp32 view.
    void take(std::size_t k) {
        auto& grad = params[k].tensor.mutable_grad();
        if (const auto& sink = params[k].main_grad; sink && sink->added) {
            sink->added = false;  // the backward added into views[k] itself; `grad` is its placeholder
            grad.reset();
        } else if (grad.defined()) {
            c10::NoGradGuard no_grad;
            views[k].add_(grad);
            grad.reset();
        }
        if (listener) listener(k);
    }
};

MainGrads::MainGrads(std::vector<model::Parameter>& params) : impl_(std::make_shared<Impl>(params)) {
    auto& m = *impl_;
    std::int64_t total = 0;
    for (const auto& p : params) {
        if (p.tensor.device() != params.front().tensor.device())
            throw Error("fp32 main gradients: parameter " + p.full_name() + " is on " + p.tensor.device().str() +
                        ", the first on " + params.front().tensor.device().str());
        total += p.tensor.numel();
    }
    const auto device = params.empty() ? c10::Device(at::kCPU) : params.front().tensor.device();
    m.flat = at::zeros({total}, at::TensorOptions().dtype(at::kFloat).device(device));
    std::int64_t offset = 0;
    for (const auto& p : params) {
        m.views.push_back(m.flat.narrow(0, offset, p.tensor.numel()).view(p.tensor.sizes()));
        if (p.main_grad) p.main_grad->grad = m.views.back();  // --gradient-accumulation-fusion's target
        offset += p.tensor.numel();
    }
    set_gradient_hooks(params, [w = std::weak_ptr<Impl>(impl_)](std::size_t k) {
        if (auto owner = w.lock()) owner->take(k);
    });
}

MainGrads::~MainGrads() {
    clear_gradient_hooks(impl_->params);
    for (auto& p : impl_->params)
        if (p.main_grad) {  // a later backward returns the weight's gradient again
            p.main_grad->grad.reset();
            p.main_grad->added = false;
        }
}

void MainGrads::zero() {
    impl_->flat.zero_();
    for (auto& p : impl_->params) p.tensor.mutable_grad().reset();
}

const std::vector<at::Tensor>& MainGrads::grads() const { return impl_->views; }
const at::Tensor& MainGrads::flat() const { return impl_->flat; }

at::Tensor MainGrads::range(std::size_t first, std::size_t last) const {
    const auto& views = impl_->views;
    if (first > last || last >= views.size())
        throw Error("fp32 main gradients: no parameters " + std::to_string(first) + ".." + std::to_string(last) + " of " +
                    std::to_string(views.size()));
    const auto begin = views[first].storage_offset() - impl_->flat.storage_offset();
    const auto end = views[last].storage_offset() - impl_->flat.storage_offset() + views[last].numel();
    return impl_->flat.narrow(0, begin, end - begin);
}

const at::Tensor& MainGrads::of(const at::Tensor& param) const {
    for (std::size_t k = 0; k < impl_->params.size(); ++k)
        if (impl_->params[k].tensor.unsafeGetTensorImpl() == param.unsafeGetTensorImpl()) return impl_->views[k];
    throw Error("fp32 main gradients: a tensor that is not one of the model's parameters");
}

void MainGrads::set_listener(std::function<void(std::size_t)> listener) { impl_->listener = std::move(listener); }

}  // namespace mds::trainer
