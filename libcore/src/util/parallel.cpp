// parallel_for: indices handed out under one lock, the first failure stops the hand-out
// (parallel.h).
#include "mds/util/parallel.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace mds {
namespace {

// The shared state of one parallel_for: the next index and the failure of the lowest index so far.
// Items are coarse (an upload, a file), so one lock per hand-out costs nothing next to them.
class WorkQueue {
public:
    explicit WorkQueue(std::size_t n) : n_(n) {}

    // The next index, or none once all are handed out or a call has failed.
    std::optional<std::size_t> take() {
        std::lock_guard<std::mutex> lock(mu_);
        if (failed_ || next_ >= n_) return std::nullopt;
        return next_++;
    }

    void fail(std::size_t index, std::exception_ptr e) {
        std::lock_guard<std::mutex> lock(mu_);
        failed_ = true;
        if (index < failed_index_) {
            failed_index_ = index;
            failure_ = std::move(e);
        }
    }

    // Stops the hand-out without an exception of its own (a worker thread that could not start).
    void stop() {
        std::lock_guard<std::mutex> lock(mu_);
        failed_ = true;
    }

    // Called once every worker has returned.
    void rethrow_failure() const {
        if (failure_) std::rethrow_exception(failure_);
    }

private:
    std::mutex mu_;
    std::size_t n_;
    std::size_t next_ = 0;
    bool failed_ = false;
    std::size_t failed_index_ = std::numeric_limits<std::size_t>::max();
    std::exception_ptr failure_;
};

void work(WorkQueue& queue, std::size_t worker, const std::function<void(std::size_t, std::size_t)>& f) {
    while (const auto i = queue.take()) {
        try {
            f(*i, worker);
        } catch (...) {
            queue.fail(*i, std::current_exception());
        }
    }
}

}  // namespace

int workers_or_cores(int workers) {
    if (workers >= 1) return workers;
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::size_t parallel_workers(std::size_t n, int threads) {
    if (n == 0) return 0;
    return std::min<std::size_t>(n, static_cast<std::size_t>(std::max(1, threads)));
}

void parallel_for_with_worker(std::size_t n, int threads, const std::function<void(std::size_t, std::size_t)>& f) {
    const std::size_t workers = parallel_workers(n, threads);
    WorkQueue queue(n);
    std::vector<std::thread> pool;
    pool.reserve(workers > 0 ? workers - 1 : 0);
    try {
        for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(work, std::ref(queue), w, std::cref(f));
    } catch (...) {
        // A thread that cannot start (resource limits): the ones running stop after their current
        // call, and the caller hears why.
        queue.stop();
        for (auto& t : pool) t.join();
        throw;
    }
    if (workers > 0) work(queue, 0, f);
    for (auto& t : pool) t.join();
    queue.rethrow_failure();
}

void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& f) {
    parallel_for_with_worker(n, threads, [&f](std::size_t i, std::size_t) { f(i); });
}

}  // namespace mds
