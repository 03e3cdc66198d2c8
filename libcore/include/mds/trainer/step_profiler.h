// Megatron-LM's --profile for mds-train: a window of training iterations, either under LibTorch's own
// profiler (--use-pytorch-profiler: a Chrome / TensorBoard trace and a summary in the log) or as Nsight
// Systems' capture range (cudaProfilerStart / Stop, with NVTX ranges per operator, as emit_nvtx).
//
// Megatron-LM's window: the profiler starts before the step that follows iteration --profile-step-start
// and stops after iteration --profile-step-end, so the defaults 10 and 12 profile the steps logged as
// iterations 11 and 12, on the ranks of --profile-ranks (default 0).
//
// The summary (summarize_profile, pure, so tested without a device): the device's kernels by time and by the
// operators that launched them (or on a CPU the operators by self time), and every host synchronisation of the
// window with the operator that made it (a CUDA runtime call named *Synchronize, or a blocking cudaMemcpy).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mds::trainer {

struct ProfileOptions {
    bool pytorch = false;           // --use-pytorch-profiler (else Nsight's capture range)
    std::int64_t step_start = 10;   // --profile-step-start
    std::int64_t step_end = 12;     // --profile-step-end
    std::string trace_dir;          // the trace's folder (--tensorboard-dir, else the working directory)
    bool cuda = false;              // the model is on a GPU
    int rank = 0;                   // for the trace's name and the summary
};

// One event of a profile, as the summary needs it.
enum class ProfileEventKind { CpuOp, Kernel, Memcpy, Memset, Runtime, Other };
struct ProfileEvent {
    std::string name;
    ProfileEventKind kind = ProfileEventKind::Other;
    std::uint64_t thread = 0;       // host thread (CPU operators and runtime calls nest per thread)
    std::uint64_t start_ns = 0, end_ns = 0;
    std::uint64_t correlation = 0;  // a kernel, copy or set and the runtime call that launched it share it (0: none)
};

// The summary's lines (no prefix): the kernels or operators taking the most time (`top` of them); on a GPU
// also the device time by the operators that launched the kernels (outermost and innermost around the launch on
// its thread); the host synchronisations; each per profiled iteration.
std::vector<std::string> summarize_profile(const std::vector<ProfileEvent>& events, std::int64_t iterations,
                                           bool cuda, std::size_t top = 25);

class StepProfiler {
public:
    explicit StepProfiler(ProfileOptions options);
    ~StepProfiler();  // a window still open (the run stopped inside it) is closed and summarized
    StepProfiler(const StepProfiler&) = delete;
    StepProfiler& operator=(const StepProfiler&) = delete;

    // Before the step that follows `completed` iterations; starts the window at --profile-step-start.
    void before_step(std::int64_t completed);
    // After that step (`completed` now counts it); stops the window at --profile-step-end and prints the
    // trace's path and the summary ("mds-train: profiler: ...").
    void after_step(std::int64_t completed);
    // The run ends inside the window: stops and prints now (nothing when no window is open).
    void finish(std::int64_t completed);
    bool active() const { return active_; }

private:
    void stop(std::int64_t completed);

    ProfileOptions options_;
    bool active_ = false;
    std::int64_t first_ = 0;        // the first profiled iteration (1-based, as logged)
    std::int64_t last_ = 0;         // the iterations completed when last told
    double started_ = 0;            // steady clock seconds at the start
    struct Step;                    // the current ProfilerStep#N annotation
    std::unique_ptr<Step> step_;
};

}  // namespace mds::trainer
