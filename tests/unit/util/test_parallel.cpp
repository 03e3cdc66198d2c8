// parallel_for: every index once whatever the thread count, nothing for n = 0, inline in order with
// one worker, never more workers than items, a worker number never shared by two running calls, and
// exceptions: the hand-out stops, the lowest failing index's exception reaches the caller.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "mds/util/parallel.h"

using mds::parallel_for;
using mds::parallel_for_with_worker;
using mds::parallel_workers;

TEST_CASE("parallel_workers: 0 for no items, else threads clamped to [1, n]") {
    CHECK(parallel_workers(0, 8) == 0);
    CHECK(parallel_workers(0, 0) == 0);
    CHECK(parallel_workers(5, 0) == 1);
    CHECK(parallel_workers(5, -3) == 1);
    CHECK(parallel_workers(5, 1) == 1);
    CHECK(parallel_workers(5, 4) == 4);
    CHECK(parallel_workers(5, 64) == 5);
}

TEST_CASE("parallel_for: every index exactly once, the result independent of the thread count") {
    const std::size_t n = 1000;
    std::vector<long> serial(n);
    parallel_for(n, 1, [&](std::size_t i) { serial[i] = static_cast<long>(i * i % 97); });
    for (int threads : {2, 3, 8, 32}) {
        CAPTURE(threads);
        std::vector<std::atomic<int>> calls(n);
        std::vector<long> out(n);
        parallel_for(n, threads, [&](std::size_t i) {
            ++calls[i];
            out[i] = static_cast<long>(i * i % 97);
        });
        for (std::size_t i = 0; i < n; ++i) CHECK(calls[i].load() == 1);
        CHECK(out == serial);
    }
}

TEST_CASE("parallel_for: n = 0 calls nothing") {
    int calls = 0;
    parallel_for(0, 4, [&](std::size_t) { ++calls; });
    parallel_for(0, 0, [&](std::size_t) { ++calls; });
    CHECK(calls == 0);
}

TEST_CASE("parallel_for: one worker (threads <= 1) runs inline, in order, on the calling thread") {
    for (int threads : {1, 0, -2}) {
        CAPTURE(threads);
        std::vector<std::size_t> order;
        bool same_thread = true;
        const auto caller = std::this_thread::get_id();
        parallel_for_with_worker(10, threads, [&](std::size_t i, std::size_t worker) {
            order.push_back(i);
            same_thread = same_thread && std::this_thread::get_id() == caller && worker == 0;
        });
        CHECK(order == std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
        CHECK(same_thread);
    }
}

TEST_CASE("parallel_for: threads > n uses n workers, and a worker number is never shared") {
    const std::size_t n = 3;
    std::mutex mu;
    std::set<std::size_t> workers;
    std::set<std::thread::id> thread_ids;
    parallel_for_with_worker(n, 16, [&](std::size_t, std::size_t worker) {
        std::lock_guard<std::mutex> g(mu);
        workers.insert(worker);
        thread_ids.insert(std::this_thread::get_id());
    });
    CHECK(workers.size() <= n);
    for (std::size_t w : workers) CHECK(w < n);
    CHECK(thread_ids.size() <= n);

    // Per-worker state without a lock: a worker's slot is never busy twice at once.
    const int threads = 6;
    std::vector<std::unique_ptr<std::atomic<int>>> busy;
    for (int i = 0; i < threads; ++i) busy.push_back(std::make_unique<std::atomic<int>>(0));
    std::atomic<int> overlaps{0};
    parallel_for_with_worker(300, threads, [&](std::size_t, std::size_t worker) {
        REQUIRE(worker < static_cast<std::size_t>(threads));
        if (busy[worker]->fetch_add(1) != 0) ++overlaps;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        busy[worker]->fetch_sub(1);
    });
    CHECK(overlaps.load() == 0);
}

TEST_CASE("parallel_for: an exception reaches the caller, that of the lowest failing index") {
    SUBCASE("one worker stops at the first failure") {
        std::vector<std::size_t> ran;
        CHECK_THROWS_WITH_AS(parallel_for(10, 1,
                                          [&](std::size_t i) {
                                              ran.push_back(i);
                                              if (i == 4) throw std::runtime_error("item 4");
                                          }),
                             "item 4", std::runtime_error);
        CHECK(ran == std::vector<std::size_t>{0, 1, 2, 3, 4});
    }
    SUBCASE("several failing indices: always the lowest, whatever the timing") {
        for (int round = 0; round < 30; ++round) {
            CAPTURE(round);
            std::string what;
            try {
                parallel_for(200, 4, [&](std::size_t i) {
                    // Later items fail sooner, so that a higher index usually throws first.
                    if (i % 10 == 7) {
                        if (i < 20) std::this_thread::sleep_for(std::chrono::milliseconds(2));
                        throw std::runtime_error("item " + std::to_string(i));
                    }
                });
            } catch (const std::runtime_error& e) {
                what = e.what();
            }
            CHECK(what == "item 7");
        }
    }
    SUBCASE("the hand-out stops after a failure") {
        const std::size_t n = 10000;
        std::atomic<std::size_t> calls{0};
        CHECK_THROWS_AS(parallel_for(n, 3,
                                     [&](std::size_t i) {
                                         ++calls;
                                         if (i == 0) throw std::logic_error("first");
                                         std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                     }),
                        std::logic_error);
        CHECK(calls.load() < n);
    }
    SUBCASE("the exception's own type comes through") {
        struct Custom {
            int code;
        };
        try {
            parallel_for(5, 2, [](std::size_t i) {
                if (i == 3) throw Custom{42};
            });
            FAIL("no exception");
        } catch (const Custom& c) {
            CHECK(c.code == 42);
        }
    }
}
