// One small thread pool for "do these n independent things, `threads` at a time": the uploads of
// mds-hub-sync (LFS objects to the Hub, files and parts to S3) run through it. Work is handed out
// by index, in increasing order, to whichever worker is free; what each call does with shared state
// is the caller's to guard. Streaming pipelines that must keep their output in input order with a
// bounded queue (data/preprocess.cpp, tokenizer/tokenizer_train.cpp) are a different shape and keep
// their own pools.
#pragma once

#include <cstddef>
#include <functional>

namespace mds {

// How many workers parallel_for uses for `n` items and `threads` asked for: 0 when n is 0, else
// `threads` clamped to [1, n] (threads <= 1: one, the caller itself).
std::size_t parallel_workers(std::size_t n, int threads);

// Calls f(i, worker) once for each i in [0, n), on parallel_workers(n, threads) workers: the calling
// thread is worker 0, the others are threads started here and joined before returning. `worker`
// (in [0, parallel_workers)) is never used by two calls at once, so it can index per-worker state
// (one HTTP client per worker) without a lock. With one worker everything runs inline, in order.
//
// Exceptions: after a call throws, no further index is handed out; the calls already running
// finish, then the exception of the lowest index that threw is rethrown in the caller. Indices are
// handed out in increasing order, so every index below a failing one was started: when f's failures
// depend only on i, the exception rethrown is always that of the lowest failing index, whatever the
// timing.
void parallel_for_with_worker(std::size_t n, int threads, const std::function<void(std::size_t i, std::size_t worker)>& f);

// `workers` when at least 1, else the machine's cores (at least 1): the default of the checkpoint
// tools' --workers and of the trainer's checkpoint reader.
int workers_or_cores(int workers);

// The same without the worker number.
void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t i)>& f);

}  // namespace mds
