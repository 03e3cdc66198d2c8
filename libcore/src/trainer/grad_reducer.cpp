#include "mds/trainer/grad_reducer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <mutex>

#include "grad_hooks.h"
#include "mds/trainer/comm.h"
#include "mds/trainer/main_grads.h"
#include "mds/util/error.h"

namespace mds::trainer {
struct GradientReducer::Impl {
    struct Bucket {
        std::vector<std::size_t> params;
        std::size_t ready = 0;
        at::Tensor flat;  // with main gradients, a range of their buffer: reduced in place, nothing to write back
        std::function<void()> wait;
    };
    std::vector<model::Parameter>& params;
    Communicator& comm;
    double scale;
    MainGrads* main;  // bf16: the fp32 main gradients are reduced (null: the parameters' .grad)
    std::vector<Bucket> buckets;
    std::vector<std::size_t> bucket_of;  // per parameter
    std::vector<bool> final_grad;        // per parameter, in the armed pass
    std::size_t next = 0;                // the next bucket to start
    std::size_t early = 0;
    bool armed = false;
    std::mutex mutex;

    Impl(std::vector<model::Parameter>& p, Communicator& c, double s, MainGrads* m) : params(p), comm(c), scale(s), main(m) {}

    // What parameter i's reduction reads and writes back into (without main gradients).
    at::Tensor grad(std::size_t i) {
        auto& t = params[i].tensor;
        if (!t.grad().defined()) t.mutable_grad() = at::zeros_like(t);
        return t.grad();
    }

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
        if (main) {
            // The bucket's parameters are consecutive (in reverse order), so their main gradients are one range of
            // the flat buffer: reduced where they are, without a flattened copy.
            b.flat = main->range(b.params.back(), b.params.front());
        } else {
            std::vector<at::Tensor> grads;
            for (auto i : b.params) grads.push_back(grad(i));
            b.flat = flatten(grads);
        }
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

GradientReducer::GradientReducer(std::vector<model::Parameter>& params, Communicator& comm, double scale, std::int64_t bucket_bytes,
                                 MainGrads* main)
    : impl_(std::make_shared<Impl>(params, comm, scale, main)) {
    auto& m = *impl_;
    m.bucket_of.assign(params.size(), 0);
    m.final_grad.assign(params.size(), false);
    // Reverse order (backward produces the last layers' gradients first), as DDP.
    std::vector<at::Tensor> reversed;  // the tensors reduced: the buckets' bytes are theirs
    for (std::size_t k = params.size(); k-- > 0;) reversed.push_back(main ? main->grads()[k] : params[k].tensor);
    for (const auto& [begin, end] : cut_buckets(reversed, bucket_bytes)) {
        auto& b = m.buckets.emplace_back();
        for (std::size_t j = begin; j < end; ++j) {
            const std::size_t k = params.size() - 1 - j;
            b.params.push_back(k);
            m.bucket_of[k] = m.buckets.size() - 1;
        }
    }
    auto notify = [w = std::weak_ptr<Impl>(impl_)](std::size_t k) {
        if (auto r = w.lock()) r->on_gradient(k);
    };
    if (main) main->set_listener(notify);  // its hooks add each micro batch's gradient, then call this
    else set_gradient_hooks(params, notify);
}

GradientReducer::~GradientReducer() {
    if (impl_->main) impl_->main->set_listener(nullptr);
    else clear_gradient_hooks(impl_->params);
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
        if (!m.main) {
            std::vector<at::Tensor> grads;
            for (auto i : b.params) grads.push_back(m.grad(i));
            unflatten(b.flat, grads);
        }
        b.flat = at::Tensor();
        b.wait = nullptr;
    }
}

std::size_t GradientReducer::buckets() const { return impl_->buckets.size(); }
std::size_t GradientReducer::started_during_backward() const { return impl_->early; }

}  // namespace mds::trainer
