#include "mds/trainer/optimizer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "mds/optim/grad_clip.h"
#include "mds/util/error.h"

namespace mds::trainer {
namespace {

std::vector<at::Tensor> pick(const std::vector<at::Tensor>& v, const std::vector<std::size_t>& idx) {
    std::vector<at::Tensor> out;
    out.reserve(idx.size());
    for (auto i : idx) out.push_back(v[i]);
    return out;
}

}  // namespace

AdamOptimizer::AdamOptimizer(std::vector<model::Parameter>& params, const optim::OptimizerConfig& config)
    : params_(params), config_(config) {
    if (config_.optimizer != "adam") throw UsageError("--optimizer " + config_.optimizer + ": mds-train implements adam only");
    c10::NoGradGuard no_grad;
    // One dtype per model: fp32 training updates the parameters themselves (master = alias), and
    // their gradients are the main gradients; fp16/bf16 keeps fp32 copies of both.
    separate_master_ = !params_.empty() && params_[0].tensor.scalar_type() != at::kFloat;
    for (std::size_t i = 0; i < params_.size(); ++i) {
        const auto& p = params_[i].tensor;
        if ((p.scalar_type() != at::kFloat) != separate_master_)
            throw Error("parameter " + params_[i].full_name() + " has another dtype than the rest of the model");
        master_.push_back(separate_master_ ? p.detach().to(at::kFloat).clone() : p.detach());
        exp_avg_.push_back(at::zeros_like(master_.back()));
        exp_avg_sq_.push_back(at::zeros_like(master_.back()));
        if (separate_master_) master_grad_.push_back(at::zeros_like(master_.back()));
        (params_[i].weight_decay ? decay_ : no_decay_).push_back(i);
    }
    const auto step_opts = at::TensorOptions().dtype(at::kFloat).device(params_.empty() ? at::kCPU : params_[0].tensor.device());
    for (std::size_t i = 0; i < decay_.size(); ++i) step_decay_.push_back(at::zeros({}, step_opts));
    for (std::size_t i = 0; i < no_decay_.size(); ++i) step_no_decay_.push_back(at::zeros({}, step_opts));
}

void AdamOptimizer::zero_grad() {
    for (auto& p : params_) {
        auto g = p.tensor.mutable_grad();
        if (g.defined()) g.zero_();
    }
}

StepResult AdamOptimizer::step(double lr, double weight_decay, double loss_scale, bool check_finite, bool count_zeros) {
    c10::NoGradGuard no_grad;
    StepResult r;
    // Main gradients in fp32, unscaled. A parameter that got no gradient contributes zeros. In fp32
    // training they are the parameters' own .grad tensors, unscaled and clipped in place.
    const double inv_scale = 1.0 / loss_scale;
    if (!separate_master_) master_grad_.clear();
    for (std::size_t i = 0; i < params_.size(); ++i) {
        auto& param = params_[i].tensor;
        if (!separate_master_) {
            if (!param.grad().defined()) param.mutable_grad() = at::zeros_like(param);
            master_grad_.push_back(param.grad());
            if (inv_scale != 1.0) master_grad_.back().mul_(inv_scale);
        } else if (!param.grad().defined()) {
            master_grad_[i].zero_();
        } else {
            master_grad_[i].copy_(param.grad());
            if (inv_scale != 1.0) master_grad_[i].mul_(inv_scale);
        }
    }
    // Sum of squares in double over per-tensor fp32 norms: one reduction per tensor.
    auto norms = at::_foreach_norm(master_grad_, 2);
    const double total_sq = at::stack(norms).to(at::kDouble).pow(2).sum().item<double>();
    r.grad_norm = optim::total_norm_from_squared(total_sq);
    if (count_zeros) {
        std::int64_t zeros = 0;
        for (const auto& g : master_grad_) zeros += g.numel() - g.count_nonzero().item<std::int64_t>();
        r.num_zeros = zeros;
    }
    if (check_finite && !std::isfinite(r.grad_norm)) {
        r.skipped = true;
        return r;
    }
    if (config_.clip_grad > 0) {
        const double coeff = optim::clip_coefficient(r.grad_norm, config_.clip_grad);
        if (coeff < 1.0) at::_foreach_mul_(master_grad_, static_cast<double>(static_cast<float>(coeff)));
    }
    ++steps_;
    auto run = [&](const std::vector<std::size_t>& idx, std::vector<at::Tensor>& steps, double wd) {
        if (idx.empty()) return;
        at::_foreach_add_(steps, 1.0);
        at::_fused_adamw_(pick(master_, idx), pick(master_grad_, idx), pick(exp_avg_, idx), pick(exp_avg_sq_, idx), {}, steps,
                          lr, config_.adam_beta1, config_.adam_beta2, wd, config_.adam_eps, /*amsgrad=*/false,
                          /*maximize=*/false);
    };
    run(decay_, step_decay_, weight_decay);
    run(no_decay_, step_no_decay_, 0.0);
    if (separate_master_)
        for (std::size_t i = 0; i < params_.size(); ++i) params_[i].tensor.detach().copy_(master_[i]);
    return r;
}

void AdamOptimizer::load_state(const std::vector<at::Tensor>& master, const std::vector<at::Tensor>& exp_avg,
                               const std::vector<at::Tensor>& exp_avg_sq, std::int64_t steps) {
    c10::NoGradGuard no_grad;
    if (master.size() != params_.size() || exp_avg.size() != params_.size() || exp_avg_sq.size() != params_.size())
        throw Error("optimizer state for " + std::to_string(master.size()) + " parameters, the model has " +
                    std::to_string(params_.size()));
    for (std::size_t i = 0; i < params_.size(); ++i) {
        for (const auto* t : {&master[i], &exp_avg[i], &exp_avg_sq[i]})
            if (t->sizes() != master_[i].sizes())
                throw Error("optimizer state of " + params_[i].full_name() + " has another shape than the parameter");
        master_[i].copy_(master[i]);
        exp_avg_[i].copy_(exp_avg[i]);
        exp_avg_sq_[i].copy_(exp_avg_sq[i]);
        if (separate_master_) params_[i].tensor.detach().copy_(master_[i]);
    }
    steps_ = steps;
    for (auto* v : {&step_decay_, &step_no_decay_})
        for (auto& t : *v) t.fill_(static_cast<double>(steps));
}

double AdamOptimizer::params_norm() const {
    c10::NoGradGuard no_grad;
    auto norms = at::_foreach_norm(master_, 2);
    return std::sqrt(at::stack(norms).to(at::kDouble).pow(2).sum().item<double>());
}

}  // namespace mds::trainer
