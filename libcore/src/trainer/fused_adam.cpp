#include "fused_adam.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>

#include "kernels/adam_ref.h"
#include "mds/model/cuda_kernels.h"
#include "mds/model/kernel_call.h"
#include "mds/util/error.h"

namespace mds::trainer {
namespace {

// A device copy of `bytes` bytes at `data` (a synchronous upload: done once, or when a gradient moved). A tensor
// of bytes whatever `data` holds: read it back through an untyped pointer (a typed accessor checks the dtype).
at::Tensor upload(const void* data, std::size_t bytes, const at::Device& device) {
    auto host = at::empty({static_cast<std::int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte));
    if (bytes > 0) std::memcpy(host.data_ptr(), data, bytes);
    return host.to(device);
}

template <typename T>
at::Tensor upload(const std::vector<T>& v, const at::Device& device) {
    return upload(v.data(), v.size() * sizeof(T), device);
}

// What the step's error messages name: "148 bf16 tensors on cuda:0 (the gradient norm)".
std::string operands(const std::vector<at::Tensor>& params, const char* part) {
    const auto device = params.empty() ? std::string("cpu") : params[0].device().str();
    return std::to_string(params.size()) + " bf16 tensors on " + device + " (" + part + ")";
}

}  // namespace

std::string fused_adam_unsupported(const c10::Device& device, c10::ScalarType dtype) {
    if (dtype != at::kBFloat16) return std::string("a bf16 model only, not ") + c10::toString(dtype);
    if (!device.is_cuda() && !device.is_cpu()) return "CPU or CUDA devices only, not " + device.str();
#ifndef MDS_HAVE_CUDA_KERNELS
    if (device.is_cuda()) return model::kBuiltWithoutCudaKernels;
#endif
    return {};
}

std::string fused_adam_unsupported(const at::Tensor& p) { return fused_adam_unsupported(p.device(), p.scalar_type()); }

FusedAdam::FusedAdam(std::vector<at::Tensor> params, std::vector<FusedAdamSlice> slices)
    : params_(std::move(params)), slices_(std::move(slices)) {
    std::vector<std::int64_t> numels;
    for (std::size_t i = 0; i < params_.size(); ++i) {
        const auto& p = params_[i];
        if (const auto why = fused_adam_unsupported(p); !why.empty()) throw Error("fused Adam step: " + why);
        if (!p.is_contiguous()) throw Error("fused Adam step: parameter " + std::to_string(i) + " is not contiguous");
        if (p.device() != params_[0].device()) throw Error("fused Adam step: the parameters are on more than one device");
        numels.push_back(p.numel());
    }
    plan(norm_, numels, "the norm's chunks");
    numels.clear();
    for (std::size_t k = 0; k < slices_.size(); ++k) {
        const auto& sl = slices_[k];
        const auto at = "fused Adam step: slice " + std::to_string(k);
        if (sl.param >= params_.size()) throw Error(at + " names parameter " + std::to_string(sl.param) + " of " +
                                                    std::to_string(params_.size()));
        const auto& p = params_[sl.param];
        if (sl.offset < 0 || sl.length < 0 || sl.offset + sl.length > p.numel())
            throw Error(at + ": elements [" + std::to_string(sl.offset) + ", " + std::to_string(sl.offset + sl.length) +
                        ") outside parameter " + std::to_string(sl.param) + "'s " + std::to_string(p.numel()));
        for (const auto* t : {&sl.master, &sl.exp_avg, &sl.exp_avg_sq}) {
            if (!t->defined() || t->scalar_type() != at::kFloat || !t->is_contiguous() || t->numel() != sl.length ||
                t->device() != p.device())
                throw Error(at + " (parameter " + std::to_string(sl.param) +
                            "): its states are not contiguous fp32 tensors of its size on its device");
        }
        numels.push_back(sl.length);
    }
    plan(update_, numels, "the update's chunks");
    if (cuda()) chunk_sums_ = at::empty({static_cast<std::int64_t>(norm_.chunks.size())},
                                        params_[0].options().dtype(at::kDouble));
}

namespace {

std::vector<FusedAdamSlice> whole(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& master,
                                  const std::vector<at::Tensor>& exp_avg, const std::vector<at::Tensor>& exp_avg_sq,
                                  const std::vector<bool>& decay) {
    const auto n = params.size();
    if (master.size() != n || exp_avg.size() != n || exp_avg_sq.size() != n || decay.size() != n)
        throw Error("fused Adam step: " + std::to_string(n) + " parameters but other counts of states");
    std::vector<FusedAdamSlice> out;
    for (std::size_t i = 0; i < n; ++i) out.push_back({i, 0, params[i].numel(), master[i], exp_avg[i], exp_avg_sq[i], decay[i]});
    return out;
}

}  // namespace

FusedAdam::FusedAdam(std::vector<at::Tensor> params, const std::vector<at::Tensor>& master,
                     const std::vector<at::Tensor>& exp_avg, const std::vector<at::Tensor>& exp_avg_sq,
                     const std::vector<bool>& decay)
    : FusedAdam(params, whole(params, master, exp_avg, exp_avg_sq, decay)) {}

void FusedAdam::plan(Plan& plan, const std::vector<std::int64_t>& numels, const char* what) {
    try {
        plan.chunks = kernels::adam_chunks(numels, plan.first);
    } catch (const std::exception& e) {
        throw Error("fused Adam step of " + operands(params_, what) + ": " + e.what());
    }
    if (cuda()) {
        plan.dev_chunks = upload(plan.chunks, params_[0].device());
        plan.dev_first = upload(plan.first, params_[0].device());
    }
}

void FusedAdam::use_main_grads(std::vector<at::Tensor> grads) {
    if (grads.size() != params_.size())
        throw Error("fused Adam step: " + std::to_string(grads.size()) + " main gradients for " +
                    std::to_string(params_.size()) + " parameters");
    main_grads_ = std::move(grads);
}

bool FusedAdam::cuda() const { return !params_.empty() && params_[0].is_cuda(); }

void FusedAdam::set_table(Plan& plan, std::vector<kernels::AdamTensor> table) {
    const auto same_as = [](const kernels::AdamTensor& a, const kernels::AdamTensor& b) {
        return a.param == b.param && a.grad == b.grad && a.master == b.master && a.exp_avg == b.exp_avg &&
               a.exp_avg_sq == b.exp_avg_sq && a.numel == b.numel && a.group == b.group;
    };
    const bool same = std::equal(table.begin(), table.end(), plan.table.begin(), plan.table.end(), same_as);
    if (same && (plan.dev_table.defined() || !cuda())) return;
    plan.table = std::move(table);
    if (cuda()) plan.dev_table = upload(plan.table, params_[0].device());
}

void FusedAdam::refresh() {
    std::vector<kernels::AdamTensor> norm;  // the gradients alone
    norm.reserve(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) {
        auto& p = params_[i];
        if (main_grads_.empty() && !p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
        const auto& g = main_grads_.empty() ? p.grad() : main_grads_[i];
        const auto dtype = main_grads_.empty() ? p.scalar_type() : at::kFloat;
        if (g.scalar_type() != dtype || !g.is_contiguous() || g.numel() != p.numel() || g.device() != p.device())
            throw Error("fused Adam step: the gradient of parameter " + std::to_string(i) + " is not a contiguous " +
                        c10::toString(dtype) + " tensor of its size on its device");
        kernels::AdamTensor t;
        t.grad = g.const_data_ptr();
        t.grad_fp32 = main_grads_.empty() ? 0 : 1;
        t.numel = p.numel();
        norm.push_back(t);
    }
    std::vector<kernels::AdamTensor> update;
    update.reserve(slices_.size());
    for (const auto& sl : slices_) {
        auto& p = params_[sl.param];
        kernels::AdamTensor t;
        t.param = static_cast<std::uint16_t*>(p.data_ptr()) + sl.offset;
        const auto& g = norm[sl.param];
        t.grad = static_cast<const char*>(g.grad) + sl.offset * (g.grad_fp32 ? 4 : 2);
        t.grad_fp32 = g.grad_fp32;
        t.master = sl.master.data_ptr<float>();
        t.exp_avg = sl.exp_avg.data_ptr<float>();
        t.exp_avg_sq = sl.exp_avg_sq.data_ptr<float>();
        t.numel = sl.length;
        t.group = sl.decay ? 0 : 1;
        update.push_back(t);
    }
    set_table(norm_, std::move(norm));
    set_table(update_, std::move(update));
}

at::Tensor FusedAdam::grad_sumsq(float grad_scale) {
    refresh();
    const auto n = static_cast<std::int64_t>(params_.size());
    if (n == 0) return at::zeros({0}, at::TensorOptions().dtype(at::kDouble));
    const auto& on = params_[0];
    auto sumsq = (on.is_cuda() ? at::empty({n}, on.options().dtype(at::kDouble))
                               : at::zeros({n}, at::TensorOptions().dtype(at::kDouble)));
    model::run_kernel(
        "fused Adam step", on, [&] { return operands(params_, "the gradient norm"); },
        [&](void* stream) {
#ifdef MDS_HAVE_CUDA_KERNELS
            kernels::adam_grad_sumsq_cuda(static_cast<const kernels::AdamTensor*>(norm_.dev_table.const_data_ptr()), n,
                                          static_cast<const kernels::AdamChunk*>(norm_.dev_chunks.const_data_ptr()),
                                          static_cast<std::int64_t>(norm_.chunks.size()),
                                          static_cast<const std::int64_t*>(norm_.dev_first.const_data_ptr()), grad_scale,
                                          chunk_sums_.data_ptr<double>(), sumsq.data_ptr<double>(), stream);
#else
            (void)stream;
#endif
        },
        [&] {
            const auto& chunks = norm_.chunks;
            std::vector<double> chunk_sums(chunks.size());
            at::parallel_for(0, static_cast<std::int64_t>(chunks.size()), 1, [&](std::int64_t begin, std::int64_t end) {
                for (auto c = begin; c < end; ++c) {
                    const auto& k = chunks[static_cast<std::size_t>(c)];
                    chunk_sums[static_cast<std::size_t>(c)] = kernels::adam_grad_sumsq_ref(
                        norm_.table[static_cast<std::size_t>(k.tensor)], grad_scale, k.begin, k.begin + k.length);
                }
            });
            auto* out = sumsq.data_ptr<double>();
            for (std::int64_t t = 0; t < n; ++t)
                for (auto c = norm_.first[static_cast<std::size_t>(t)]; c < norm_.first[static_cast<std::size_t>(t) + 1]; ++c)
                    out[t] += chunk_sums[static_cast<std::size_t>(c)];
        });
    return sumsq;
}

void FusedAdam::step(const kernels::AdamHyper& h) {
    refresh();
    if (params_.empty() || update_.chunks.empty()) return;
    model::run_kernel(
        "fused Adam step", params_[0], [&] { return operands(params_, "the update"); },
        [&](void* stream) {
#ifdef MDS_HAVE_CUDA_KERNELS
            kernels::adam_step_cuda(static_cast<const kernels::AdamTensor*>(update_.dev_table.const_data_ptr()),
                                    static_cast<const kernels::AdamChunk*>(update_.dev_chunks.const_data_ptr()),
                                    static_cast<std::int64_t>(update_.chunks.size()), h, stream);
#else
            (void)stream;
#endif
        },
        [&] {
            const auto s = kernels::adam_scalars(h);
            const auto& chunks = update_.chunks;
            at::parallel_for(0, static_cast<std::int64_t>(chunks.size()), 1, [&](std::int64_t begin, std::int64_t end) {
                for (auto c = begin; c < end; ++c) {
                    const auto& k = chunks[static_cast<std::size_t>(c)];
                    kernels::adam_step_ref(update_.table[static_cast<std::size_t>(k.tensor)], s, k.begin, k.begin + k.length);
                }
            });
        });
}

}  // namespace mds::trainer
