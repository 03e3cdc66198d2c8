// How libcore's model and trainer areas call a kernels/ op on a tensor's device: its CUDA launcher on the current
// stream of a CUDA tensor's device, its CPU reference for a CPU tensor; a failure becomes an mds::Error naming the
// op and the operands. For those two areas' sources only: they are compiled with MDS_HAVE_CUDA_KERNELS where
// kernels/ has CUDA kernels (libcore/CMakeLists.txt); without it a CUDA tensor is refused.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#ifdef MDS_HAVE_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <cstdint>
#include <exception>
#include <string>

#include "kernels/dtype.h"
#include "mds/model/cuda_kernels.h"
#include "mds/util/error.h"

namespace mds::model {

// Empty when kernels/ can run tensors of `dtype` on `device` (fp32 or bf16; the CPU, or CUDA where the kernels were
// built), else why not; `values` names them in the message ("logits": "fp32 or bf16 logits only, not Half").
inline std::string kernel_unsupported(const c10::Device& device, c10::ScalarType dtype, const std::string& values = "") {
    if (dtype != at::kFloat && dtype != at::kBFloat16)
        return "fp32 or bf16 " + (values.empty() ? std::string() : values + " ") + "only, not " + c10::toString(dtype);
#ifndef MDS_HAVE_CUDA_KERNELS
    if (device.is_cuda()) return kBuiltWithoutCudaKernels;
#endif
    if (!device.is_cuda() && !device.is_cpu()) return "CPU or CUDA devices only, not " + device.str();
    return {};
}

inline kernels::Dtype kernel_dtype(const at::Tensor& t) {
    return t.scalar_type() == at::kFloat ? kernels::Dtype::F32 : kernels::Dtype::BF16;
}

// "8 x 512 bf16 logits on cuda:0": a row kernel's operands for an error message (`values` may be empty).
inline std::string describe_rows(std::int64_t rows, std::int64_t cols, const at::Tensor& t, const std::string& values = "") {
    return std::to_string(rows) + " x " + std::to_string(cols) + " " + c10::toString(t.scalar_type()) + " " +
           (values.empty() ? std::string() : values + " ") + "on " + t.device().str();
}

// `cuda(stream)` (a cudaStream_t as void*) when `on` is a CUDA tensor, else `cpu()`. A failure becomes an Error
// "<op> of <what()>: <why>"; `what` (a callable returning the operands' description, as describe_rows) runs only then.
template <typename Describe, typename Cuda, typename Cpu>
void run_kernel(const char* op, const at::Tensor& on, Describe&& what, Cuda&& cuda, Cpu&& cpu) {
    try {
        if (on.is_cuda()) {
#ifdef MDS_HAVE_CUDA_KERNELS
            const c10::cuda::CUDAGuard guard(on.device());
            cuda(static_cast<void*>(c10::cuda::getCurrentCUDAStream(on.device().index()).stream()));
#else
            (void)cuda;
            throw Error(kBuiltWithoutCudaKernels);
#endif
        } else {
            cpu();
        }
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        throw Error(std::string(op) + " of " + what() + ": " + e.what());
    }
}

}  // namespace mds::model
