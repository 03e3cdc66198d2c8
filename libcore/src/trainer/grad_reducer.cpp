#include "mds/trainer/grad_reducer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <mutex>

#include "mds/trainer/comm.h"
#include "mds/util/error.h"

namespace mds::trainer {
struct GradientReducer::Impl {
    struct Bucket {
        std::vector<std::size_t> params;
        std::size_t ready = 0;
        at::Tensor flat;
        std::function<void()> wait;
    };
    std::vector<model::Parameter>& params;
    Communicator& comm;
    double scale;
    std::vector<Bucket> buckets;
    std::vector<std::size_t> bucket_of;  // per parameter
    std::vector<bool> final_grad;        // per parameter, in the armed pass
    std::size_t next = 0;                // the next bucket to start
    std::size_t early = 0;
    bool armed = false;
    std::mutex mutex;

    Impl(std::vector<model::Parameter>& p, Communicator& c, double s) : params(p), comm(c), scale(s) {}

    void reset() {
        std::fill(final_grad.begin(), final_grad.end(), false);
        for (auto& b : buckets) {
            b.ready = 0;
            b.wait = nullptr;
            b.flat = at::Tensor();
        }
        next = 0;
        early = 0;
    }

    void start(Bucket& b) {
        c10::NoGradGuard no_grad;
        std::vector<at::Tensor> grads;
        for (auto i : b.params) {
            auto& t = params[i].tensor;
            if (!t.grad().defined()) t.mutable_grad() = at::zeros_like(t);
            grads.push_back(t.grad());
        }
        b.flat = flatten(grads);
        b.wait = comm.start_all_reduce_sum(b.flat, Group::Data);
    }

    // Called by the autograd engine once parameter i's gradient is accumulated.
    void on_gradient(std::size_t i) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!armed || final_grad[i]) return;
        final_grad[i] = true;
        ++buckets[bucket_of[i]].ready;
        while (next < buckets.size() && buckets[next].ready == buckets[next].params.size()) {
            start(buckets[next++]);
            ++early;
        }
    }
};

namespace {

struct Hook : torch::autograd::PostAccumulateGradHook {
    std::function<void()> fire;
    explicit Hook(std::function<void()> f) : fire(std::move(f)) {}
    void operator()(const torch::autograd::Variable&) override { fire(); }
};

}  // namespace

GradientReducer::GradientReducer(std::vector<model::Parameter>& params, Communicator& comm, double scale, std::int64_t bucket_bytes)
    : impl_(std::make_shared<Impl>(params, comm, scale)) {
    auto& m = *impl_;
    m.bucket_of.assign(params.size(), 0);
    m.final_grad.assign(params.size(), false);
    // Reverse order (backward produces the last layers' gradients first), as DDP.
    std::vector<at::Tensor> reversed;
    for (std::size_t k = params.size(); k-- > 0;) reversed.push_back(params[k].tensor);
    for (const auto& [begin, end] : cut_buckets(reversed, bucket_bytes)) {
        auto& b = m.buckets.emplace_back();
        for (std::size_t j = begin; j < end; ++j) {
            const std::size_t k = params.size() - 1 - j;
            b.params.push_back(k);
            m.bucket_of[k] = m.buckets.size() - 1;
        }
    }
    for (std::size_t k = 0; k < params.size(); ++k)
        torch::autograd::impl::set_post_acc_grad_hooks(params[k].tensor, std::make_unique<Hook>([w = std::weak_ptr<Impl>(impl_), k] {
                                                           if (auto r = w.lock()) r->on_gradient(k);
                                                       }));
}

GradientReducer::~GradientReducer() {
    for (auto& p : impl_->params) torch::autograd::impl::set_post_acc_grad_hooks(p.tensor, nullptr);
}

void GradientReducer::arm() {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    auto& m = *impl_;
    if (m.armed) throw Error("GradientReducer::arm: the previous step was not finished");
    m.reset();
    m.armed = true;
}

void GradientReducer::finish() {
    auto& m = *impl_;
    {
        std::lock_guard<std::mutex> lock(m.mutex);
        if (!m.armed) m.reset();  // not armed: everything is reduced now
        m.armed = false;
        while (m.next < m.buckets.size()) m.start(m.buckets[m.next++]);
    }
    c10::NoGradGuard no_grad;
    for (auto& b : m.buckets) {
        b.wait();
        if (m.scale != 1.0) b.flat.mul_(m.scale);
        std::vector<at::Tensor> grads;
        for (auto i : b.params) grads.push_back(m.params[i].tensor.grad());
        unflatten(b.flat, grads);
        b.flat = at::Tensor();
        b.wait = nullptr;
    }
}

std::size_t GradientReducer::buckets() const { return impl_->buckets.size(); }
std::size_t GradientReducer::started_during_backward() const { return impl_->early; }

}  // namespace mds::trainer
