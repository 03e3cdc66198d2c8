// GPU test of kernels/adam.cu against its CPU reference (kernels/adam_ref.cpp): per-tensor sums of squares of the
// gradients and three AdamW steps (clipping and unscaling, both weight-decay groups, step 1000's bias corrections)
// over tensors that take the vectorized path, the one-value path (a view one element off alignment), one element,
// chunk boundaries and a 16M-element matrix, with bf16 gradients and with fp32 ones (bf16 training's fp32 main
// gradients). Prints one line per check (the sums' largest error relative to their tolerance; how many masters
// and moments differ from the reference's bits, which must be none); exit 0 when every check is within it, 1 when one is not, 77 (skipped) without a CUDA device. Run by
// tests/gpu/test_kernels_gpu.py (and the GPU pack's run.sh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "gpu_support.h"
#include "kernels/adam.h"
#include "kernels/adam_ref.h"
#include "kernels/dtype.h"

namespace {

using namespace mds::kernels;
using mds::gpu_test::cuda_ok;
using mds::gpu_test::DeviceBuffer;

// All tensors' arrays in one host buffer per kind; tensor t starts at offset[t] (offset 1 for the unaligned one).
struct Model {
    std::vector<std::int64_t> numel, offset;
    std::vector<std::uint16_t> param, grad;
    std::vector<float> grad32, master, m1, m2;
};

// Tensors whose gradient is fp32 (the rest bf16): a chunk, a chunk and one, the large matrix, the unaligned view.
bool fp32_grad(std::size_t t) { return t == 2 || t == 3 || t == 5 || t == 6; }

Model make_model(const std::vector<std::int64_t>& sizes, std::int64_t unaligned, std::mt19937_64& rng) {
    Model m;
    std::int64_t at = 0;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
        if (static_cast<std::int64_t>(t) == unaligned) at += 1;  // one element off 16-byte alignment
        m.numel.push_back(sizes[t]);
        m.offset.push_back(at);
        at += (sizes[t] + 7) / 8 * 8;
    }
    const auto n = static_cast<std::size_t>(at);
    m.param.resize(n);
    m.grad.resize(n);
    m.grad32.resize(n);
    m.master.resize(n);
    m.m1.assign(n, 0.0f);
    m.m2.assign(n, 0.0f);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::size_t i = 0; i < n; ++i) {
        m.master[i] = 0.02f * normal(rng);
        m.param[i] = float_to_bf16(m.master[i]);
    }
    return m;
}

void new_grads(Model& m, float scale, std::mt19937_64& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::size_t i = 0; i < m.grad.size(); ++i) {
        m.grad32[i] = scale * normal(rng);
        m.grad[i] = float_to_bf16(m.grad32[i]);
    }
}

std::vector<AdamTensor> tensors_of(std::uint16_t* param, const std::uint16_t* grad, const float* grad32, float* master,
                                   float* m1, float* m2, const Model& m) {
    std::vector<AdamTensor> out;
    for (std::size_t t = 0; t < m.numel.size(); ++t) {
        const auto o = static_cast<std::size_t>(m.offset[t]);
        const void* g = fp32_grad(t) ? static_cast<const void*>(grad32 + o) : static_cast<const void*>(grad + o);
        out.push_back({param + o, g, master + o, m1 + o, m2 + o, m.numel[t], static_cast<std::int32_t>(t % 2),
                       fp32_grad(t) ? 1 : 0});
    }
    return out;
}

// How many elements of a float array differ from the reference's bits, printing the first three; the kernel and
// the reference round every operation alike (kernels/adam_math.h), so any difference is a bug.
std::size_t differing(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
        if (++n <= 3) std::fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g\n", what, i, got[i], want[i]);
    }
    return n;
}

int report_equal(const std::string& name, std::size_t differ, std::size_t n) {
    std::printf("%s %s: %zu of %zu differ\n", differ == 0 ? "ok  " : "FAIL", name.c_str(), differ, n);
    return differ == 0 ? 0 : 1;
}

int report(const std::string& name, double worst) {
    const bool pass = worst <= 1.0;
    std::printf("%s %s: worst error / tolerance %.3g\n", pass ? "ok  " : "FAIL", name.c_str(), worst);
    return pass ? 0 : 1;
}

int run(std::mt19937_64& rng) {
    const std::vector<std::int64_t> sizes = {1, 7, kAdamChunk, kAdamChunk + 1, 300001, 4096 * 4096, 1000, 2304 * 768};
    Model host = make_model(sizes, /*unaligned=*/6, rng);
    const std::size_t n = host.master.size();
    DeviceBuffer d_param(n * 2), d_grad(n * 2), d_grad32(n * 4), d_master(n * 4), d_m1(n * 4), d_m2(n * 4);
    auto* dp = static_cast<std::uint16_t*>(d_param.p);
    auto* dg = static_cast<std::uint16_t*>(d_grad.p);
    auto* dg32 = static_cast<float*>(d_grad32.p);
    auto *dm = static_cast<float*>(d_master.p), *d1 = static_cast<float*>(d_m1.p), *d2 = static_cast<float*>(d_m2.p);
    bool ok = cuda_ok(cudaMemcpy(dp, host.param.data(), n * 2, cudaMemcpyHostToDevice), "copy params") &&
              cuda_ok(cudaMemcpy(dm, host.master.data(), n * 4, cudaMemcpyHostToDevice), "copy masters") &&
              cuda_ok(cudaMemcpy(d1, host.m1.data(), n * 4, cudaMemcpyHostToDevice), "copy exp_avg") &&
              cuda_ok(cudaMemcpy(d2, host.m2.data(), n * 4, cudaMemcpyHostToDevice), "copy exp_avg_sq");
    if (!ok) return 1;

    const auto host_tensors = tensors_of(host.param.data(), host.grad.data(), host.grad32.data(), host.master.data(),
                                         host.m1.data(), host.m2.data(), host);
    const auto dev_tensors = tensors_of(dp, dg, dg32, dm, d1, d2, host);
    std::vector<std::int64_t> first;
    const auto chunks = adam_chunks(host.numel, first);
    DeviceBuffer d_tensors(dev_tensors.size() * sizeof(AdamTensor)), d_chunks(chunks.size() * sizeof(AdamChunk)),
        d_first(first.size() * 8), d_chunk_sums(chunks.size() * 8), d_sumsq(sizes.size() * 8);
    ok = cuda_ok(cudaMemcpy(d_tensors.p, dev_tensors.data(), dev_tensors.size() * sizeof(AdamTensor), cudaMemcpyHostToDevice),
                 "copy tensors") &&
         cuda_ok(cudaMemcpy(d_chunks.p, chunks.data(), chunks.size() * sizeof(AdamChunk), cudaMemcpyHostToDevice), "copy chunks") &&
         cuda_ok(cudaMemcpy(d_first.p, first.data(), first.size() * 8, cudaMemcpyHostToDevice), "copy first");
    if (!ok) return 1;

    struct Step {
        std::int64_t number;
        float grad_scale, clip, grad_std;
    };
    // Step 2's gradients carry a loss scale of 1024 that grad_scale removes; step 1000's bias corrections are ~1.
    const std::vector<Step> steps = {{1, 1.0f, 0.5f, 0.01f}, {2, 1.0f / 1024, 1.0f, 10.0f}, {1000, 1.0f, 0.25f, 0.003f}};
    int failed = 0;
    for (const auto& st : steps) {
        new_grads(host, st.grad_std, rng);
        if (!cuda_ok(cudaMemcpy(dg, host.grad.data(), n * 2, cudaMemcpyHostToDevice), "copy grads") ||
            !cuda_ok(cudaMemcpy(dg32, host.grad32.data(), n * 4, cudaMemcpyHostToDevice), "copy fp32 grads"))
            return 1;
        const std::string at = "step " + std::to_string(st.number);

        adam_grad_sumsq_cuda(static_cast<const AdamTensor*>(d_tensors.p), static_cast<std::int64_t>(sizes.size()),
                             static_cast<const AdamChunk*>(d_chunks.p), static_cast<std::int64_t>(chunks.size()),
                             static_cast<const std::int64_t*>(d_first.p), st.grad_scale, static_cast<double*>(d_chunk_sums.p),
                             static_cast<double*>(d_sumsq.p), nullptr);
        std::vector<double> sumsq(sizes.size());
        if (!cuda_ok(cudaMemcpy(sumsq.data(), d_sumsq.p, sumsq.size() * 8, cudaMemcpyDeviceToHost), "sum of squares"))
            return 1;
        // Each chunk's squares are summed in another order on the device: exact for bf16 values (16-bit products
        // in a double), within the order's rounding for fp32 ones (a chunk of 32768 terms: at most 32768 · 2^-53
        // ≈ 3.6e-12 relative; 1.5e-12 seen on the 16M matrix).
        double worst = 0;
        for (std::size_t t = 0; t < sizes.size(); ++t) {
            const double want = adam_grad_sumsq_ref(host_tensors[t], st.grad_scale, 0, sizes[t]);
            const double rel = fp32_grad(t) ? 1e-11 : 1e-12;
            const double ratio = std::fabs(sumsq[t] - want) / (rel * want + 1e-300);
            if (ratio > 1) std::fprintf(stderr, "  tensor %zu: sum of squares %.17g, want %.17g\n", t, sumsq[t], want);
            worst = std::max(worst, ratio);
        }
        failed += report(at + ", gradients' sums of squares (1e-12 relative, 1e-11 for fp32)", worst);

        AdamHyper h;
        h.grad_scale = st.grad_scale;
        h.clip = st.clip;
        h.lr = 6e-4;
        h.beta1 = 0.9;
        h.beta2 = 0.95;
        h.eps = 1e-8;
        h.weight_decay[0] = 0.1;
        h.step = st.number;
        adam_step_cuda(static_cast<const AdamTensor*>(d_tensors.p), static_cast<const AdamChunk*>(d_chunks.p),
                       static_cast<std::int64_t>(chunks.size()), h, nullptr);
        const auto s = adam_scalars(h);
        for (std::size_t t = 0; t < sizes.size(); ++t) adam_step_ref(host_tensors[t], s, 0, sizes[t]);
        std::vector<std::uint16_t> param(n);
        std::vector<float> master(n), m1(n), m2(n);
        ok = cuda_ok(cudaDeviceSynchronize(), "adam step") &&
             cuda_ok(cudaMemcpy(param.data(), dp, n * 2, cudaMemcpyDeviceToHost), "copy params") &&
             cuda_ok(cudaMemcpy(master.data(), dm, n * 4, cudaMemcpyDeviceToHost), "copy masters") &&
             cuda_ok(cudaMemcpy(m1.data(), d1, n * 4, cudaMemcpyDeviceToHost), "copy exp_avg") &&
             cuda_ok(cudaMemcpy(m2.data(), d2, n * 4, cudaMemcpyDeviceToHost), "copy exp_avg_sq");
        if (!ok) return 1;
        // The same bits: each double product and sum rounded on its own on both sides (no fused multiply-adds),
        // fp32 division and square root correctly rounded on both.
        failed += report_equal(at + ", masters (bit-equal)", differing(master, host.master, "master"), n);
        failed += report_equal(at + ", exp_avg (bit-equal)", differing(m1, host.m1, "exp_avg"), n);
        failed += report_equal(at + ", exp_avg_sq (bit-equal)", differing(m2, host.m2, "exp_avg_sq"), n);
        std::size_t not_rounded = 0, differ = 0, masters_differ = 0;
        for (std::size_t i = 0; i < n; ++i) {
            not_rounded += param[i] != float_to_bf16(master[i]) ? 1 : 0;
            differ += param[i] != host.param[i] ? 1 : 0;
            masters_differ += master[i] != host.master[i] ? 1 : 0;
        }
        // The model's weights are the masters rounded to nearest even; they differ from the reference's only
        // where the masters do.
        std::printf("%s %s, bf16 weights: %zu not the masters rounded, %zu of %zu differ from the reference "
                    "(%zu masters differ)\n",
                    not_rounded == 0 && differ <= masters_differ ? "ok  " : "FAIL", at.c_str(), not_rounded, differ, n,
                    masters_differ);
        failed += not_rounded == 0 && differ <= masters_differ ? 0 : 1;
    }
    return failed;
}

}  // namespace

int main() {
    if (!mds::gpu_test::have_device("adam_gpu")) return 77;
    std::mt19937_64 rng(99);
    int failed = 0;
    try {
        failed = run(rng);
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    std::printf("adam_gpu: %d failed\n", failed);
    return failed == 0 ? 0 : 1;
}
