// mds-ckpt-diff: two models on disk (DeepSpeed checkpoints at any TP / PP / DP, or Hugging Face
// GPT2 / BLOOM folders; MergedTensors) compared tensor by tensor after merging: largest absolute and
// relative difference, elements outside the tolerance, norms; tensors on one side only; shape and
// dtype mismatches; with `optimizer`, the BF16 optimizer states per parameter and the step. Inside
// each checkpoint, the tied word embedding's copies on the first and last pipeline stage are checked
// against each other (the BLOOM restart bug, specs/checkpoints.md §9). One merged tensor per side is
// held at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mds::ckpt {

struct DiffOptions {
    double atol = 0, rtol = 0;  // equal when |a - b| <= atol + rtol * |b| elementwise (numpy.allclose's rule)
    bool optimizer = false;     // also the optimizer states (fp32 master, exp_avg, exp_avg_sq) and the step
    bool verify = true;         // CRC-32 checks of what is read
    // After each tensor pair: (pairs done, pairs in all).
    std::function<void(std::size_t, std::size_t)> progress;
};

// One compared pair (or a tied pair inside one checkpoint).
struct TensorDiff {
    std::string name;
    std::vector<std::int64_t> shape_a, shape_b;
    std::string dtype_a, dtype_b;
    bool compared = false;              // false: the shapes differ, no values were compared
    double max_abs = 0;                 // max |a - b| (inf for a NaN against a number)
    double max_rel = 0;                 // max |a - b| / |b|; inf where b is 0 and a is not
    std::uint64_t differing = 0, numel = 0;  // elements outside the tolerance, elements compared
    double diff_norm = 0, norm_a = 0;   // ||a - b||_2, ||a||_2
    std::string note;                   // e.g. which rows were compared when the vocabulary padding differs
    bool differs() const { return !compared || dtype_a != dtype_b || differing > 0; }
};

struct OneSidedTensor {
    std::string name, dtype;
    std::vector<std::int64_t> shape;
};

struct TiedDiff {
    std::string side;                   // "A" or "B"
    std::string first_where, last_where;
    TensorDiff diff;
};

struct DiffReport {
    std::string a, b;                   // the folders compared (tag folders for checkpoints)
    std::string kind_a, kind_b;         // "deepspeed" / "huggingface"
    double atol = 0, rtol = 0;
    std::size_t compared = 0;           // pairs present on both sides
    std::vector<TensorDiff> differing;  // the pairs that differ, largest relative difference first
    std::vector<OneSidedTensor> only_a, only_b;
    std::size_t tied_checked = 0;
    std::vector<TiedDiff> tied;         // tied copies that differ
    std::vector<std::string> notes;
    bool equal() const { return differing.empty() && only_a.empty() && only_b.empty() && tied.empty(); }
};

// Compares `a` and `b` (each a checkpoint root with `latest`, a global_step folder, or a Hugging
// Face folder). Throws mds::Error naming the file and what was expected when either cannot be read
// (mds::UsageError for --optimizer with a Hugging Face folder).
DiffReport diff_models(const std::string& a, const std::string& b, const DiffOptions& options);

// For people: one line per differing tensor (the first `top`; 0: all), the one-sided tensors, the
// tied copies that differ, and the summary line "N tensors compared, K differ, M only in A, L only in B".
std::string describe_diff(const DiffReport& report, std::size_t top);
// One JSON object with the same content (infinite relative differences as null).
std::string diff_report_json(const DiffReport& report, std::size_t top);

}  // namespace mds::ckpt
