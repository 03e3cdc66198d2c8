#include "mds/data/blending.h"

#include <algorithm>
#include <cmath>  // std::ceil

#include "mds/data/gpt_dataset_index.h"  // python_float
#include "mds/util/error.h"

namespace mds::data {

DataPath parse_data_path(const std::vector<std::string>& args) {
    DataPath dp;
    if (args.empty()) throw UsageError("--data-path needs a dataset prefix, or weight/prefix pairs");
    if (args.size() == 1) {
        dp.prefixes = args;
        dp.weights = {1.0};
        return dp;
    }
    if (args.size() % 2 != 0)
        throw UsageError("--data-path with several datasets takes weight/prefix pairs (W1 P1 W2 P2 ...); got " +
                         std::to_string(args.size()) + " values");
    dp.blended = true;
    double sum = 0.0;
    for (std::size_t i = 0; i < args.size(); i += 2) {
        double w = 0;
        try {
            w = python_float(args[i], "--data-path weight");
        } catch (const Error& e) {
            throw UsageError(std::string(e.what()) + " (expected W1 P1 W2 P2 ...)");
        }
        // BS accepts any float; a negative weight only produces nonsense sample counts, so refuse it.
        if (w < 0) throw UsageError("--data-path weight " + args[i] + " is negative");
        std::string prefix = args[i + 1];
        const char* ws = " \t\n\r\f\v";
        prefix.erase(0, prefix.find_first_not_of(ws));
        prefix.erase(prefix.find_last_not_of(ws) + 1);
        if (prefix.empty()) throw UsageError("--data-path: empty prefix after weight " + args[i]);
        dp.weights.push_back(w);
        dp.prefixes.push_back(prefix);
        sum += w;  // Python: weight_sum += weight, left to right
    }
    if (!(sum > 0.0)) throw UsageError("--data-path weights must add up to more than 0");
    for (double& w : dp.weights) w /= sum;
    return dp;
}

std::vector<std::array<std::int64_t, 3>> blended_num_samples(std::span<const double> weights,
                                                             const std::array<std::int64_t, 3>& num_samples) {
    std::vector<std::array<std::int64_t, 3>> out;
    for (double w : weights) {
        std::array<std::int64_t, 3> n{};
        for (std::size_t k = 0; k < 3; ++k)
            n[k] = static_cast<std::int64_t>(std::ceil(static_cast<double>(num_samples[k]) * w * 1.005));
        out.push_back(n);
    }
    return out;
}

double numpy_sum(std::span<const double> a) {
    // numpy/_core/src/umath/loops_utils.h.src pairwise_sum (checked against np.sum for n < 300).
    const std::size_t n = a.size();
    if (n < 8) {
        double res = -0.0;
        for (double x : a) res += x;
        return res;
    }
    if (n <= 128) {
        double r[8];
        std::copy_n(a.begin(), 8, r);
        std::size_t i = 8;
        for (; i < n - n % 8; i += 8)
            for (std::size_t j = 0; j < 8; ++j) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i) res += a[i];
        return res;
    }
    std::size_t n2 = n / 2;
    n2 -= n2 % 8;
    return numpy_sum(a.first(n2)) + numpy_sum(a.subspan(n2));
}

std::vector<double> normalize_blend_weights(std::span<const double> weights) {
    const double sum = numpy_sum(weights);
    if (!(sum > 0.0)) throw Error("blend weights must add up to more than 0");
    std::vector<double> out(weights.begin(), weights.end());
    for (double& w : out) w /= sum;
    return out;
}

BlendingIndices build_blending_indices(std::span<const double> weights, std::int64_t size) {
    // BlendableDataset asserts num_datasets < 255 (dataset_index is uint8).
    if (weights.empty() || weights.size() >= 255)
        throw Error("blending needs between 1 and 254 datasets, got " + std::to_string(weights.size()));
    BlendingIndices b;
    const auto n = static_cast<std::size_t>(std::max<std::int64_t>(size, 0));
    b.dataset_index.resize(n);
    b.dataset_sample_index.resize(n);
    std::vector<std::int64_t> current(weights.size(), 0);
    for (std::size_t s = 0; s < n; ++s) {
        const double x = std::max(static_cast<double>(s), 1.0);
        std::size_t best = 0;
        double best_error = weights[0] * x - static_cast<double>(current[0]);
        for (std::size_t i = 1; i < weights.size(); ++i) {
            const double error = weights[i] * x - static_cast<double>(current[i]);
            if (error > best_error) {
                best_error = error;
                best = i;
            }
        }
        b.dataset_index[s] = static_cast<std::uint8_t>(best);
        b.dataset_sample_index[s] = current[best]++;
    }
    return b;
}

}  // namespace mds::data
