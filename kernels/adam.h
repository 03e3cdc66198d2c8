// AdamW's step of a bf16 model with fp32 master weights, one pass over each element (as llm.c's AdamW
// kernel): it reads the gradient (bf16, or fp32 main gradients), the fp32 master weight and both moments, and writes the
// master, the moments and the model's bf16 weight (rounded to nearest even). Unfused, the same step is an
// fp32 copy of every gradient, its norm, torch's fused AdamW over the fp32 tensors and a copy of every
// master back into the model: about twice the memory traffic and four launches per tensor.
//
// Per element, with g the gradient as fp32 (adam_math.h has the arithmetic, shared with the reference):
//   g  = (g · grad_scale) · clip                  (fp32: the unscaling, then the clipping factor)
//   p -= lr · wd · p                              (decoupled weight decay; wd by the tensor's group)
//   m  = β1 · m + (1 - β1) · g;   v = β2 · v + (1 - β2) · g²
//   p -= lr / (1 - β1ᵗ) · m / (sqrt(v) / sqrt(1 - β2ᵗ) + ε)
// as torch's _fused_adamw_ computes it (double scalars, fp32 values). The global gradient norm that decides
// `clip` comes first, from adam_grad_sumsq: per tensor, Σ (g · grad_scale)² in fp64.
//
// Many tensors at once: the caller lays out an AdamTensor per parameter and cuts them into chunks
// (adam_chunks); the CUDA launchers take both tables in device memory and run one block per chunk.
// adam_ref.h is the CPU reference the tests compare with; libcore's trainer/fused_adam.cpp drives both
// (mds-train --adam-step-fusion).
#pragma once

#include <cstdint>
#include <vector>

namespace mds::kernels {

struct AdamTensor {
    std::uint16_t* param = nullptr;  // the model's weights, bf16 bits (written)
    const void* grad = nullptr;      // the gradient: bf16 bits (the model's .grad), or fp32 where grad_fp32
    float* master = nullptr;         // fp32 master weights (read, written)
    float* exp_avg = nullptr;        // Adam's first moment (read, written)
    float* exp_avg_sq = nullptr;     // Adam's second moment (read, written)
    std::int64_t numel = 0;
    std::int32_t group = 0;      // which of AdamHyper::weight_decay applies: 0 or 1
    std::int32_t grad_fp32 = 0;  // 1: `grad` is fp32 (the micro batches' sum in fp32, libcore's trainer/main_grads.h)
};

// Elements [begin, begin + length) of tensor `tensor`.
struct AdamChunk {
    std::int32_t tensor = 0;
    std::int32_t length = 0;
    std::int64_t begin = 0;
};

struct AdamHyper {
    float grad_scale = 1.0f;  // 1 / loss scale
    float clip = 1.0f;        // the clipping factor (1: none)
    double lr = 0.0;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    double weight_decay[2] = {0.0, 0.0};  // by AdamTensor::group
    std::int64_t step = 1;                // this step's number, from 1: the bias corrections
};

// Elements per chunk (one CUDA block's work).
constexpr std::int64_t kAdamChunk = 32768;

// The chunks of tensors of these sizes, tensor by tensor; `first` gets, per tensor, the index of its first
// chunk, and one more entry, the total (n + 1 values). A tensor of no elements has no chunk. Throws
// std::invalid_argument for a negative size or more than 2^31 tensors or chunks.
std::vector<AdamChunk> adam_chunks(const std::vector<std::int64_t>& numels, std::vector<std::int64_t>& first);

// Throws std::invalid_argument naming what is out of range: β outside [0, 1), ε or lr or a weight decay
// negative or not finite, step < 1, a scale not finite.
void check_hyper(const AdamHyper& h);

// CUDA launchers (adam.cu; built where the CUDA compiler is). `tensors`, `chunks`, `first`, `chunk_sums` and
// `sumsq` are device pointers; `stream` a cudaStream_t (nullptr: the legacy default stream). They throw
// std::runtime_error with CUDA's message when a launch fails.
//
// sumsq[t] = Σ over tensor t of (double)(float(grad) · grad_scale)², in a fixed order (deterministic);
// chunk_sums is scratch of n_chunks doubles.
void adam_grad_sumsq_cuda(const AdamTensor* tensors, std::int64_t n_tensors, const AdamChunk* chunks,
                          std::int64_t n_chunks, const std::int64_t* first, float grad_scale, double* chunk_sums,
                          double* sumsq, void* stream);
void adam_step_cuda(const AdamTensor* tensors, const AdamChunk* chunks, std::int64_t n_chunks, const AdamHyper& h,
                    void* stream);

}  // namespace mds::kernels
