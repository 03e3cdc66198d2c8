// Force-included (nvcc -include) when bench/gpu/bench.py builds llm.c's train_gpt2.cu, so that its
// unmodified source builds with CUDA 13 and never takes managed memory for large buffers.
//  - CUDA 13 changed cudaMemAdvise's last parameter from a device number to a cudaMemLocation;
//    llm.c passes cudaCpuDeviceId (an int). The overload below takes the old form.
//  - llm.c falls back to cudaMallocManaged when cudaMalloc runs out of memory. A managed allocation
//    larger than the card's free memory can hang the GPU of a lent machine, so allocations above
//    1 MiB through cudaMallocManaged fail as out of memory instead (llm.c then stops with its own
//    error message); its one small managed buffer (a float in zero.cuh) still works.
#pragma once
#include <cuda_runtime.h>

#if defined(CUDART_VERSION) && CUDART_VERSION >= 13000
static inline cudaError_t cudaMemAdvise(const void* ptr, size_t bytes, cudaMemoryAdvise advice, int device) {
    cudaMemLocation location{};
    location.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    location.id = device == cudaCpuDeviceId ? 0 : device;
    return cudaMemAdvise(ptr, bytes, advice, location);
}
#endif

template <class T>
static inline cudaError_t mds_llmc_managed(T** ptr, size_t bytes) {
    if (bytes > (size_t(1) << 20)) return cudaErrorMemoryAllocation;
    return (cudaMallocManaged)(ptr, bytes);
}
#define cudaMallocManaged(ptr, bytes) mds_llmc_managed(ptr, bytes)
