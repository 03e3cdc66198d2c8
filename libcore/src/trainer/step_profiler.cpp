// --profile (mds/trainer/step_profiler.h): LibTorch's Kineto profiler or Nsight's capture range over a
// window of iterations. The only file of mds that includes the profiler's headers.
#include "mds/trainer/step_profiler.h"

#include <ATen/record_function.h>
#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <unistd.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "mds/observe/log_line.h"  // py_format_float
#include "mds/util/error.h"
#include "mds/util/tool.h"

namespace mds::trainer {

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string fixed(double v, int digits) { return observe::py_format_float(v, digits, 'f'); }

// Kernel names are C++ templates of several hundred characters; the summary keeps the start.
std::string shorten(const std::string& name, std::size_t width = 110) {
    return name.size() <= width ? name : name.substr(0, width - 3) + "...";
}

bool is_sync_call(const std::string& name) {
    return name.find("Synchronize") != std::string::npos || name == "cudaMemcpy" || name == "cuMemcpy" ||
           name == "cudaMemcpy2D";
}

// Per host thread, the CPU operators sorted by start (the outer one first on ties).
std::map<std::uint64_t, std::vector<const ProfileEvent*>> cpu_ops_by_thread(const std::vector<ProfileEvent>& events) {
    std::map<std::uint64_t, std::vector<const ProfileEvent*>> by_thread;
    for (const auto& e : events)
        if (e.kind == ProfileEventKind::CpuOp) by_thread[e.thread].push_back(&e);
    for (auto& [thread, ops] : by_thread)
        std::sort(ops.begin(), ops.end(), [](const ProfileEvent* a, const ProfileEvent* b) {
            return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns > b->end_ns;
        });
    return by_thread;
}

// Where each of `events` (host events: runtime calls) happened: the outermost and the innermost operator around
// it on its thread ("in OUTER > INNER", "in OP", "outside any operator"), leaving out the window's ProfilerStep#
// ranges, which hold every operator of a step. One sweep per thread over its operators, the events in time order.
std::vector<std::string> places(const std::map<std::uint64_t, std::vector<const ProfileEvent*>>& ops,
                                const std::vector<const ProfileEvent*>& events) {
    std::vector<std::string> out(events.size(), "outside any operator");
    std::map<std::uint64_t, std::vector<std::size_t>> by_thread;
    for (std::size_t i = 0; i < events.size(); ++i) by_thread[events[i]->thread].push_back(i);
    for (auto& [thread, idx] : by_thread) {
        const auto it = ops.find(thread);
        if (it == ops.end()) continue;
        const auto& list = it->second;
        std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return events[a]->start_ns < events[b]->start_ns; });
        std::vector<const ProfileEvent*> open;  // the operators started so far and not ended before the current event
        std::size_t next = 0;
        for (const std::size_t i : idx) {
            const ProfileEvent& e = *events[i];
            for (; next < list.size() && list[next]->start_ns <= e.start_ns; ++next)
                if (list[next]->name.rfind("ProfilerStep#", 0) != 0) open.push_back(list[next]);
            std::erase_if(open, [&](const ProfileEvent* op) { return op->end_ns < e.start_ns; });
            std::string outer, inner;
            for (const auto* op : open) {  // in start order: the outer one first
                if (op->end_ns < e.end_ns) continue;
                if (outer.empty()) outer = op->name;
                inner = op->name;
            }
            if (outer.empty()) continue;
            out[i] = "in " + outer + (inner != outer ? " > " + inner : "");
        }
    }
    return out;
}

struct Total {
    double ns = 0;
    std::int64_t calls = 0;
};

std::vector<std::pair<std::string, Total>> by_time(const std::map<std::string, Total>& totals) {
    std::vector<std::pair<std::string, Total>> rows(totals.begin(), totals.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
    return rows;
}

void table(std::vector<std::string>& out, const std::vector<std::pair<std::string, Total>>& rows, double total_ns,
           double iterations, std::size_t top) {
    out.push_back("   ms/iter   share  calls/iter  name");
    for (std::size_t i = 0; i < rows.size() && i < top; ++i) {
        const auto& [name, t] = rows[i];
        char buf[96];
        std::snprintf(buf, sizeof buf, "%10.3f  %5.1f%%  %10.1f  ", t.ns / 1e6 / iterations,
                      total_ns > 0 ? 100.0 * t.ns / total_ns : 0.0, static_cast<double>(t.calls) / iterations);
        out.push_back(buf + shorten(name));
    }
}

}  // namespace

std::vector<std::string> summarize_profile(const std::vector<ProfileEvent>& events, std::int64_t iterations,
                                           bool cuda, std::size_t top) {
    std::vector<std::string> out;
    const double its = static_cast<double>(std::max<std::int64_t>(iterations, 1));
    const auto ops = cpu_ops_by_thread(events);

    if (cuda) {
        // One pass over the device activities (kernels, copies, memsets): their totals by name, and each one's
        // launching runtime call (the same correlation id) for the second table.
        std::map<std::uint64_t, const ProfileEvent*> launch_of;
        for (const auto& e : events)
            if (e.kind == ProfileEventKind::Runtime && e.correlation != 0) launch_of.emplace(e.correlation, &e);
        std::map<std::string, Total> kernels;
        double device_ns = 0;
        std::int64_t launches = 0;
        std::vector<const ProfileEvent*> launchers;
        std::vector<double> launched_ns;
        for (const auto& e : events) {
            if (e.kind != ProfileEventKind::Kernel && e.kind != ProfileEventKind::Memcpy && e.kind != ProfileEventKind::Memset)
                continue;
            const double ns = static_cast<double>(e.end_ns - e.start_ns);
            auto& t = kernels[e.kind == ProfileEventKind::Kernel ? e.name : "[" + e.name + "]"];
            t.ns += ns;
            t.calls += 1;
            device_ns += ns;
            launches += 1;
            const auto it = e.correlation != 0 ? launch_of.find(e.correlation) : launch_of.end();
            if (it == launch_of.end()) continue;
            launchers.push_back(it->second);
            launched_ns.push_back(ns);
        }
        out.push_back("GPU time " + fixed(device_ns / 1e6 / its, 3) + " ms per iteration in " +
                      fixed(static_cast<double>(launches) / its, 0) + " kernels and copies (" +
                      std::to_string(kernels.size()) + " distinct); the longest:");
        table(out, by_time(kernels), device_ns, its, top);

        // The same device time by the operators that launched it.
        if (!launchers.empty()) {
            const auto where = places(ops, launchers);
            std::map<std::string, Total> by_op;
            for (std::size_t i = 0; i < launchers.size(); ++i) {
                auto& t = by_op[where[i]];
                t.ns += launched_ns[i];
                t.calls += 1;
            }
            out.push_back("the same GPU time by the operator that launched it (outermost > innermost on its thread):");
            table(out, by_time(by_op), device_ns, its, top);
        }
    } else {
        // Self time: an operator's time less that of the operators it called on the same thread.
        std::map<std::string, Total> self;
        double self_ns_total = 0;
        for (const auto& [thread, list] : ops) {
            std::vector<std::pair<const ProfileEvent*, double>> stack;  // event, its children's time
            auto close = [&](std::uint64_t until) {
                while (!stack.empty() && stack.back().first->end_ns <= until) {
                    const auto [e, children] = stack.back();
                    stack.pop_back();
                    const double dur = static_cast<double>(e->end_ns - e->start_ns);
                    auto& t = self[e->name];
                    t.ns += std::max(0.0, dur - children);
                    t.calls += 1;
                    self_ns_total += std::max(0.0, dur - children);
                    if (!stack.empty()) stack.back().second += dur;
                }
            };
            for (const auto* e : list) {
                close(e->start_ns);
                stack.emplace_back(e, 0.0);
            }
            close(UINT64_MAX);
        }
        out.push_back("CPU operators: " + fixed(self_ns_total / 1e6 / its, 3) + " ms of self time per iteration (" +
                      std::to_string(self.size()) + " distinct); the longest:");
        table(out, by_time(self), self_ns_total, its, top);
        // What would wait for the device on a GPU, counted where there is none: each read of a tensor's value on
        // the host (Tensor::item) that the step makes itself, outside any other operator, is a host
        // synchronisation there. Reads inside an operator are its CPU kernel's own (the fused AdamW's CPU kernel
        // reads each step count; its CUDA kernel reads them on the device).
        // The operators are sorted by start, so one encloses a read when an earlier one ends at or after it.
        std::int64_t reads = 0;
        for (const auto& [thread, list] : ops) {
            std::uint64_t open_until = 0;  // the latest end of the operators seen so far
            for (const auto* op : list) {
                if (op->name == "aten::item" && open_until < op->end_ns) reads += 1;
                open_until = std::max(open_until, op->end_ns);
            }
        }
        out.push_back("host reads of tensor values (aten::item; a host synchronisation each on a GPU): " +
                      fixed(static_cast<double>(reads) / its, 1) + " per iteration");
    }

    // Host synchronisations, each with the outermost and the innermost operator around it on its thread.
    std::vector<const ProfileEvent*> sync_calls;
    for (const auto& e : events)
        if (e.kind == ProfileEventKind::Runtime && is_sync_call(e.name)) sync_calls.push_back(&e);
    const auto sync_places = places(ops, sync_calls);
    std::map<std::string, std::int64_t> syncs;
    const auto sync_count = static_cast<std::int64_t>(sync_calls.size());
    for (std::size_t i = 0; i < sync_calls.size(); ++i) syncs[sync_calls[i]->name + " " + sync_places[i]] += 1;
    if (cuda) {
        out.push_back("host synchronisations: " + fixed(static_cast<double>(sync_count) / its, 1) + " per iteration" +
                      (syncs.empty() ? "" : ":"));
        std::vector<std::pair<std::string, std::int64_t>> rows(syncs.begin(), syncs.end());
        std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
        for (const auto& [what, n] : rows)
            out.push_back("  " + fixed(static_cast<double>(n) / its, 1) + " x " + shorten(what, 160));
    }
    return out;
}

// ---- the profiler ----------------------------------------------------------------------------------------

struct StepProfiler::Step {
    std::string name;
    at::RecordFunction record{at::RecordScope::USER_SCOPE};
};

namespace {

using CudaProfilerFn = int (*)();

// cudaProfilerStart / Stop from the CUDA runtime LibTorch loaded (no link-time dependency on it).
CudaProfilerFn cuda_profiler_fn(const char* symbol) {
    if (void* f = dlsym(RTLD_DEFAULT, symbol)) return reinterpret_cast<CudaProfilerFn>(f);
    for (const char* lib : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"})
        if (void* h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD))
            if (void* f = dlsym(h, symbol)) return reinterpret_cast<CudaProfilerFn>(f);
    return nullptr;
}

ProfileEventKind kind_of(const torch::autograd::profiler::KinetoEvent& e) {
    switch (static_cast<libkineto::ActivityType>(e.activityType())) {
        case libkineto::ActivityType::CPU_OP: return ProfileEventKind::CpuOp;
        case libkineto::ActivityType::CONCURRENT_KERNEL: return ProfileEventKind::Kernel;
        case libkineto::ActivityType::GPU_MEMCPY: return ProfileEventKind::Memcpy;
        case libkineto::ActivityType::GPU_MEMSET: return ProfileEventKind::Memset;
        case libkineto::ActivityType::CUDA_RUNTIME:
        case libkineto::ActivityType::CUDA_DRIVER: return ProfileEventKind::Runtime;
        default: return ProfileEventKind::Other;
    }
}

std::string hostname() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0) return "host";
    return buf;
}

}  // namespace

StepProfiler::StepProfiler(ProfileOptions options) : options_(std::move(options)) {
    if (options_.step_start < 0 || options_.step_end <= options_.step_start)
        throw UsageError("--profile-step-end (" + std::to_string(options_.step_end) +
                         ") must be after --profile-step-start (" + std::to_string(options_.step_start) + "), which is 0 or more");
    // On a machine without a GPU, Kineto logs "gpuGetDeviceCount failed" as an ERROR when it starts; only its
    // fatal messages then (a KINETO_LOG_LEVEL of the user's own stays).
    if (!options_.cuda) setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
}

StepProfiler::~StepProfiler() {
    if (!active_) return;
    try {
        stop(last_);
    } catch (const std::exception& e) {
        print_warning(std::string("profiler: ") + e.what());
    }
}

void StepProfiler::before_step(std::int64_t completed) {
    last_ = completed;
    if (!active_ && completed == options_.step_start) {
        first_ = completed + 1;
        if (options_.pytorch) {
            using namespace torch::profiler::impl;
            std::set<ActivityType> activities{ActivityType::CPU};
            if (options_.cuda) activities.insert(ActivityType::CUDA);
            torch::autograd::profiler::prepareProfiler(ProfilerConfig(ProfilerState::KINETO, /*report_input_shapes=*/true), activities);
            torch::autograd::profiler::enableProfiler(ProfilerConfig(ProfilerState::KINETO, true), activities);
        } else {
            // Megatron-LM: cudaProfilerStart() and emit_nvtx(record_shapes=True).
            if (auto start = cuda_profiler_fn("cudaProfilerStart")) {
                if (int rc = start(); rc != 0) print_warning("profiler: cudaProfilerStart returned " + std::to_string(rc));
            } else {
                print_warning("profiler: no CUDA runtime loaded: no capture range for Nsight Systems");
            }
            torch::autograd::profiler::enableProfilerLegacy(
                torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::NVTX, true));
        }
        active_ = true;
        started_ = now_s();
        print_info("profiler: rank " + std::to_string(options_.rank) + " profiling iterations " + std::to_string(first_) +
                   " to " + std::to_string(options_.step_end) +
                   (options_.pytorch ? " with LibTorch's profiler" : " (Nsight Systems capture range, NVTX ranges)"));
    }
    if (active_ && options_.pytorch) {
        step_.reset();
        step_ = std::make_unique<Step>();
        step_->name = "ProfilerStep#" + std::to_string(completed + 1);  // TensorBoard's plugin splits steps by these
        step_->record.before(std::string_view(step_->name));
    }
}

void StepProfiler::after_step(std::int64_t completed) {
    last_ = completed;
    if (active_ && completed >= options_.step_end) stop(completed);
}

void StepProfiler::finish(std::int64_t completed) {
    if (active_) stop(completed);
}

void StepProfiler::stop(std::int64_t completed) {
    active_ = false;
    step_.reset();  // ends the last ProfilerStep# range
    const double seconds = now_s() - started_;
    const std::int64_t iterations = std::max<std::int64_t>(completed - first_ + 1, 0);
    const std::string window = "iterations " + std::to_string(first_) + " to " + std::to_string(completed) + " (" +
                               fixed(seconds / static_cast<double>(std::max<std::int64_t>(iterations, 1)), 3) +
                               " s per iteration, profiler included)";
    if (!options_.pytorch) {
        torch::autograd::profiler::disableProfilerLegacy();
        if (auto stop_fn = cuda_profiler_fn("cudaProfilerStop")) (void)stop_fn();
        print_info("profiler: rank " + std::to_string(options_.rank) + ": Nsight Systems capture range closed after " + window);
        return;
    }
    auto result = torch::autograd::profiler::disableProfiler();
    // TensorBoard's PyTorch profiler plugin reads {worker}.{time}.pt.trace.json (tensorboard_trace_handler's name).
    std::filesystem::create_directories(options_.trace_dir.empty() ? "." : options_.trace_dir);
    const auto stamp = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
    const auto path = (std::filesystem::path(options_.trace_dir.empty() ? "." : options_.trace_dir) /
                       (hostname() + "_" + std::to_string(getpid()) + "." + std::to_string(stamp) + ".pt.trace.json")).string();
    const auto tmp = path + ".tmp";
    result->save(tmp);
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw Error("profiler: cannot rename " + tmp + " to " + path + ": " + ec.message());

    std::vector<ProfileEvent> events;
    events.reserve(result->events().size());
    for (const auto& e : result->events()) {
        ProfileEvent p;
        p.kind = kind_of(e);
        if (p.kind == ProfileEventKind::Other) continue;
        p.name = e.name();
        // The host thread of CPU operators and runtime calls alike (startThreadId() numbers the operators'
        // threads differently from the runtime calls').
        p.thread = static_cast<std::uint64_t>(e.deviceResourceId());
        p.start_ns = e.startNs();
        p.end_ns = std::max(e.endNs(), e.startNs());
        p.correlation = e.correlationId();
        events.push_back(std::move(p));
    }
    print_info("profiler: rank " + std::to_string(options_.rank) + ": " + window + "; trace " + path);
    for (const auto& line : summarize_profile(events, iterations, options_.cuda)) print_info("profiler: " + line);
}

}  // namespace mds::trainer
