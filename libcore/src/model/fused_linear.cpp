#include "mds/model/fused_linear.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/gelu_backward.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#ifdef MDS_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>  // getCurrentCUDABlasHandle: LibTorch's cuBLAS handle, on the current stream
#include <cublas_v2.h>
#include <dlfcn.h>  // dlsym
#endif

#include "kernels/bias_grad.h"
#include "kernels/bias_grad_ref.h"
#include "gelu_gemm.h"
#include "mds/model/kernel_call.h"
#include "mds/util/error.h"
#include "mds/util/tool.h"  // print_warning

namespace mds::model {
namespace {

constexpr const char* kGeluFlag = "--gelu-epilogue-fusion";

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Σ over the rows of g2 [rows, cols] → [cols] fp32, by kernels/bias_grad.h.
at::Tensor bias_grad(const at::Tensor& g2) {
    const kernels::BiasGradShape shape{g2.size(0), g2.size(1)};
    const auto fp32 = g2.options().dtype(at::kFloat);
    auto db = at::empty({shape.cols}, fp32);
    const auto dtype = kernel_dtype(g2);
    run_kernel(
        "fused bias grad", g2, [&] { return describe_rows(shape.rows, shape.cols, g2); },
        [&](void* stream) {
            auto scratch = at::empty({kernels::bias_grad_scratch_floats(shape)}, fp32);
            kernels::bias_grad_cuda(g2.const_data_ptr(), dtype, shape, db.data_ptr<float>(), scratch.data_ptr<float>(), stream);
        },
        [&] { kernels::bias_grad_ref(g2.const_data_ptr(), dtype, shape, db.data_ptr<float>()); });
    return db;
}

#ifdef MDS_HAVE_CUDA_KERNELS
// cuBLAS's cublasGemmEx from the libcublas LibTorch has loaded. Not linked: a link to the toolkit's libcublas would
// make the binary load that one (its run path lists the toolkit's folder first) beside or instead of LibTorch's, a
// library the GPU pack does not carry (scripts/gpu-pack.sh's test refuses it).
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                  const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
GemmEx find_cublas_gemm_ex() {
    static const auto fn = reinterpret_cast<GemmEx>(dlsym(RTLD_DEFAULT, "cublasGemmEx"));
    return fn;
}
constexpr const char* kNoGemmEx = "cuBLAS's cublasGemmEx is not loaded in this process (LibTorch's libcublas)";
GemmEx cublas_gemm_ex() {
    const auto fn = find_cublas_gemm_ex();
    if (!fn) throw Error(std::string("gradient accumulation fusion: ") + kNoGemmEx);
    return fn;
}
#endif

// A cuBLAS result against ATen's steps on the same operands, for the first product of each kind in a process (its
// caller's once-flag): a product that computes otherwise on this GPU and cuBLAS (a layout read otherwise, an
// epilogue) stops the run at its first step instead of training on. Each pair is (cuBLAS's, ATen's); the largest
// difference, relative to ATen's largest value, must stay within the dtype's rounding.
void check_against_aten(const char* flag, const std::string& what, std::initializer_list<std::pair<at::Tensor, at::Tensor>> pairs) {
    for (const auto& [got, want] : pairs) {
        const auto g = got.to(at::kFloat), w = want.to(at::kFloat);
        const double scale = std::max(w.abs().max().item<double>(), 1e-30);
        const double err = (g - w).abs().max().item<double>() / scale;
        const double tol = got.scalar_type() == at::kBFloat16 ? 3e-2 : 1e-3;
        if (!(err <= tol))
            throw Error(std::string(flag) + ": cuBLAS's " + what + " differs from ATen's steps by " + std::to_string(err) +
                        " of its largest value (at most " + std::to_string(tol) + " expected) on " + got.device().str() +
                        ": run without " + flag);
    }
}

// main [out, in] fp32 += g2ᵀ x2, for g2 [rows, out] and x2 [rows, in] of one dtype: the products summed in fp32.
void add_weight_grad(at::Tensor& main, const at::Tensor& g2, const at::Tensor& x2) {
    const auto out = g2.size(1), in = x2.size(1);
    if (main.scalar_type() != at::kFloat || main.sizes() != at::IntArrayRef{out, in} || main.device() != g2.device())
        throw Error(std::string("gradient accumulation fusion: the main gradient is ") + c10::toString(main.scalar_type()) + " " +
                    c10::str(main.sizes()) + " on " + main.device().str() + ", expected fp32 [" + std::to_string(out) + ", " +
                    std::to_string(in) + "] on " + g2.device().str());
#ifdef MDS_HAVE_CUDA_KERNELS
    const auto rows = g2.size(0);
    constexpr auto kMaxInt = static_cast<std::int64_t>(std::numeric_limits<int>::max());
    if (g2.is_cuda() && main.is_contiguous() && g2.is_contiguous() && x2.is_contiguous() && rows <= kMaxInt && out <= kMaxInt &&
        in <= kMaxInt) {
        // Column-major, as cuBLAS reads: main is [in, out], x2 is [in, rows] and g2 is [out, rows], so
        // main += x2 · g2ᵀ with beta 1 is the row-major main += g2ᵀ x2.
        const c10::cuda::CUDAGuard guard(g2.device());
        const cudaDataType_t ab = g2.scalar_type() == at::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
        const float alpha = 1.0f, beta = 1.0f;
        const int m = static_cast<int>(in), n = static_cast<int>(out), k = static_cast<int>(rows);
        static std::atomic<bool> checked{false};
        const bool check = !checked.exchange(true);
        const at::Tensor before = check ? main.clone() : at::Tensor();
        const cublasStatus_t status = cublas_gemm_ex()(at::cuda::getCurrentCUDABlasHandle(), CUBLAS_OP_N, CUBLAS_OP_T, m, n, k,
                                                       &alpha, x2.const_data_ptr(), ab, m, g2.const_data_ptr(), ab, n, &beta,
                                                       main.data_ptr(), CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (status != CUBLAS_STATUS_SUCCESS)
            throw Error("gradient accumulation fusion: cublasGemmEx of [" + std::to_string(rows) + ", " + std::to_string(out) +
                        "]ᵀ x [" + std::to_string(rows) + ", " + std::to_string(in) + "] " + c10::toString(g2.scalar_type()) +
                        " into fp32 failed: cuBLAS status " + std::to_string(static_cast<int>(status)));
        if (check)
            check_against_aten("--gradient-accumulation-fusion", "gᵀ x added into the fp32 main gradient",
                               {{main - before, at::mm(g2.t().to(at::kFloat), x2.to(at::kFloat))}});
        return;
    }
#endif
    main.addmm_(g2.t().to(at::kFloat), x2.to(at::kFloat));
}

// The weight's gradient g2ᵀ x2: added into `sink`'s fp32 main gradient when it holds one (returning autograd's
// placeholder, never read: its hooks run as they would, and MainGrads drops it, main_grad_sink.h; Megatron-LM hands
// back the same uninitialized tensor), else returned.
at::Tensor weight_grad(const at::Tensor& g2, const at::Tensor& x2, const at::Tensor& weight,
                       const c10::intrusive_ptr<MainGradSink>& sink) {
    if (!sink || !sink->grad.defined()) return at::mm(g2.t(), x2);
    add_weight_grad(sink->grad, g2, x2);
    sink->added = true;
    return at::empty_like(weight);
}

// The bias's gradient, the column sums of g2, in the bias's dtype: kernels/bias_grad.h's, else ATen's sum.
at::Tensor bias_grad_of(const at::Tensor& g2, bool kernel, c10::ScalarType dtype) {
    return kernel ? bias_grad(g2).to(dtype) : g2.sum(0);
}

c10::intrusive_ptr<MainGradSink> saved_sink(AutogradContext* ctx, const std::string& key) {
    const auto it = ctx->saved_data.find(key);
    if (it == ctx->saved_data.end()) return {};
    return c10::static_intrusive_pointer_cast<MainGradSink>(it->second.toCapsule());
}

void save_sink(AutogradContext* ctx, const std::string& key, const c10::intrusive_ptr<MainGradSink>& sink) {
    if (sink) ctx->saved_data[key] = at::IValue::make_capsule(sink);
}

struct FusedLinear : public torch::autograd::Function<FusedLinear> {
    static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                              bool bias_grad_kernel, const c10::intrusive_ptr<MainGradSink>& main_grad) {
        ctx->save_for_backward({x, weight});
        ctx->saved_data["bias_grad_kernel"] = bias_grad_kernel;
        save_sink(ctx, "main_grad", main_grad);
        return at::linear(x, weight, bias);
    }

    static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
        const auto saved = ctx->get_saved_variables();
        const auto& x = saved[0];
        const auto& weight = saved[1];
        const auto out = weight.size(0), in = weight.size(1);
        const auto g2 = grad_out[0].to(x.scalar_type()).reshape({-1, out}).contiguous();
        at::Tensor dx, dw, db;
        if (ctx->needs_input_grad(0)) dx = at::mm(g2, weight).view(x.sizes());
        if (ctx->needs_input_grad(1)) dw = weight_grad(g2, x.reshape({-1, in}), weight, saved_sink(ctx, "main_grad"));
        if (ctx->needs_input_grad(2) && g2.size(0) > 0)
            db = bias_grad_of(g2, ctx->saved_data["bias_grad_kernel"].toBool(), weight.scalar_type());
        return {dx, dw, db, at::Tensor(), at::Tensor()};
    }
};

// On a GPU, a warning, once, that cuBLASLt's GeLU epilogues did not take an MLP's operands, and why.
void warn_epilogue_refused(const std::string& why) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
        print_warning(std::string(kGeluFlag) + ": cuBLASLt's epilogues do not take the MLP's operands (" + why +
                      "): ATen's steps instead, where they do not");
}

// Whether to try cuBLASLt's GeLU epilogues on these operands (gelu_gemm.h): CUDA tensors with rows that it takes.
bool epilogue_applies(std::initializer_list<at::Tensor> operands, std::int64_t hidden) {
    const auto& first = *operands.begin();
    if (!first.is_cuda() || first.size(0) == 0) return false;
    const auto why = gelu_gemm_unsupported(operands, hidden);
    if (!why.empty()) warn_epilogue_refused(why);
    return why.empty();
}

// fc1 with its GeLU: {pre, h}, pre = x2 w1ᵀ + b1 and h = gelu_tanh(pre).
std::pair<at::Tensor, at::Tensor> mlp_hidden(const at::Tensor& x2, const at::Tensor& w1, const at::Tensor& b1) {
    const auto aten = [&] {
        auto pre = at::addmm(b1, x2, w1.t());
        auto h = at::gelu(pre, "tanh");
        return std::make_pair(pre, h);
    };
    if (!epilogue_applies({x2, w1, b1}, w1.size(0))) return aten();
    auto pre = at::empty({x2.size(0), w1.size(0)}, x2.options());  // fresh, so aligned
    auto h = at::empty_like(pre);
    if (!gemm_bias_gelu(x2, w1, b1, h, pre)) {
        warn_epilogue_refused("no cuBLASLt algorithm for the first product");
        return aten();
    }
    static std::atomic<bool> checked{false};
    if (!checked.exchange(true)) {
        const auto want = aten();
        check_against_aten(kGeluFlag, "x wᵀ + b with GeLU", {{pre, want.first}, {h, want.second}});
    }
    return {pre, h};
}

// GeLU's input's gradient from fc2's output gradient: {dpre, db1}, dpre = (g2 w2) ⊙ gelu_tanh'(pre), and db1 its
// column sums when `bias` and cuBLASLt computed them in the same product (else undefined).
std::pair<at::Tensor, at::Tensor> mlp_hidden_grad(const at::Tensor& g2, const at::Tensor& w2, const at::Tensor& pre, bool bias) {
    const auto aten = [&] { return at::gelu_backward(at::mm(g2, w2), pre, "tanh"); };
    if (!epilogue_applies({g2, w2, pre}, pre.size(1))) return {aten(), at::Tensor()};
    auto dpre = at::empty_like(pre);
    // DGELU_BGRAD until cuBLASLt has had no algorithm for it once (the shapes repeat every step), then DGELU.
    static std::atomic<bool> no_bgrad{false};
    at::Tensor db;
    bool done = false;
    if (bias && !no_bgrad.load()) {
        db = at::empty({pre.size(1)}, pre.options());
        done = gemm_dgelu(g2, w2, pre, dpre, db);
        if (!done) {
            no_bgrad.store(true);
            db = at::Tensor();
        }
    }
    if (!done) done = gemm_dgelu(g2, w2, pre, dpre);
    if (!done) {
        warn_epilogue_refused("no cuBLASLt algorithm for the input gradient's product");
        return {aten(), at::Tensor()};
    }
    static std::atomic<bool> checked{false};
    if (!checked.exchange(true)) {
        const auto want = aten();
        if (db.defined())
            check_against_aten(kGeluFlag, "g w with GeLU's derivative and its sums", {{dpre, want}, {db, want.sum(0)}});
        else
            check_against_aten(kGeluFlag, "g w with GeLU's derivative", {{dpre, want}});
    }
    return {dpre, db};
}

// The MLP fc2(gelu_tanh(fc1(x))) as one function, so that its backward can apply GeLU's derivative inside fc2's
// input-gradient product. On a GPU where cuBLASLt takes the operands (gelu_gemm.h), fc1's product, bias and GeLU
// are one product that also writes the GeLU's input, and that input's gradient (with fc1's bias gradient where
// cuBLASLt has an algorithm for both) is one product; elsewhere (the CPU, or operands cuBLASLt does not take) ATen
// computes the same steps one by one. Either way the tensors kept for the backward are those autograd keeps for the
// unfused MLP: x, the GeLU's input and its output.
struct FusedGeluMlp : public torch::autograd::Function<FusedGeluMlp> {
    static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1,
                              const at::Tensor& w2, const at::Tensor& b2, bool bias_grad_kernel,
                              const c10::intrusive_ptr<MainGradSink>& fc1_main_grad,
                              const c10::intrusive_ptr<MainGradSink>& fc2_main_grad) {
        const auto [pre, h] = mlp_hidden(x.reshape({-1, w1.size(1)}), w1, b1);
        ctx->save_for_backward({x, w1, w2, pre, h});
        ctx->saved_data["bias_grad_kernel"] = bias_grad_kernel;
        save_sink(ctx, "fc1_main_grad", fc1_main_grad);
        save_sink(ctx, "fc2_main_grad", fc2_main_grad);
        auto out_sizes = x.sizes().vec();
        out_sizes.back() = w2.size(0);
        return at::addmm(b2, h, w2.t()).view(out_sizes);
    }

    static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
        const auto saved = ctx->get_saved_variables();
        const auto &x = saved[0], &w1 = saved[1], &w2 = saved[2], &pre = saved[3], &h = saved[4];
        const auto in = w1.size(1), out = w2.size(0);
        const bool kernel = ctx->saved_data["bias_grad_kernel"].toBool();
        const auto g2 = grad_out[0].to(x.scalar_type()).reshape({-1, out}).contiguous();
        at::Tensor dx, dw1, db1, dw2, db2;
        if (ctx->needs_input_grad(3)) dw2 = weight_grad(g2, h, w2, saved_sink(ctx, "fc2_main_grad"));
        if (ctx->needs_input_grad(4) && g2.size(0) > 0) db2 = bias_grad_of(g2, kernel, w2.scalar_type());
        if (ctx->needs_input_grad(0) || ctx->needs_input_grad(1) || ctx->needs_input_grad(2)) {
            at::Tensor dpre;
            std::tie(dpre, db1) = mlp_hidden_grad(g2, w2, pre, ctx->needs_input_grad(2));
            if (ctx->needs_input_grad(0)) dx = at::mm(dpre, w1).view(x.sizes());
            if (ctx->needs_input_grad(1)) dw1 = weight_grad(dpre, x.reshape({-1, in}), w1, saved_sink(ctx, "fc1_main_grad"));
            if (ctx->needs_input_grad(2) && !db1.defined() && dpre.size(0) > 0)
                db1 = bias_grad_of(dpre, kernel, w1.scalar_type());
        }
        return {dx, dw1, db1, dw2, db2, at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

}  // namespace

std::string fused_linear_unsupported(const c10::Device& device, c10::ScalarType dtype) {
    return kernel_unsupported(device, dtype);
}

std::string gradient_accumulation_fusion_unsupported(const c10::Device& device, c10::ScalarType dtype) {
    if (dtype != at::kBFloat16) return "bf16 only (the precision mds keeps fp32 main gradients for), not " + std::string(c10::toString(dtype));
    if (auto why = kernel_unsupported(device, dtype); !why.empty()) return why;
#ifdef MDS_HAVE_CUDA_KERNELS
    if (device.is_cuda() && !find_cublas_gemm_ex()) return kNoGemmEx;
#endif
    return {};
}

at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const LinearFusions& fusions) {
    if (x.dim() < 1 || weight.dim() != 2 || bias.dim() != 1 || weight.size(1) != x.size(-1) || bias.size(0) != weight.size(0) ||
        weight.scalar_type() != x.scalar_type() || bias.scalar_type() != x.scalar_type()) {
        throw Error("fused linear: x [..., in], weight [out, in] and bias [out] of x's dtype expected, got x " +
                    c10::str(x.sizes()) + " " + c10::toString(x.scalar_type()) + ", weight " + c10::str(weight.sizes()) +
                    " " + c10::toString(weight.scalar_type()) + ", bias " + c10::str(bias.sizes()));
    }
    if (const auto why = fused_linear_unsupported(x.device(), x.scalar_type()); !why.empty()) throw Error("fused linear: " + why);
    return FusedLinear::apply(x.contiguous(), weight, bias, fusions.bias_grad, fusions.main_grad);
}

std::string gelu_epilogue_fusion_unsupported(const c10::Device& device, c10::ScalarType dtype) {
    if (auto why = kernel_unsupported(device, dtype); !why.empty()) return why;
    return device.is_cuda() ? gelu_gemm_unavailable() : std::string();
}

at::Tensor fused_gelu_mlp(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1, const at::Tensor& w2,
                          const at::Tensor& b2, const MlpFusions& fusions) {
    const auto dtype = x.scalar_type();
    if (x.dim() < 1 || w1.dim() != 2 || b1.dim() != 1 || w2.dim() != 2 || b2.dim() != 1 || w1.size(1) != x.size(-1) ||
        b1.size(0) != w1.size(0) || w2.size(1) != w1.size(0) || b2.size(0) != w2.size(0) || w1.scalar_type() != dtype ||
        b1.scalar_type() != dtype || w2.scalar_type() != dtype || b2.scalar_type() != dtype) {
        throw Error("fused GeLU MLP: x [..., in], w1 [hidden, in], b1 [hidden], w2 [out, hidden] and b2 [out] of x's dtype "
                    "expected, got x " + c10::str(x.sizes()) + " " + c10::toString(dtype) + ", w1 " + c10::str(w1.sizes()) + " " +
                    c10::toString(w1.scalar_type()) + ", b1 " + c10::str(b1.sizes()) + ", w2 " + c10::str(w2.sizes()) + " " +
                    c10::toString(w2.scalar_type()) + ", b2 " + c10::str(b2.sizes()));
    }
    if (const auto why = gelu_epilogue_fusion_unsupported(x.device(), dtype); !why.empty()) throw Error("fused GeLU MLP: " + why);
    return FusedGeluMlp::apply(x.contiguous(), w1, b1, w2, b2, fusions.bias_grad, fusions.fc1_main_grad, fusions.fc2_main_grad);
}

}  // namespace mds::model
