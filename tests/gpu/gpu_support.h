// What the kernel GPU tests (tests/gpu/*_gpu.cpp) share: CUDA calls checked with a message, device memory freed
// on every path, and the skip without a device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "kernels/dtype.h"

namespace mds::gpu_test {

inline bool cuda_ok(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    std::fprintf(stderr, "FAIL: %s: %s\n", what, cudaGetErrorString(e));
    return false;
}

// `bytes` of device memory; with `offset`, they start that many bytes past the aligned allocation (at()): the
// unaligned starts that a kernel meets in tensors that are views.
struct DeviceBuffer {
    void* p = nullptr;
    std::size_t offset = 0;
    explicit DeviceBuffer(std::size_t bytes, std::size_t offset_bytes = 0) : offset(offset_bytes) {
        if (!cuda_ok(cudaMalloc(&p, offset + bytes == 0 ? 1 : offset + bytes), "cudaMalloc")) std::exit(1);
    }
    ~DeviceBuffer() { cudaFree(p); }
    void* at() const { return static_cast<char*>(p) + offset; }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Prints the device's name after `test` and returns true; without a device prints SKIP and returns false (the
// caller exits 77, ctest's and the GPU pack's "skipped").
inline bool have_device(const char* test) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("SKIP: no CUDA device\n");
        return false;
    }
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::printf("%s: %s\n", test, prop.name);
    return true;
}

// Runs `run(case)` (the worst error / tolerance ratio) for every case and prints "ok" or "FAIL", the case's
// `describe(case)` and the ratio; a case that throws fails with the message. Returns the process's exit status.
template <typename Case, typename Run, typename Describe>
int run_cases(const char* test, const std::vector<Case>& cases, Run&& run, Describe&& describe) {
    int failed = 0;
    for (const auto& c : cases) {
        double worst;
        try {
            worst = run(c);
        } catch (const std::exception& e) {
            std::printf("FAIL %s: %s\n", describe(c).c_str(), e.what());
            ++failed;
            continue;
        }
        const bool pass = worst <= 1.0;
        std::printf("%s %s: worst error / tolerance %.3g\n", pass ? "ok  " : "FAIL", describe(c).c_str(), worst);
        failed += pass ? 0 : 1;
    }
    std::printf("%s: %zu cases, %d failed\n", test, cases.size(), failed);
    return failed == 0 ? 0 : 1;
}

// run_cases' description of a case over rows of columns: "its name (rows x cols, dtype)".
template <typename Case>
std::string describe_rows(const Case& c) {
    return c.name + " (" + std::to_string(c.shape.rows) + " x " + std::to_string(c.shape.cols) + ", " +
           mds::kernels::dtype_name(c.dtype) + ")";
}

}  // namespace mds::gpu_test
