// What libcore says when a kernels/ CUDA kernel is asked for on a GPU by an mds built without them (no nvcc
// when it was configured: kernels/CMakeLists.txt). The files that call the kernels are compiled with
// MDS_HAVE_CUDA_KERNELS where they exist (libcore/CMakeLists.txt).
#pragma once

namespace mds::model {

inline constexpr const char* kBuiltWithoutCudaKernels =
    "this mds-train was built without CUDA kernels (kernels/: no nvcc at configure time)";

}  // namespace mds::model
