#include "mds/trainer/optimizer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>

#include "fused_adam.h"
#include "mds/optim/grad_clip.h"
#include "mds/trainer/comm.h"
#include "mds/trainer/main_grads.h"
#include "mds/util/error.h"

namespace mds::trainer {
namespace {

std::vector<at::Tensor> pick(const std::vector<at::Tensor>& v, const std::vector<std::size_t>& idx) {
    std::vector<at::Tensor> out;
    out.reserve(idx.size());
    for (auto i : idx) out.push_back(v[i]);
    return out;
}

at::Tensor flat_view(const at::Tensor& t, const Fragment& f) { return t.detach().view({-1}).narrow(0, f.offset, f.length); }

// An fp32 host tensor shaped as `like`, pinned when `like` is on CUDA: page-locked memory lets the
// device <-> host copies of every step run as DMA transfers at full bandwidth.
at::Tensor host_buffer(const at::Tensor& like) {
    return at::empty(like.sizes(), at::TensorOptions().dtype(at::kFloat).device(at::kCPU).pinned_memory(like.is_cuda()));
}

// A host fp32 copy of `t` (any device, any dtype): a separate tensor even when `t` is on the CPU.
at::Tensor host_copy(const at::Tensor& t) { return host_buffer(t).copy_(t.detach()); }

}  // namespace

std::vector<FlatGroup> optimizer_groups(const std::vector<model::Parameter>& params, std::int64_t dp) {
    std::vector<std::size_t> order;
    std::vector<bool> decay;
    std::vector<std::int64_t> numel;
    for (std::size_t i = 0; i < params.size(); ++i) {
        order.push_back(i);
        decay.push_back(params[i].weight_decay);
        numel.push_back(params[i].tensor.numel());
    }
    return ckpt::ds_optimizer_layout(ckpt::megatron_param_groups(order, decay, 3), numel, static_cast<int>(dp));
}

// The partitioned state: for each flat group, every rank's fragments (the gather needs the others'),
// and this rank's masters, moments and step counters, one per own fragment.
struct AdamOptimizer::Zero1 {
    Communicator* comm = nullptr;
    int rank = 0, size = 1;
    std::vector<FlatGroup> groups;   // with every rank's fragments (the gather needs the others')
    std::vector<Fragment> own;       // this rank's fragments, all groups
    std::vector<bool> own_decay;     // weight decay of each own fragment
    std::vector<at::Tensor> master, exp_avg, exp_avg_sq, steps;
    std::vector<at::Tensor> host_grad;  // offloaded: the fp32 host copies of the own gradient fragments
};

AdamOptimizer::~AdamOptimizer() = default;

AdamOptimizer::AdamOptimizer(std::vector<model::Parameter>& params, const optim::OptimizerConfig& config, Communicator* zero1,
                             bool host_offload, MainGrads* main_grads)
    : params_(params), main_(main_grads), config_(config), offload_(host_offload) {
    if (config_.optimizer != "adam") throw UsageError("--optimizer " + config_.optimizer + ": mds-train implements adam only");
    c10::NoGradGuard no_grad;
    const bool partition = zero1 && zero1->members(Group::Data).size() > 1;
    if (config_.adam_step_fusion) {
        if (offload_) throw UsageError("--adam-step-fusion: not with the optimizer offloaded to the host (--cpu-optimizer)");
        if (!params_.empty()) {
            if (const auto why = fused_adam_unsupported(params_[0].tensor); !why.empty())
                throw UsageError("--adam-step-fusion: " + why + (params_[0].tensor.scalar_type() == at::kBFloat16 ? "" : " (needs --bf16)"));
        }
    }
    if (partition) {
        auto z = std::make_unique<Zero1>();
        z->comm = zero1;
        const auto members = zero1->members(Group::Data);
        z->size = static_cast<int>(members.size());
        z->rank = static_cast<int>(std::find(members.begin(), members.end(), zero1->rank()) - members.begin());
        z->groups = optimizer_groups(params_, z->size);
        separate_master_ = !params_.empty() && params_[0].tensor.scalar_type() != at::kFloat;
        for (const auto& p : params_)
            if ((p.tensor.scalar_type() != at::kFloat) != separate_master_)
                throw Error("parameter " + p.full_name() + " has another dtype than the rest of the model");
        for (const auto& g : z->groups)
            for (const auto& f : g.fragments[static_cast<std::size_t>(z->rank)]) {
                z->own.push_back(f);
                z->own_decay.push_back(g.weight_decay);
            }
        const auto& p0 = params_.empty() ? at::Tensor() : params_[0].tensor;
        for (const auto& f : z->own) {
            const auto view = flat_view(params_[f.param].tensor, f);
            z->master.push_back(offload_ ? host_copy(view) : separate_master_ ? view.to(at::kFloat).clone() : view);
            z->exp_avg.push_back(at::zeros_like(z->master.back()));
            z->exp_avg_sq.push_back(at::zeros_like(z->master.back()));
            if (!config_.adam_step_fusion)
                z->steps.push_back(at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(offload_ ? at::kCPU : p0.device())));
            if (offload_) z->host_grad.push_back(host_buffer(view));
        }
        if (config_.adam_step_fusion) {
            // The norm over every whole gradient (each rank holds them all, averaged); the update over this
            // rank's fragments, their masters and moments.
            std::vector<at::Tensor> model;
            for (const auto& p : params_) model.push_back(p.tensor);
            std::vector<FusedAdamSlice> slices;
            for (std::size_t k = 0; k < z->own.size(); ++k)
                slices.push_back({z->own[k].param, z->own[k].offset, z->own[k].length, z->master[k], z->exp_avg[k],
                                  z->exp_avg_sq[k], z->own_decay[k]});
            fused_ = std::make_unique<FusedAdam>(std::move(model), std::move(slices));
            if (main_) fused_->use_main_grads(main_->grads());
        }
        zero_ = std::move(z);
        return;
    }
    // One dtype per model: fp32 training updates the parameters themselves (master = alias), and
    // their gradients are the main gradients; fp16/bf16 keeps fp32 copies of both.
    separate_master_ = !params_.empty() && params_[0].tensor.scalar_type() != at::kFloat;
    for (std::size_t i = 0; i < params_.size(); ++i) {
        const auto& p = params_[i].tensor;
        if ((p.scalar_type() != at::kFloat) != separate_master_)
            throw Error("parameter " + params_[i].full_name() + " has another dtype than the rest of the model");
        // Offloaded, the masters are host copies even in fp32 (the device keeps only the model).
        master_.push_back(offload_ ? host_copy(p) : separate_master_ ? p.detach().to(at::kFloat).clone() : p.detach());
        exp_avg_.push_back(at::zeros_like(master_.back()));
        exp_avg_sq_.push_back(at::zeros_like(master_.back()));
        if ((separate_master_ && !config_.adam_step_fusion && !main_) || offload_)
            master_grad_.push_back(at::zeros_like(master_.back()));
        (params_[i].weight_decay ? decay_ : no_decay_).push_back(i);
    }
    if (config_.adam_step_fusion && !params_.empty()) {
        std::vector<at::Tensor> model;
        std::vector<bool> decay;
        for (const auto& p : params_) {
            model.push_back(p.tensor);
            decay.push_back(p.weight_decay);
        }
        fused_ = std::make_unique<FusedAdam>(std::move(model), master_, exp_avg_, exp_avg_sq_, decay);
        if (main_) fused_->use_main_grads(main_->grads());
    }
    if (fused_) return;  // the fused step counts its steps in steps_ alone
    const auto step_opts = at::TensorOptions().dtype(at::kFloat).device(
        params_.empty() || offload_ ? c10::Device(at::kCPU) : params_[0].tensor.device());
    for (std::size_t i = 0; i < decay_.size(); ++i) step_decay_.push_back(at::zeros({}, step_opts));
    for (std::size_t i = 0; i < no_decay_.size(); ++i) step_no_decay_.push_back(at::zeros({}, step_opts));
}

void AdamOptimizer::zero_grad() {
    if (main_) return main_->zero();
    for (auto& p : params_) {
        auto g = p.tensor.mutable_grad();
        if (g.defined()) g.zero_();
    }
}

StepResult AdamOptimizer::step(double lr, double weight_decay, double loss_scale, bool check_finite, bool count_zeros) {
    if (fused_) return step_fused(lr, weight_decay, loss_scale, check_finite, count_zeros);
    if (zero_) return step_partitioned(lr, weight_decay, loss_scale, check_finite, count_zeros);
    c10::NoGradGuard no_grad;
    StepResult r;
    // Main gradients in fp32, unscaled. A parameter that got no gradient contributes zeros. In fp32
    // training they are the parameters' own .grad tensors, unscaled and clipped in place.
    const double inv_scale = 1.0 / loss_scale;
    // Offloaded: the device gradients are copied (device -> host, to fp32) into the host buffers and
    // everything below runs on those.
    const bool copies = (separate_master_ && !main_) || offload_;
    if (!copies) {
        master_grad_ = gradients();  // fp32 already: the parameters' .grad, or the main gradients
        if (inv_scale != 1.0) at::_foreach_mul_(master_grad_, inv_scale);
    }
    for (std::size_t i = 0; copies && i < params_.size(); ++i) {
        const auto& g = main_ ? main_->grads()[i] : params_[i].tensor.grad();
        if (!g.defined()) {
            master_grad_[i].zero_();
        } else {
            master_grad_[i].copy_(g);
            if (inv_scale != 1.0) master_grad_[i].mul_(inv_scale);
        }
    }
    const auto coeff = measure(master_grad_, master_grad_, check_finite, count_zeros, r);
    if (!coeff) return r;
    if (*coeff < 1.0) at::_foreach_mul_(master_grad_, *coeff);
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
    // Back into the model (host -> device when offloaded), rounded to its dtype.
    if (separate_master_ || offload_)
        for (std::size_t i = 0; i < params_.size(); ++i) params_[i].tensor.detach().copy_(master_[i]);
    return r;
}

std::vector<at::Tensor> AdamOptimizer::gradients() {
    if (main_) return main_->grads();
    std::vector<at::Tensor> out;
    out.reserve(params_.size());
    for (auto& p : params_) {
        if (!p.tensor.grad().defined()) p.tensor.mutable_grad() = at::zeros_like(p.tensor);
        out.push_back(p.tensor.grad());
    }
    return out;
}

std::optional<double> AdamOptimizer::measure(const std::vector<at::Tensor>& norm_of, const std::vector<at::Tensor>& zeros_of,
                                             bool check_finite, bool count_zeros, StepResult& r) const {
    // DeepSpeed's get_grad_norm_direct: each tensor's norm accumulated in fp64 (get_norm_dtype), then
    // the sum of their squares. An fp32 reduction (torch's _foreach_norm) comes out ~4e-4 relative
    // low on a 3.2M-element embedding gradient, and clipping with it.
    std::vector<at::Tensor> norms;
    norms.reserve(norm_of.size());
    for (const auto& g : norm_of) norms.push_back(at::linalg_vector_norm(g, 2, std::nullopt, false, at::kDouble));
    return measure_squares(at::stack(norms).pow(2), zeros_of, check_finite, count_zeros, r);
}

std::optional<double> AdamOptimizer::measure_squares(const at::Tensor& squares, const std::vector<at::Tensor>& zeros_of,
                                                     bool check_finite, bool count_zeros, StepResult& r) const {
    r.grad_norm = optim::total_norm_from_squared(model_parallel_total(squares));
    if (count_zeros) r.num_zeros = count_zeros_of(zeros_of);
    if (check_finite && !std::isfinite(r.grad_norm)) {
        r.skipped = true;
        return std::nullopt;
    }
    return optim::clip_factor(r.grad_norm, config_.clip_grad);
}

StepResult AdamOptimizer::step_fused(double lr, double weight_decay, double loss_scale, bool check_finite,
                                     bool count_zeros) {
    c10::NoGradGuard no_grad;
    StepResult r;
    // The unscaling as the unfused step's fp32 multiply (by 1/loss scale in fp32), then clipping by the norm of
    // the unscaled gradients, every element in one pass.
    const auto grad_scale = static_cast<float>(1.0 / loss_scale);
    const auto squares = fused_->grad_sumsq(grad_scale);  // gives every parameter a gradient
    const auto grads = count_zeros ? gradients() : std::vector<at::Tensor>{};
    const auto coeff = measure_squares(squares, grads, check_finite, count_zeros, r);
    if (!coeff) return r;
    ++steps_;
    kernels::AdamHyper h;
    h.grad_scale = grad_scale;
    h.clip = *coeff < 1.0 ? static_cast<float>(*coeff) : 1.0f;
    h.lr = lr;
    h.beta1 = config_.adam_beta1;
    h.beta2 = config_.adam_beta2;
    h.eps = config_.adam_eps;
    h.weight_decay[0] = weight_decay;
    h.weight_decay[1] = 0.0;
    h.step = steps_;
    fused_->step(h);  // this rank's partition (all of it unpartitioned)
    if (zero_) gather_partitions();
    return r;
}

StepResult AdamOptimizer::step_partitioned(double lr, double weight_decay, double loss_scale, bool check_finite,
                                           bool count_zeros) {
    c10::NoGradGuard no_grad;
    auto& z = *zero_;
    StepResult r;
    // The norm and the zero count over the full (data-parallel averaged) gradients, as one process.
    auto grads = gradients();
    const bool fp32_grads = !separate_master_ || main_;  // else fp32 copies of the fragments
    const double inv_scale = 1.0 / loss_scale;
    // This rank's fragments of the main gradients, in fp32 and unscaled.
    std::vector<at::Tensor> frag_grads;
    // Offloaded: host fp32 copies (device -> host), unscaled there.
    for (std::size_t k = 0; k < z.own.size(); ++k) {
        auto g = flat_view(grads[z.own[k].param], z.own[k]);
        frag_grads.push_back(offload_ ? z.host_grad[k].copy_(g) : fp32_grads ? g : g.to(at::kFloat));
    }
    if (fp32_grads && inv_scale != 1.0) {
        for (auto& g : grads) g.mul_(inv_scale);
        if (offload_ && !frag_grads.empty()) at::_foreach_mul_(frag_grads, inv_scale);
    } else if (inv_scale != 1.0 && !frag_grads.empty()) {
        at::_foreach_mul_(frag_grads, inv_scale);
    }
    std::vector<at::Tensor> norm_of;
    if (!fp32_grads) {
        for (auto& g : grads) norm_of.push_back(inv_scale != 1.0 ? g.to(at::kFloat).mul_(inv_scale) : g.to(at::kFloat));
    } else {
        norm_of = grads;
    }
    const auto coeff = measure(norm_of, grads, check_finite, count_zeros, r);
    norm_of.clear();
    if (!coeff) return r;
    if (*coeff < 1.0 && !frag_grads.empty()) at::_foreach_mul_(frag_grads, *coeff);
    ++steps_;
    for (const bool decay : {true, false}) {
        std::vector<at::Tensor> m, g, m1, m2, st;
        for (std::size_t k = 0; k < z.own.size(); ++k) {
            if (z.own_decay[k] != decay) continue;
            m.push_back(z.master[k]);
            g.push_back(frag_grads[k]);
            m1.push_back(z.exp_avg[k]);
            m2.push_back(z.exp_avg_sq[k]);
            st.push_back(z.steps[k]);
        }
        if (m.empty()) continue;
        at::_foreach_add_(st, 1.0);
        at::_fused_adamw_(m, g, m1, m2, {}, st, lr, config_.adam_beta1, config_.adam_beta2, decay ? weight_decay : 0.0,
                          config_.adam_eps, /*amsgrad=*/false, /*maximize=*/false);
    }
    if (separate_master_ || offload_)
        for (std::size_t k = 0; k < z.own.size(); ++k) flat_view(params_[z.own[k].param].tensor, z.own[k]).copy_(z.master[k]);
    gather_partitions();
    return r;
}

void AdamOptimizer::gather_partitions() {
    // Every rank's updated partition to every rank, one flat buffer per group in the parameters' dtype.
    const auto& z = *zero_;
    const auto dtype = params_.empty() ? at::kFloat : params_[0].tensor.scalar_type();
    const auto device = params_.empty() ? c10::Device(at::kCPU) : params_[0].tensor.device();
    for (const auto& group : z.groups) {
        auto mine = at::zeros({group.partition}, at::TensorOptions().dtype(dtype).device(device));
        for (const auto& f : group.fragments[static_cast<std::size_t>(z.rank)])
            mine.narrow(0, f.part_offset, f.length).copy_(flat_view(params_[f.param].tensor, f));
        const auto all = z.comm->all_gather(mine, Group::Data);
        for (int rr = 0; rr < z.size; ++rr) {
            if (rr == z.rank) continue;
            for (const auto& f : group.fragments[static_cast<std::size_t>(rr)])
                flat_view(params_[f.param].tensor, f).copy_(all[static_cast<std::size_t>(rr)].narrow(0, f.part_offset, f.length));
        }
    }
}

StatePartition AdamOptimizer::state_partition(int rank, int count) const {
    StatePartition out;
    out.rank = rank;
    out.count = count;
    if (zero_) {
        const auto& z = *zero_;
        if (rank != z.rank || count != z.size)
            throw Error("the optimizer holds partition " + std::to_string(z.rank) + " of " + std::to_string(z.size) +
                        ", not " + std::to_string(rank) + " of " + std::to_string(count));
        out.groups = z.groups;
        std::size_t k = 0;
        for (const auto& g : z.groups) {
            out.partition_numel.push_back(g.partition);
            out.slices.emplace_back();
            for (const auto& f : g.fragments[static_cast<std::size_t>(rank)]) {
                out.slices.back().push_back({f, z.master[k], z.exp_avg[k], z.exp_avg_sq[k]});
                ++k;
            }
        }
        return out;
    }
    out.groups = optimizer_groups(params_, count);
    for (const auto& g : out.groups) {
        out.partition_numel.push_back(g.partition);
        out.slices.emplace_back();
        for (const auto& f : g.fragments[static_cast<std::size_t>(rank)])
            out.slices.back().push_back({f, flat_view(master_[f.param], f), flat_view(exp_avg_[f.param], f),
                                         flat_view(exp_avg_sq_[f.param], f)});
    }
    return out;
}

void AdamOptimizer::set_model_parallel_sums(std::function<double(double)> tp_sum, std::function<double(double)> pp_sum) {
    tp_sum_ = std::move(tp_sum);
    pp_sum_ = std::move(pp_sum);
    std::vector<double> sharded, counted;
    for (const auto& p : params_) {
        sharded.push_back(p.split != model::TpSplit::Replicated ? 1.0 : 0.0);
        counted.push_back(p.tied_copy ? 0.0 : 1.0);
    }
    const auto opts = at::TensorOptions().dtype(at::kDouble);
    const c10::Device device = params_.empty() ? c10::Device(at::kCPU) : params_[0].tensor.device();
    sharded_mask_ = at::tensor(sharded, opts).to(device);
    counted_mask_ = at::tensor(counted, opts).to(device);
}

double AdamOptimizer::model_parallel_total(double sharded, double replicated) const {
    const double stage = (tp_sum_ ? tp_sum_(sharded) : sharded) + replicated;
    return pp_sum_ ? pp_sum_(stage) : stage;
}

double AdamOptimizer::model_parallel_total(const at::Tensor& per_param) const {
    if (!sharded_mask_.defined()) return per_param.sum().item<double>();
    // Offloaded, the per-parameter values may come from host tensors while the masks are on the device.
    const auto counted = per_param.to(counted_mask_.device()) * counted_mask_;
    return model_parallel_total((counted * sharded_mask_).sum().item<double>(), (counted * (1.0 - sharded_mask_)).sum().item<double>());
}

std::int64_t AdamOptimizer::count_zeros_of(const std::vector<at::Tensor>& grads) const {
    std::vector<double> zeros;
    for (const auto& g : grads) zeros.push_back(static_cast<double>(g.numel() - g.count_nonzero().item<std::int64_t>()));
    return static_cast<std::int64_t>(std::llround(model_parallel_total(
        at::tensor(zeros, at::TensorOptions().dtype(at::kDouble)).to(sharded_mask_.defined() ? sharded_mask_.device() : at::kCPU))));
}

std::int64_t AdamOptimizer::state_elements() const {
    std::int64_t n = 0;
    for (const auto& t : zero_ ? zero_->master : master_) n += t.numel();
    return n;
}

const std::vector<at::Tensor>& AdamOptimizer::master_params() const {
    if (zero_) throw Error("the optimizer states are partitioned over the data-parallel ranks (ZeRO-1)");
    return master_;
}
const std::vector<at::Tensor>& AdamOptimizer::exp_avg() const {
    if (zero_) throw Error("the optimizer states are partitioned over the data-parallel ranks (ZeRO-1)");
    return exp_avg_;
}
const std::vector<at::Tensor>& AdamOptimizer::exp_avg_sq() const {
    if (zero_) throw Error("the optimizer states are partitioned over the data-parallel ranks (ZeRO-1)");
    return exp_avg_sq_;
}

void AdamOptimizer::load_state(const std::vector<at::Tensor>& master, const std::vector<at::Tensor>& exp_avg,
                               const std::vector<at::Tensor>& exp_avg_sq, std::int64_t steps) {
    c10::NoGradGuard no_grad;
    if (master.size() != params_.size() || exp_avg.size() != params_.size() || exp_avg_sq.size() != params_.size())
        throw Error("optimizer state for " + std::to_string(master.size()) + " parameters, the model has " +
                    std::to_string(params_.size()));
    if (zero_) {
        auto& z = *zero_;
        for (std::size_t i = 0; i < params_.size(); ++i) {
            for (const auto* t : {&master[i], &exp_avg[i], &exp_avg_sq[i]})
                if (t->sizes() != params_[i].tensor.sizes())
                    throw Error("optimizer state of " + params_[i].full_name() + " has another shape than the parameter");
            if (separate_master_) params_[i].tensor.detach().copy_(master[i]);
        }
        for (std::size_t k = 0; k < z.own.size(); ++k) {
            const auto& f = z.own[k];
            z.master[k].copy_(flat_view(master[f.param], f));
            z.exp_avg[k].copy_(flat_view(exp_avg[f.param], f));
            z.exp_avg_sq[k].copy_(flat_view(exp_avg_sq[f.param], f));
        }
        if (!separate_master_)
            for (std::size_t i = 0; i < params_.size(); ++i) params_[i].tensor.detach().copy_(master[i]);
        steps_ = steps;
        for (auto& t : z.steps) t.fill_(static_cast<double>(steps));
        return;
    }
    for (std::size_t i = 0; i < params_.size(); ++i) {
        for (const auto* t : {&master[i], &exp_avg[i], &exp_avg_sq[i]})
            if (t->sizes() != master_[i].sizes())
                throw Error("optimizer state of " + params_[i].full_name() + " has another shape than the parameter");
        master_[i].copy_(master[i]);
        exp_avg_[i].copy_(exp_avg[i]);
        exp_avg_sq_[i].copy_(exp_avg_sq[i]);
        if (separate_master_ || offload_) params_[i].tensor.detach().copy_(master_[i]);
    }
    steps_ = steps;
    for (auto* v : {&step_decay_, &step_no_decay_})
        for (auto& t : *v) t.fill_(static_cast<double>(steps));
}

double AdamOptimizer::params_norm() const {
    c10::NoGradGuard no_grad;
    if (zero_) {
        // Over the data-parallel group, then sharded parameters over the tensor-parallel group.
        double sharded = 0, replicated = 0;
        for (std::size_t k = 0; k < zero_->own.size(); ++k) {
            const auto& p = params_[zero_->own[k].param];
            if (p.tied_copy) continue;
            const double sq = zero_->master[k].to(at::kDouble).pow(2).sum().item<double>();
            (p.split != model::TpSplit::Replicated && tp_sum_ ? sharded : replicated) += sq;
        }
        sharded = zero_->comm->sum(sharded, Group::Data);
        replicated = zero_->comm->sum(replicated, Group::Data);
        return std::sqrt(model_parallel_total(sharded, replicated));
    }
    auto norms = at::_foreach_norm(master_, 2);
    return std::sqrt(model_parallel_total(at::stack(norms).to(at::kDouble).pow(2)));
}

}  // namespace mds::trainer
