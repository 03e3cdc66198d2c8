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

// A device copy of `bytes` bytes at `data` (a synchronous upload: done once, or when a gradient moved).
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

std::string fused_adam_unsupported(const at::Tensor& p) {
    if (p.scalar_type() != at::kBFloat16) return std::string("a bf16 model only, not ") + c10::toString(p.scalar_type());
    if (!p.is_cuda() && !p.is_cpu()) return "CPU or CUDA devices only, not " + p.device().str();
#ifndef MDS_HAVE_CUDA_KERNELS
    if (p.is_cuda()) return model::kBuiltWithoutCudaKernels;
#endif
    return {};
}

FusedAdam::FusedAdam(std::vector<at::Tensor> params, std::vector<at::Tensor> master, std::vector<at::Tensor> exp_avg,
                     std::vector<at::Tensor> exp_avg_sq, const std::vector<bool>& decay)
    : params_(std::move(params)), master_(std::move(master)), exp_avg_(std::move(exp_avg)),
      exp_avg_sq_(std::move(exp_avg_sq)) {
    const auto n = params_.size();
    if (master_.size() != n || exp_avg_.size() != n || exp_avg_sq_.size() != n || decay.size() != n)
        throw Error("fused Adam step: " + std::to_string(n) + " parameters but other counts of states");
    std::vector<std::int64_t> numels;
    for (std::size_t i = 0; i < n; ++i) {
        const auto& p = params_[i];
        if (const auto why = fused_adam_unsupported(p); !why.empty()) throw Error("fused Adam step: " + why);
        if (!p.is_contiguous()) throw Error("fused Adam step: parameter " + std::to_string(i) + " is not contiguous");
        for (const auto* s : {&master_[i], &exp_avg_[i], &exp_avg_sq_[i]}) {
            if (s->scalar_type() != at::kFloat || !s->is_contiguous() || s->numel() != p.numel() || s->device() != p.device())
                throw Error("fused Adam step: the states of parameter " + std::to_string(i) +
                            " are not contiguous fp32 tensors of its size on its device");
        }
        if (p.device() != params_[0].device()) throw Error("fused Adam step: the parameters are on more than one device");
        numels.push_back(p.numel());
        group_.push_back(decay[i] ? 0 : 1);
    }
    try {
        chunks_ = kernels::adam_chunks(numels, first_);
    } catch (const std::exception& e) {
        throw Error("fused Adam step of " + operands(params_, "the chunk plan") + ": " + e.what());
    }
    if (cuda()) {
        const auto device = params_[0].device();
        dev_chunks_ = upload(chunks_, device);
        dev_first_ = upload(first_, device);
        chunk_sums_ = at::empty({static_cast<std::int64_t>(chunks_.size())}, at::TensorOptions().dtype(at::kDouble).device(device));
    }
}

bool FusedAdam::cuda() const { return !params_.empty() && params_[0].is_cuda(); }

void FusedAdam::refresh() {
    std::vector<kernels::AdamTensor> table;
    table.reserve(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) {
        auto& p = params_[i];
        if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
        const auto& g = p.grad();
        if (g.scalar_type() != p.scalar_type() || !g.is_contiguous() || g.numel() != p.numel())
            throw Error("fused Adam step: the gradient of parameter " + std::to_string(i) +
                        " is not a contiguous tensor of its dtype and size");
        kernels::AdamTensor t;
        t.param = static_cast<std::uint16_t*>(p.data_ptr());
        t.grad = static_cast<const std::uint16_t*>(g.const_data_ptr());
        t.master = master_[i].data_ptr<float>();
        t.exp_avg = exp_avg_[i].data_ptr<float>();
        t.exp_avg_sq = exp_avg_sq_[i].data_ptr<float>();
        t.numel = p.numel();
        t.group = group_[i];
        table.push_back(t);
    }
    const auto same_as = [](const kernels::AdamTensor& a, const kernels::AdamTensor& b) {
        return a.param == b.param && a.grad == b.grad && a.master == b.master && a.exp_avg == b.exp_avg &&
               a.exp_avg_sq == b.exp_avg_sq && a.numel == b.numel && a.group == b.group;
    };
    const bool same = std::equal(table.begin(), table.end(), table_.begin(), table_.end(), same_as);
    if (same && (dev_table_.defined() || !cuda())) return;
    table_ = std::move(table);
    if (cuda()) dev_table_ = upload(table_, params_[0].device());
}

at::Tensor FusedAdam::grad_sumsq(float grad_scale) {
    refresh();
    const auto n = static_cast<std::int64_t>(params_.size());
    if (n == 0) return at::zeros({0}, at::TensorOptions().dtype(at::kDouble));
    const auto& on = params_[0];
    auto sumsq = (on.is_cuda() ? at::empty({n}, on.options().dtype(at::kDouble))
                               : at::zeros({n}, at::TensorOptions().dtype(at::kDouble)));
    model::run_kernel(
        "fused Adam step", on, operands(params_, "the gradient norm"),
        [&](void* stream) {
#ifdef MDS_HAVE_CUDA_KERNELS
            kernels::adam_grad_sumsq_cuda(static_cast<const kernels::AdamTensor*>(dev_table_.const_data_ptr()), n,
                                          static_cast<const kernels::AdamChunk*>(dev_chunks_.const_data_ptr()),
                                          static_cast<std::int64_t>(chunks_.size()), dev_first_.const_data_ptr<std::int64_t>(),
                                          grad_scale, chunk_sums_.data_ptr<double>(), sumsq.data_ptr<double>(), stream);
#else
            (void)stream;
#endif
        },
        [&] {
            std::vector<double> chunk_sums(chunks_.size());
            at::parallel_for(0, static_cast<std::int64_t>(chunks_.size()), 1, [&](std::int64_t begin, std::int64_t end) {
                for (auto c = begin; c < end; ++c) {
                    const auto& k = chunks_[static_cast<std::size_t>(c)];
                    chunk_sums[static_cast<std::size_t>(c)] = kernels::adam_grad_sumsq_ref(
                        table_[static_cast<std::size_t>(k.tensor)], grad_scale, k.begin, k.begin + k.length);
                }
            });
            auto* out = sumsq.data_ptr<double>();
            for (std::int64_t t = 0; t < n; ++t)
                for (auto c = first_[static_cast<std::size_t>(t)]; c < first_[static_cast<std::size_t>(t) + 1]; ++c)
                    out[t] += chunk_sums[static_cast<std::size_t>(c)];
        });
    return sumsq;
}

void FusedAdam::step(const kernels::AdamHyper& h) {
    refresh();
    if (params_.empty()) return;
    model::run_kernel(
        "fused Adam step", params_[0], operands(params_, "the update"),
        [&](void* stream) {
#ifdef MDS_HAVE_CUDA_KERNELS
            kernels::adam_step_cuda(static_cast<const kernels::AdamTensor*>(dev_table_.const_data_ptr()),
                                    static_cast<const kernels::AdamChunk*>(dev_chunks_.const_data_ptr()),
                                    static_cast<std::int64_t>(chunks_.size()), h, stream);
#else
            (void)stream;
#endif
        },
        [&] {
            const auto s = kernels::adam_scalars(h);
            at::parallel_for(0, static_cast<std::int64_t>(chunks_.size()), 1, [&](std::int64_t begin, std::int64_t end) {
                for (auto c = begin; c < end; ++c) {
                    const auto& k = chunks_[static_cast<std::size_t>(c)];
                    kernels::adam_step_ref(table_[static_cast<std::size_t>(k.tensor)], s, k.begin, k.begin + k.length);
                }
            });
        });
}

}  // namespace mds::trainer
