// MDS_HD: a function the CUDA kernels and the CPU code (references, unit tests) share: __host__ __device__ and
// inlined under nvcc, a plain inline function elsewhere.
#pragma once

#if defined(__CUDACC__)
#define MDS_HD __host__ __device__ __forceinline__
#else
#define MDS_HD inline
#endif
