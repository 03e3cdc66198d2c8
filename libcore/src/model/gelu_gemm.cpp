#include "gelu_gemm.h"

#include <cstdint>
#include <limits>
#include <string>

#ifdef MDS_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>  // LibTorch's cuBLASLt handle and workspace, the current stream
#include <c10/cuda/CUDAGuard.h>
#include <cublasLt.h>
#include <dlfcn.h>  // dlsym
#endif

#include "mds/model/cuda_kernels.h"  // kBuiltWithoutCudaKernels
#include "mds/util/error.h"

namespace mds::model {

std::string gelu_gemm_unsupported(std::initializer_list<at::Tensor> operands, std::int64_t gelu_width) {
    const auto dtype = operands.begin()->scalar_type();
    if (dtype != at::kFloat && dtype != at::kBFloat16) return std::string("fp32 or bf16 only, not ") + c10::toString(dtype);
    constexpr auto kMaxInt = static_cast<std::int64_t>(std::numeric_limits<int>::max());
    for (const auto& t : operands) {
        if (!t.is_cuda() || t.scalar_type() != dtype) return "CUDA tensors of one dtype only";
        if (!t.is_contiguous()) return "contiguous operands only";
        if (reinterpret_cast<std::uintptr_t>(t.const_data_ptr()) % 16 != 0) return "16-byte aligned operands only";
        for (const auto n : t.sizes())
            if (n > kMaxInt) return "sizes within cuBLAS's int only, not " + std::to_string(n);
    }
    if (gelu_width % 8 != 0) return "a GeLU width divisible by 8 only (cuBLASLt's epilogue), not " + std::to_string(gelu_width);
    return gelu_gemm_unavailable();
}

#ifdef MDS_HAVE_CUDA_KERNELS
namespace {

// The cuBLASLt functions used here, from the libcublasLt LibTorch has loaded.
struct LtApi {
    decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
    decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
    decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
    decltype(&cublasLtMatmul) matmul = nullptr;
    std::string missing;  // the first function not found, or empty
};

template <typename F>
void find(F& fn, const char* name, std::string& missing) {
    fn = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
    if (!fn && missing.empty()) missing = name;
}

const LtApi& lt_api() {
    static const LtApi api = [] {
        LtApi a;
        find(a.desc_create, "cublasLtMatmulDescCreate", a.missing);
        find(a.desc_destroy, "cublasLtMatmulDescDestroy", a.missing);
        find(a.desc_set, "cublasLtMatmulDescSetAttribute", a.missing);
        find(a.layout_create, "cublasLtMatrixLayoutCreate", a.missing);
        find(a.layout_destroy, "cublasLtMatrixLayoutDestroy", a.missing);
        find(a.pref_create, "cublasLtMatmulPreferenceCreate", a.missing);
        find(a.pref_destroy, "cublasLtMatmulPreferenceDestroy", a.missing);
        find(a.pref_set, "cublasLtMatmulPreferenceSetAttribute", a.missing);
        find(a.heuristic, "cublasLtMatmulAlgoGetHeuristic", a.missing);
        find(a.matmul, "cublasLtMatmul", a.missing);
        return a;
    }();
    return api;
}

void check(cublasStatus_t status, const char* call, const std::string& what) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw Error("--gelu-epilogue-fusion: " + std::string(call) + " for " + what + " failed: cuBLAS status " +
                    std::to_string(static_cast<int>(status)));
}

// One product's descriptors, destroyed however the call ends.
struct LtMatmul {
    const LtApi& lt;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    explicit LtMatmul(const LtApi& api) : lt(api) {}
    LtMatmul(const LtMatmul&) = delete;
    LtMatmul& operator=(const LtMatmul&) = delete;
    ~LtMatmul() {
        if (pref) lt.pref_destroy(pref);
        if (d) lt.layout_destroy(d);
        if (b) lt.layout_destroy(b);
        if (a) lt.layout_destroy(a);
        if (desc) lt.desc_destroy(desc);
    }
};

struct Product {
    cublasOperation_t trans_a;   // op(A) = A or Aᵀ; B is never transposed
    std::int64_t m, n, k;        // D [m × n] = op(A) [m × k] · B [k × n], all column-major, packed
    const void *a, *b, *bias;    // bias: [m] (read by BIAS, written by BGRAD), or null
    void *d, *aux;               // aux: [m × n], ld m (the GeLU's input: written by the forward, read by DGELU)
    cublasLtEpilogue_t epilogue;
    cudaDataType_t type;         // of every operand
};

bool run(const Product& p, const std::string& what) {
    const LtApi& lt = lt_api();
    if (!lt.missing.empty()) throw Error("--gelu-epilogue-fusion: " + gelu_gemm_unavailable());
    LtMatmul mm(lt);
    check(lt.desc_create(&mm.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate", what);
    const auto set = [&](cublasLtMatmulDescAttributes_t attr, const auto& value) {
        check(lt.desc_set(mm.desc, attr, &value, sizeof value), "cublasLtMatmulDescSetAttribute", what);
    };
    const cublasOperation_t no_trans = CUBLAS_OP_N;
    const std::int64_t aux_ld = p.m;
    set(CUBLASLT_MATMUL_DESC_TRANSA, p.trans_a);
    set(CUBLASLT_MATMUL_DESC_TRANSB, no_trans);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue);
    if (p.bias) set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);  // of D's type, its default
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld);
    const auto layout = [&](cublasLtMatrixLayout_t* l, std::int64_t rows, std::int64_t cols) {
        check(lt.layout_create(l, p.type, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols), rows),
              "cublasLtMatrixLayoutCreate", what);
    };
    const bool ta = p.trans_a == CUBLAS_OP_T;
    layout(&mm.a, ta ? p.k : p.m, ta ? p.m : p.k);  // A as stored
    layout(&mm.b, p.k, p.n);
    layout(&mm.d, p.m, p.n);  // C and D: beta 0, C is never read
    const auto handle = at::cuda::getCurrentCUDABlasLtHandle();
    void* workspace = at::cuda::getCUDABlasLtWorkspace();
    const std::uint64_t workspace_bytes = at::cuda::getCUDABlasLtWorkspaceSize();
    check(lt.pref_create(&mm.pref), "cublasLtMatmulPreferenceCreate", what);
    check(lt.pref_set(mm.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof workspace_bytes),
          "cublasLtMatmulPreferenceSetAttribute", what);
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    const auto status = lt.heuristic(handle, mm.desc, mm.a, mm.b, mm.d, mm.d, mm.pref, 1, &heuristic, &found);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
    check(status, "cublasLtMatmulAlgoGetHeuristic", what);
    const float alpha = 1.0f, beta = 0.0f;
    check(lt.matmul(handle, mm.desc, &alpha, p.a, mm.a, p.b, mm.b, &beta, p.d, mm.d, p.d, mm.d, &heuristic.algo, workspace,
                    workspace_bytes, at::cuda::getCurrentCUDAStream()),
          "cublasLtMatmul", what);
    return true;
}

cudaDataType_t cuda_type(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F; }

std::string describe(const char* op, const at::Tensor& a, const at::Tensor& w) {
    return std::string(op) + " of " + c10::str(a.sizes()) + " and " + c10::str(w.sizes()) + " " + c10::toString(a.scalar_type()) +
           " on " + a.device().str();
}

}  // namespace

std::string gelu_gemm_unavailable() {
    const auto& missing = lt_api().missing;
    if (missing.empty()) return {};
    return "cuBLASLt's " + missing + " is not loaded in this process (LibTorch's libcublasLt)";
}

bool gemm_bias_gelu(const at::Tensor& x2, const at::Tensor& w, const at::Tensor& b, const at::Tensor& out,
                    const at::Tensor& pre) {
    // Column-major, as cuBLAS reads: out is [hidden × rows] (ld hidden) = op(w) · x2, where w as stored is
    // [in × hidden] (op: transposed) and x2 [in × rows]; the bias runs along D's rows (the hidden units), then the GeLU.
    const c10::cuda::CUDAGuard guard(x2.device());
    return run({CUBLAS_OP_T, w.size(0), x2.size(0), x2.size(1), w.const_data_ptr(), x2.const_data_ptr(), b.const_data_ptr(),
                out.data_ptr(), pre.data_ptr(), CUBLASLT_EPILOGUE_GELU_AUX_BIAS, cuda_type(x2)},
               describe("x wᵀ + b with GeLU", x2, w));
}

bool gemm_dgelu(const at::Tensor& g2, const at::Tensor& w2, const at::Tensor& pre, const at::Tensor& dpre,
                const at::Tensor& dbias) {
    // Column-major: dpre is [hidden × rows] = w2-as-stored [hidden × out] times g2 [out × rows], times GeLU's
    // derivative at pre (the same [hidden × rows]); with dbias, also dpre's sums along its rows (per hidden unit).
    const c10::cuda::CUDAGuard guard(g2.device());
    const bool bgrad = dbias.defined();
    return run({CUBLAS_OP_N, w2.size(1), g2.size(0), g2.size(1), w2.const_data_ptr(), g2.const_data_ptr(),
                bgrad ? dbias.data_ptr() : nullptr, dpre.data_ptr(), pre.data_ptr(),
                bgrad ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU, cuda_type(g2)},
               describe(bgrad ? "g w with GeLU's derivative and its column sums" : "g w with GeLU's derivative", g2, w2));
}

#else  // a build without CUDA

std::string gelu_gemm_unavailable() { return kBuiltWithoutCudaKernels; }

bool gemm_bias_gelu(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) {
    throw Error(std::string("--gelu-epilogue-fusion: ") + kBuiltWithoutCudaKernels);
}

bool gemm_dgelu(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) {
    throw Error(std::string("--gelu-epilogue-fusion: ") + kBuiltWithoutCudaKernels);
}

#endif

}  // namespace mds::model
