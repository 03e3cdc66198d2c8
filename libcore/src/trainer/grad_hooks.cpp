#include "grad_hooks.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>

namespace mds::trainer {
namespace {

struct IndexHook : torch::autograd::PostAccumulateGradHook {
    std::function<void(std::size_t)> fire;
    std::size_t index;
    IndexHook(std::function<void(std::size_t)> f, std::size_t k) : fire(std::move(f)), index(k) {}
    void operator()(const torch::autograd::Variable&) override { fire(index); }
};

}  // namespace

void set_gradient_hooks(std::vector<model::Parameter>& params, const std::function<void(std::size_t)>& fire) {
    for (std::size_t k = 0; k < params.size(); ++k)
        torch::autograd::impl::set_post_acc_grad_hooks(params[k].tensor, std::make_unique<IndexHook>(fire, k));
}

void clear_gradient_hooks(std::vector<model::Parameter>& params) {
    for (auto& p : params) torch::autograd::impl::set_post_acc_grad_hooks(p.tensor, nullptr);
}

}  // namespace mds::trainer
