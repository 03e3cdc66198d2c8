// What the kernel GPU tests (tests/gpu/*_gpu.cpp) share: CUDA calls checked with a message, device memory freed
// on every path, and the skip without a device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>

namespace mds::gpu_test {

inline bool cuda_ok(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    std::fprintf(stderr, "FAIL: %s: %s\n", what, cudaGetErrorString(e));
    return false;
}

struct DeviceBuffer {
    void* p = nullptr;
    explicit DeviceBuffer(std::size_t bytes) {
        if (!cuda_ok(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc")) std::exit(1);
    }
    ~DeviceBuffer() { cudaFree(p); }
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

}  // namespace mds::gpu_test
