// --profile's summary (summarize_profile): GPU kernels by time per iteration, CPU operators by self time,
// and each host synchronisation attributed to the operators around it on its thread.
#include <doctest/doctest.h>

// After doctest: LibTorch defines its own CHECK (glog style), so this file spells DOCTEST_CHECK.
#include <string>
#include <vector>

#include "mds/trainer/step_profiler.h"

using namespace mds::trainer;

namespace {

ProfileEvent ev(const std::string& name, ProfileEventKind kind, std::uint64_t thread, std::uint64_t start_us,
                std::uint64_t end_us) {
    return ProfileEvent{name, kind, thread, start_us * 1000, end_us * 1000};
}

bool has_line(const std::vector<std::string>& lines, const std::string& part) {
    for (const auto& l : lines)
        if (l.find(part) != std::string::npos) return true;
    return false;
}

std::string joined(const std::vector<std::string>& lines) {
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
}

}  // namespace

TEST_CASE("summarize_profile on a GPU: kernels by device time per iteration, synchronisations by operator") {
    const auto K = ProfileEventKind::Kernel, R = ProfileEventKind::Runtime, C = ProfileEventKind::CpuOp;
    std::vector<ProfileEvent> events = {
        // two iterations: a GEMM of 3 ms and a softmax of 1 ms each, one 0.5 ms copy in all
        ev("sm90_gemm_bf16", K, 7, 0, 3000), ev("softmax_kernel", K, 7, 3000, 4000),
        ev("sm90_gemm_bf16", K, 7, 10000, 13000), ev("softmax_kernel", K, 7, 13000, 14000),
        ev("Memcpy DtoH (Device -> Pageable)", ProfileEventKind::Memcpy, 7, 14000, 14500),
        ev("Memset (Device)", ProfileEventKind::Memset, 7, 4000, 4500),
        // host thread 1: aten::item > aten::_local_scalar_dense > cudaStreamSynchronize, once per iteration
        ev("aten::item", C, 1, 100, 400), ev("aten::_local_scalar_dense", C, 1, 110, 390),
        ev("cudaMemcpyAsync", R, 1, 120, 130), ev("cudaStreamSynchronize", R, 1, 130, 380),
        ev("aten::item", C, 1, 10100, 10400), ev("aten::_local_scalar_dense", C, 1, 10110, 10390),
        ev("cudaStreamSynchronize", R, 1, 10130, 10380),
        // a launch is no synchronisation; one synchronisation on another thread, outside any operator
        ev("cudaLaunchKernel", R, 1, 500, 505), ev("cudaDeviceSynchronize", R, 2, 600, 700),
    };
    const auto lines = summarize_profile(events, 2, /*cuda=*/true);
    INFO(joined(lines));
    // 2 × (3 + 1) + 0.5 + 0.5 = 9 ms over 2 iterations; 6 kernels, copies and sets.
    DOCTEST_CHECK(has_line(lines, "GPU time 4.500 ms per iteration in 3 kernels and copies (4 distinct)"));
    DOCTEST_CHECK(has_line(lines, "     3.000   66.7%         1.0  sm90_gemm_bf16"));
    DOCTEST_CHECK(has_line(lines, "     1.000   22.2%         1.0  softmax_kernel"));
    DOCTEST_CHECK(has_line(lines, "     0.250    5.6%         0.5  [Memset (Device)]"));
    DOCTEST_CHECK(has_line(lines, "[Memcpy DtoH (Device -> Pageable)]"));
    // The GEMM row comes before the softmax row.
    std::size_t gemm = 0, softmax = 0;
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (lines[i].find("sm90_gemm_bf16") != std::string::npos) gemm = i;
        if (lines[i].find("softmax_kernel") != std::string::npos) softmax = i;
    }
    DOCTEST_CHECK(gemm < softmax);
    DOCTEST_CHECK(has_line(lines, "host synchronisations: 1.5 per iteration:"));
    DOCTEST_CHECK(has_line(lines, "1.0 x cudaStreamSynchronize in aten::item > aten::_local_scalar_dense"));
    DOCTEST_CHECK(has_line(lines, "0.5 x cudaDeviceSynchronize outside any operator"));
    DOCTEST_CHECK(!has_line(lines, "cudaLaunchKernel"));
    DOCTEST_CHECK(!has_line(lines, "cudaMemcpyAsync"));
}

TEST_CASE("summarize_profile on a GPU: device time by the operator that launched it, the step ranges left out") {
    const auto K = ProfileEventKind::Kernel, R = ProfileEventKind::Runtime, C = ProfileEventKind::CpuOp;
    auto launched = [](ProfileEvent e, std::uint64_t correlation) {
        e.correlation = correlation;
        return e;
    };
    std::vector<ProfileEvent> events = {
        // thread 1, the forward: aten::linear > aten::addmm launches a GEMM (4 ms); aten::add an add (1 ms)
        ev("ProfilerStep#7", C, 1, 0, 900), ev("aten::linear", C, 1, 10, 60), ev("aten::addmm", C, 1, 20, 50),
        launched(ev("cudaLaunchKernel", R, 1, 30, 35), 11), ev("aten::add", C, 1, 70, 90),
        launched(ev("cudaLaunchKernel", R, 1, 75, 80), 12),
        // thread 2, the backward: the autograd node's mm launches a GEMM (2 ms) and a copy (0.5 ms)
        ev("autograd::engine::evaluate_function: AddmmBackward0", C, 2, 100, 300), ev("aten::mm", C, 2, 110, 150),
        launched(ev("cudaLaunchKernel", R, 2, 120, 125), 13), ev("aten::copy_", C, 2, 160, 200),
        launched(ev("cudaMemcpyAsync", R, 2, 170, 180), 14),
        // a launch outside any operator but the step (1.5 ms)
        launched(ev("cudaLaunchKernel", R, 1, 800, 805), 15),
        // the device: each with its launch's correlation; a kernel without one is left out of the second table
        launched(ev("sm90_gemm", K, 7, 1000, 5000), 11), launched(ev("add_kernel", K, 7, 5000, 6000), 12),
        launched(ev("sm90_gemm", K, 7, 6000, 8000), 13),
        launched(ev("Memcpy DtoD (Device -> Device)", ProfileEventKind::Memcpy, 7, 8000, 8500), 14),
        launched(ev("reduce_kernel", K, 7, 8500, 10000), 15), ev("nccl_kernel", K, 7, 10000, 10250),
    };
    const auto lines = summarize_profile(events, 1, /*cuda=*/true);
    INFO(joined(lines));
    DOCTEST_CHECK(has_line(lines, "GPU time 9.250 ms per iteration"));
    DOCTEST_CHECK(has_line(lines, "the same GPU time by the operator that launched it"));
    DOCTEST_CHECK(has_line(lines, "     4.000   43.2%         1.0  in aten::linear > aten::addmm"));
    DOCTEST_CHECK(has_line(lines, "     2.000   21.6%         1.0  in autograd::engine::evaluate_function: AddmmBackward0 > aten::mm"));
    DOCTEST_CHECK(has_line(lines, "     1.500   16.2%         1.0  outside any operator"));
    DOCTEST_CHECK(has_line(lines, "     1.000   10.8%         1.0  in aten::add"));
    DOCTEST_CHECK(has_line(lines, "     0.500    5.4%         1.0  in autograd::engine::evaluate_function: AddmmBackward0 > aten::copy_"));
    DOCTEST_CHECK(!has_line(lines, "ProfilerStep#7"));
    // The GEMMs of both passes stay one row in the first table.
    DOCTEST_CHECK(has_line(lines, "     6.000   64.9%         2.0  sm90_gemm"));
}

TEST_CASE("summarize_profile: a GPU window without synchronisations says so; top limits the rows") {
    std::vector<ProfileEvent> events;
    for (int i = 0; i < 20; ++i)
        events.push_back(ev("kernel_" + std::to_string(i), ProfileEventKind::Kernel, 7, 100 * i, 100 * i + 10 + i));
    const auto lines = summarize_profile(events, 1, true, 5);
    INFO(joined(lines));
    DOCTEST_CHECK(has_line(lines, "host synchronisations: 0.0 per iteration"));
    DOCTEST_CHECK(has_line(lines, "kernel_19"));  // the longest
    DOCTEST_CHECK(!has_line(lines, "kernel_14"));  // the sixth longest
    DOCTEST_CHECK(lines.size() == 1 + 1 + 5 + 1);  // title, header, 5 rows, synchronisations
}

TEST_CASE("summarize_profile on a CPU: operators by self time, nested calls subtracted, per thread") {
    const auto C = ProfileEventKind::CpuOp;
    std::vector<ProfileEvent> events = {
        // linear (10 ms) calls addmm (8 ms), which calls copy_ (2 ms): self 2, 6, 2
        ev("aten::linear", C, 1, 0, 10000), ev("aten::addmm", C, 1, 1000, 9000), ev("aten::copy_", C, 1, 2000, 4000),
        // on another thread at the same time, a 5 ms addmm alone: not nested in the linear above
        ev("aten::addmm", C, 2, 500, 5500),
        // an operator starting exactly where the linear ends is its sibling, not its child
        ev("aten::gelu", C, 1, 10000, 13000),
    };
    const auto lines = summarize_profile(events, 1, /*cuda=*/false);
    INFO(joined(lines));
    DOCTEST_CHECK(has_line(lines, "CPU operators: 18.000 ms of self time per iteration (4 distinct)"));
    DOCTEST_CHECK(has_line(lines, "    11.000   61.1%         2.0  aten::addmm"));
    DOCTEST_CHECK(has_line(lines, "     3.000   16.7%         1.0  aten::gelu"));
    DOCTEST_CHECK(has_line(lines, "     2.000   11.1%         1.0  aten::linear"));
    DOCTEST_CHECK(has_line(lines, "     2.000   11.1%         1.0  aten::copy_"));
    DOCTEST_CHECK(!has_line(lines, "host synchronisations"));  // a GPU matter
    DOCTEST_CHECK(has_line(lines, "host reads of tensor values (aten::item; a host synchronisation each on a GPU): 0.0 per iteration"));
}

TEST_CASE("summarize_profile on a CPU: the reads of tensor values on the host, per iteration") {
    const auto C = ProfileEventKind::CpuOp;
    std::vector<ProfileEvent> events;
    for (std::uint64_t it = 0; it < 2; ++it) {  // 3 reads of the step's own in each of 2 iterations
        const std::uint64_t t0 = it * 10000;
        events.push_back(ev("aten::item", C, 1, t0, t0 + 100));
        events.push_back(ev("aten::_local_scalar_dense", C, 1, t0 + 10, t0 + 90));
        events.push_back(ev("aten::item", C, 1, t0 + 200, t0 + 300));
        events.push_back(ev("aten::_local_scalar_dense", C, 1, t0 + 210, t0 + 290));
        events.push_back(ev("aten::item", C, 2, t0 + 400, t0 + 450));  // another thread
        // the fused AdamW's CPU kernel reading its step counts: not the step's own reads
        events.push_back(ev("aten::_fused_adamw_", C, 1, t0 + 1000, t0 + 2000));
        events.push_back(ev("aten::item", C, 1, t0 + 1100, t0 + 1200));
        events.push_back(ev("aten::item", C, 1, t0 + 1300, t0 + 1400));
    }
    const auto lines = summarize_profile(events, 2, /*cuda=*/false);
    INFO(joined(lines));
    DOCTEST_CHECK(has_line(lines, "host reads of tensor values (aten::item; a host synchronisation each on a GPU): 3.0 per iteration"));
}
