#include "mds/data/gpt_dataset_index.h"

#include <charconv>  // std::from_chars: locale-independent, like Python float()
#include <cmath>     // std::nearbyint: ties to even in the default rounding mode, as Python round()
#include <limits>

#include "mds/util/error.h"
#include "mds/util/files.h"  // AtomicOutput, file_exists

namespace mds::data {

namespace {

// Python's a // b for b > 0.
std::int64_t floor_div(std::int64_t a, std::int64_t b) {
    std::int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

}  // namespace

double python_float(std::string_view s, std::string_view what) {
    auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    bool neg = false;
    std::string_view digits = s;
    if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) {
        neg = digits.front() == '-';
        digits.remove_prefix(1);
    }
    double v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || !std::isfinite(v))
        throw Error(std::string(what) + ": '" + std::string(s) + "' is not a finite number");
    return neg ? -v : v;
}

// ---- §4.2 ------------------------------------------------------------------------------------

std::array<double, 3> parse_split(std::string_view splits_string) {
    const std::string what = "--split '" + std::string(splits_string) + "'";
    std::vector<double> parts;
    char sep = splits_string.find(',') != std::string_view::npos   ? ','
               : splits_string.find('/') != std::string_view::npos ? '/'
                                                                   : '\0';
    try {
        if (sep == '\0') {
            parts.push_back(python_float(splits_string, what));
        } else {
            std::size_t start = 0;
            while (true) {
                std::size_t k = splits_string.find(sep, start);
                parts.push_back(python_float(splits_string.substr(start, k - start), what));
                if (k == std::string_view::npos) break;
                start = k + 1;
            }
        }
    } catch (const UsageError&) {
        throw;
    } catch (const Error& e) {
        throw UsageError(e.what());
    }
    while (parts.size() < 3) parts.push_back(0.0);
    parts.resize(3);
    // Megatron asserts only that the sum is positive: a negative part makes the splits overlap
    // ("100,-50,50" gives test documents that are also training documents).
    for (std::size_t k = 0; k < 3; ++k)
        if (parts[k] < 0)
            throw UsageError(what + ": the " + kSplitNames[k] + " proportion is negative; each must be 0 or more");
    double total = 0.0;  // Python sum(): left to right
    for (double p : parts) total += p;
    if (!(total > 0.0)) throw UsageError(what + ": the proportions must add up to more than 0");
    if (!std::isfinite(total)) throw UsageError(what + ": the proportions add up to more than a double holds");
    return {parts[0], parts[1], parts[2]};
}

std::array<std::int64_t, 4> get_train_valid_test_split(std::string_view splits_string, std::int64_t size) {
    const auto parts = parse_split(splits_string);
    double total = 0.0;
    for (double p : parts) total += p;
    std::array<std::int64_t, 4> idx{0, 0, 0, 0};
    for (std::size_t k = 0; k < 3; ++k) {
        double x = std::nearbyint(parts[k] / total * static_cast<double>(size));
        idx[k + 1] = idx[k] + static_cast<std::int64_t>(x);
    }
    std::int64_t diff = idx[3] - size;
    for (std::size_t k = 1; k < 4; ++k) idx[k] -= diff;
    return idx;
}

// ---- §4.1 ------------------------------------------------------------------------------------

std::int64_t train_iters_from_samples(const NumSamplesOptions& opt) {
    const std::int64_t samples = opt.train_samples.value_or(0), gbs = opt.global_batch_size;
    if (!opt.rampup_batch_size) return samples / gbs;
    // Ramp-up: count the iterations of the ramp exactly as BS training.py update_train_iters does,
    // with RampupBatchsizeNumMicroBatches.update deciding the batch size of each.
    const auto [start, increment, ramp_samples] = *opt.rampup_batch_size;
    const std::int64_t diff = gbs - start;
    if (start <= 0 || increment <= 0 || ramp_samples < 0 || diff < 0 || diff % increment != 0)
        throw UsageError("--rampup-batch-size " + std::to_string(start) + " " + std::to_string(increment) + " " +
                         std::to_string(ramp_samples) + ": needs START > 0, INCREMENT > 0, SAMPLES >= 0 and "
                         "--global-batch-size - START a non-negative multiple of INCREMENT");
    const std::int64_t increments = diff / increment;
    if (increments == 0)
        throw UsageError("--rampup-batch-size START equals --global-batch-size: Megatron divides by zero increments");
    const double samples_per_increment = static_cast<double>(ramp_samples) / static_cast<double>(increments);
    std::int64_t iterations = 0, consumed = 0;
    while (consumed <= ramp_samples) {
        auto steps = static_cast<std::int64_t>(static_cast<double>(consumed) / samples_per_increment);
        consumed += start + steps * increment;
        ++iterations;
    }
    return iterations + floor_div(samples - consumed, gbs);
}

std::array<std::int64_t, 3> train_valid_test_num_samples(const NumSamplesOptions& opt) {
    if (opt.global_batch_size <= 0) throw UsageError("--global-batch-size must be positive");
    if (opt.train_samples.has_value() == opt.train_iters.has_value())
        throw UsageError("give exactly one of --train-samples and --train-iters");
    if (opt.train_iters && opt.rampup_batch_size)
        throw UsageError("--rampup-batch-size needs --train-samples (Megatron: no ramp-up for iteration-based training)");
    if ((opt.train_samples && *opt.train_samples <= 0) || (opt.train_iters && *opt.train_iters <= 0))
        throw UsageError("--train-samples / --train-iters must be positive");
    if (opt.eval_interval <= 0 || opt.eval_iters < 0)
        throw UsageError("--eval-interval must be positive and --eval-iters non-negative");
    const std::int64_t gbs = opt.global_batch_size;
    const std::int64_t train_iters = opt.train_iters ? *opt.train_iters : train_iters_from_samples(opt);
    const std::int64_t train = opt.train_samples ? *opt.train_samples : train_iters * gbs;
    const std::int64_t eval_iters = (floor_div(train_iters, opt.eval_interval) + 1) * opt.eval_iters;
    return {train, eval_iters * gbs, opt.eval_iters * gbs};
}

// ---- §4.3 ------------------------------------------------------------------------------------

std::int64_t IndexPlan::total_samples() const {
    return (static_cast<std::int64_t>(num_epochs) * tokens_per_epoch - 1) / seq_length;
}

NpyDType IndexPlan::shuffle_dtype() const {
    return total_samples() >= static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max()) - 1 ? NpyDType::Int64
                                                                                                      : NpyDType::UInt32;
}

std::int32_t gpt_num_epochs(std::int64_t tokens_per_epoch, std::int32_t seq_length, std::int64_t num_samples) {
    // The loop of BS _num_epochs stops at the smallest E with E*T - 1 >= num_samples*S, that is
    // E = ceil((num_samples*S + 1) / T) = num_samples*S // T + 1.
    if (tokens_per_epoch <= 0 || seq_length <= 0) throw Error("gpt_num_epochs: tokens per epoch and seq_length must be positive");
    if (num_samples < 0) return 1;
    if (num_samples > (std::numeric_limits<std::int64_t>::max() - 1) / seq_length)
        throw Error(std::to_string(num_samples) + " samples of " + std::to_string(seq_length) + " tokens overflow int64");
    const std::int64_t e = num_samples * seq_length / tokens_per_epoch + 1;
    if (e > std::numeric_limits<std::int32_t>::max())
        throw Error(std::to_string(num_samples) + " samples need more than 2^31 epochs of " +
                    std::to_string(tokens_per_epoch) + " tokens");
    return static_cast<std::int32_t>(e);
}

IndexPlan plan_index_mappings(std::span<const std::int32_t> sizes, std::int64_t doc_begin, std::int64_t doc_end,
                              std::int64_t num_samples, std::int32_t seq_length, const std::string& what,
                              double cutoff_last_epoch) {
    if (doc_begin < 0 || doc_end <= doc_begin || static_cast<std::uint64_t>(doc_end) > sizes.size())
        throw Error(what + ": document range [" + std::to_string(doc_begin) + ", " + std::to_string(doc_end) +
                    ") is not inside the " + std::to_string(sizes.size()) + " sequences of the dataset");
    if (doc_end > std::numeric_limits<std::int32_t>::max())
        throw Error(what + ": more than 2^31 documents; Megatron stores document ids as int32");
    // helpers.cpp asserts seq_length > 1 and tokens_per_epoch > 1 (built without NDEBUG).
    if (seq_length <= 1) throw Error(what + ": --seq-length must be greater than 1");
    if (num_samples < 0) throw Error(what + ": negative number of samples");
    IndexPlan p;
    p.doc_begin = doc_begin;
    p.doc_end = doc_end;
    p.num_samples = num_samples;
    p.seq_length = seq_length;
    for (std::int64_t d = doc_begin; d < doc_end; ++d) p.tokens_per_epoch += sizes[static_cast<std::size_t>(d)];
    if (p.tokens_per_epoch <= 1)
        throw Error(what + ": documents [" + std::to_string(doc_begin) + ", " + std::to_string(doc_end) + ") hold " +
                    std::to_string(p.tokens_per_epoch) + " tokens; Megatron needs at least 2 (with 0 its _num_epochs "
                    "loop never ends)");
    p.num_epochs = gpt_num_epochs(p.tokens_per_epoch, seq_length, num_samples);
    if (p.num_epochs > 1) {
        const std::int64_t t = p.tokens_per_epoch;
        p.samples_from_epochs_minus_one = (static_cast<std::int64_t>(p.num_epochs - 1) * t - 1) / seq_length;
        p.last_epoch_num_samples = num_samples - p.samples_from_epochs_minus_one;
        p.samples_per_epoch = (t - 1) / seq_length;
        // The BS assertion `last_epoch_num_samples <= num_samples_per_epoch`: the last epoch can
        // need one sample more than a lone epoch holds, because the epochs share boundary tokens
        // (megatron-core relaxed it to `<= per + 1`). BS stops here, so do we (specs/data.md §4.3).
        if (p.last_epoch_num_samples > p.samples_per_epoch)
            throw Error(what + ": Megatron-DeepSpeed cannot build this index: " + std::to_string(num_samples) +
                        " samples of " + std::to_string(seq_length) + " tokens need " + std::to_string(p.num_epochs) +
                        " epochs of " + std::to_string(t) + " tokens, and the last epoch would have to provide " +
                        std::to_string(p.last_epoch_num_samples) + " samples while an epoch holds only " +
                        std::to_string(p.samples_per_epoch) +
                        " (BS gpt_dataset.py fails with AssertionError 'last epoch number of samples exceeded max "
                        "value'); change the number of samples (--train-samples/--train-iters/--eval-iters), "
                        "--seq-length or --split");
        p.separate_last_epoch =
            p.last_epoch_num_samples < static_cast<std::int64_t>(cutoff_last_epoch * static_cast<double>(p.samples_per_epoch));
    }
    return p;
}

std::vector<std::int32_t> build_doc_idx(std::int64_t doc_begin, std::int64_t doc_end, std::int32_t num_epochs,
                                        NumpyRandomState& rng, bool separate_last_epoch) {
    const auto n = static_cast<std::size_t>(doc_end - doc_begin);
    std::vector<std::int32_t> d(n * static_cast<std::size_t>(num_epochs));
    for (std::size_t k = 0; k < d.size(); ++k) d[k] = static_cast<std::int32_t>(doc_begin + static_cast<std::int64_t>(k % n));
    if (!separate_last_epoch || num_epochs == 1) {
        rng.shuffle(d);
    } else {
        // _build_doc_idx(E-1 epochs) then _build_doc_idx(1 epoch), each shuffled on its own.
        std::span<std::int32_t> all(d);
        rng.shuffle(all.first(d.size() - n));
        rng.shuffle(all.last(n));
    }
    return d;
}

std::vector<std::int32_t> build_sample_idx(std::span<const std::int32_t> sizes, std::span<const std::int32_t> doc_idx,
                                           std::int32_t seq_length, std::int32_t num_epochs,
                                           std::int64_t tokens_per_epoch, bool* truncated) {
    // Same integer types as BS helpers.cpp: int64 counters, int32 offsets and remaining length.
    const std::int64_t num_samples = (num_epochs * tokens_per_epoch - 1) / seq_length;
    std::vector<std::int32_t> sample_idx(2 * static_cast<std::size_t>(num_samples + 1));
    std::int64_t doc_idx_index = 0;
    std::int32_t doc_offset = 0;
    bool wrapped = false;
    sample_idx[0] = 0;
    sample_idx[1] = 0;
    for (std::int64_t sample_index = 1; sample_index <= num_samples; ++sample_index) {
        std::int32_t remaining = seq_length + 1;
        while (remaining != 0) {
            if (static_cast<std::uint64_t>(doc_idx_index) >= doc_idx.size())
                throw Error("build_sample_idx: ran past the end of doc_idx at sample " + std::to_string(sample_index) +
                            " (tokens_per_epoch does not match the sizes?)");
            const std::int32_t doc_id = doc_idx[static_cast<std::size_t>(doc_idx_index)];
            const std::int32_t doc_length = sizes[static_cast<std::size_t>(doc_id)] - doc_offset;
            remaining -= doc_length;
            if (remaining <= 0) {
                doc_offset += remaining + doc_length - 1;
                remaining = 0;
            } else {
                ++doc_idx_index;
                doc_offset = 0;
            }
        }
        // BS stores the int64 index into an int32 array: it wraps beyond 2^31 - 1.
        if (doc_idx_index > std::numeric_limits<std::int32_t>::max()) wrapped = true;
        sample_idx[2 * static_cast<std::size_t>(sample_index)] = static_cast<std::int32_t>(doc_idx_index);
        sample_idx[2 * static_cast<std::size_t>(sample_index) + 1] = doc_offset;
    }
    if (truncated) *truncated = wrapped;
    return sample_idx;
}

std::vector<std::int64_t> build_shuffle_idx(std::uint64_t n, std::uint64_t total, NumpyRandomState& rng) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(total));
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<std::int64_t>(k);
    std::span<std::int64_t> all(v);
    rng.shuffle(all.first(static_cast<std::size_t>(n)));
    if (n != total) rng.shuffle(all.subspan(static_cast<std::size_t>(n)));
    return v;
}

IndexMappings build_index_mappings(std::span<const std::int32_t> sizes, const IndexPlan& plan, std::uint32_t seed) {
    IndexMappings m;
    m.plan = plan;
    NumpyRandomState rng(seed);  // one generator: doc_idx shuffles first, then shuffle_idx
    m.doc_idx = build_doc_idx(plan.doc_begin, plan.doc_end, plan.num_epochs, rng, plan.separate_last_epoch);
    m.sample_idx = build_sample_idx(sizes, m.doc_idx, plan.seq_length, plan.num_epochs, plan.tokens_per_epoch,
                                    &m.sample_idx_truncated);
    const auto total = static_cast<std::uint64_t>(m.sample_idx.size() / 2 - 1);
    const auto first = plan.separate_last_epoch ? static_cast<std::uint64_t>(plan.samples_from_epochs_minus_one) : total;
    m.shuffle_idx = build_shuffle_idx(first, total, rng);
    return m;
}

// ---- §4.5 ------------------------------------------------------------------------------------

SampleIndexView view_of(const IndexMappings& m, std::vector<std::uint32_t>& shuffle_storage) {
    SampleIndexView v;
    auto bytes = [](const auto& vec) { return reinterpret_cast<const std::byte*>(vec.data()); };
    v.doc_idx = UnalignedArray<std::int32_t>(bytes(m.doc_idx), m.doc_idx.size());
    v.sample_idx = UnalignedArray<std::int32_t>(bytes(m.sample_idx), m.sample_idx.size());
    v.shuffle_wide = m.plan.shuffle_dtype() == NpyDType::Int64;
    if (v.shuffle_wide) {
        v.shuffle_i64 = UnalignedArray<std::int64_t>(bytes(m.shuffle_idx), m.shuffle_idx.size());
    } else {
        shuffle_storage.assign(m.shuffle_idx.begin(), m.shuffle_idx.end());
        v.shuffle_u32 = UnalignedArray<std::uint32_t>(bytes(shuffle_storage), shuffle_storage.size());
    }
    return v;
}

SequenceReader sequence_reader(const IndexedDataset& ds) {
    return [&ds](std::size_t seq, std::size_t offset, std::int64_t length, std::vector<std::int64_t>& out) {
        ds.append(seq, out, offset, length);
    };
}

std::vector<std::int64_t> read_gpt_sample(const SampleIndexView& view, std::size_t i, const SequenceReader& read) {
    if (i >= view.shuffle_size())
        throw Error("sample " + std::to_string(i) + " is out of range: the dataset has " +
                    std::to_string(view.shuffle_size()) + " samples");
    const std::int64_t j = view.shuffle(i);
    if (j < 0 || static_cast<std::size_t>(j) >= view.size())
        throw Error("shuffle_idx[" + std::to_string(i) + "] = " + std::to_string(j) + " is not a sample index");
    const auto row = static_cast<std::size_t>(j);
    const std::int32_t f = view.sample_idx[2 * row], off_f = view.sample_idx[2 * row + 1];
    const std::int32_t l = view.sample_idx[2 * row + 2], off_l = view.sample_idx[2 * row + 3];
    auto doc = [&](std::int32_t k) -> std::size_t {
        if (k < 0 || static_cast<std::size_t>(k) >= view.doc_idx.size())
            throw Error("sample_idx row " + std::to_string(row) + " points at doc_idx[" + std::to_string(k) +
                        "], outside its " + std::to_string(view.doc_idx.size()) + " entries");
        return static_cast<std::size_t>(view.doc_idx[static_cast<std::size_t>(k)]);
    };
    if (off_f < 0 || off_l < 0 || l < f || (f == l && off_l < off_f))
        throw Error("sample_idx rows " + std::to_string(row) + " and " + std::to_string(row + 1) + " are not increasing");
    std::vector<std::int64_t> out;
    if (f == l) {
        read(doc(f), static_cast<std::size_t>(off_f), off_l - off_f + 1, out);
    } else {
        read(doc(f), static_cast<std::size_t>(off_f), -1, out);  // rest of the first sequence
        for (std::int32_t k = f + 1; k < l; ++k) read(doc(k), 0, -1, out);
        read(doc(l), 0, static_cast<std::int64_t>(off_l) + 1, out);
    }
    return out;
}

GptSampleSource gpt_sample_source(const SampleIndexView& view, std::size_t i, std::span<const std::int32_t> sizes) {
    if (i >= view.shuffle_size())
        throw Error("sample " + std::to_string(i) + " is out of range: the dataset has " +
                    std::to_string(view.shuffle_size()) + " samples");
    GptSampleSource src;
    src.shuffled = view.shuffle(i);
    if (src.shuffled < 0 || static_cast<std::size_t>(src.shuffled) >= view.size())
        throw Error("shuffle_idx[" + std::to_string(i) + "] = " + std::to_string(src.shuffled) + " is not a sample index");
    const auto row = static_cast<std::size_t>(src.shuffled);
    const std::int32_t f = view.sample_idx[2 * row], off_f = view.sample_idx[2 * row + 1];
    const std::int32_t l = view.sample_idx[2 * row + 2], off_l = view.sample_idx[2 * row + 3];
    auto doc = [&](std::int32_t k) -> std::int64_t {
        if (k < 0 || static_cast<std::size_t>(k) >= view.doc_idx.size())
            throw Error("sample_idx row " + std::to_string(row) + " points at doc_idx[" + std::to_string(k) +
                        "], outside its " + std::to_string(view.doc_idx.size()) + " entries");
        const std::int32_t d = view.doc_idx[static_cast<std::size_t>(k)];
        if (d < 0 || static_cast<std::size_t>(d) >= sizes.size())
            throw Error("doc_idx[" + std::to_string(k) + "] = " + std::to_string(d) + " is not a document of the " +
                        std::to_string(sizes.size()) + " in the dataset");
        return d;
    };
    if (off_f < 0 || off_l < 0 || l < f || (f == l && off_l < off_f))
        throw Error("sample_idx rows " + std::to_string(row) + " and " + std::to_string(row + 1) + " are not increasing");
    auto size_of = [&](std::int64_t d) { return static_cast<std::int64_t>(sizes[static_cast<std::size_t>(d)]); };
    if (f == l) {
        src.pieces.push_back({doc(f), off_f, static_cast<std::int64_t>(off_l) + 1});
    } else {
        const std::int64_t first = doc(f);
        src.pieces.push_back({first, off_f, size_of(first)});
        for (std::int32_t k = f + 1; k < l; ++k) {
            const std::int64_t d = doc(k);
            src.pieces.push_back({d, 0, size_of(d)});
        }
        src.pieces.push_back({doc(l), 0, static_cast<std::int64_t>(off_l) + 1});
    }
    return src;
}

// ---- §4.6 ------------------------------------------------------------------------------------

IndexCachePaths index_cache_paths(const std::string& data_prefix, const std::string& name, std::int64_t num_samples,
                                  std::int32_t seq_length, std::int64_t seed) {
    const std::string base = data_prefix + "_" + name + "_indexmap_" + std::to_string(num_samples) + "ns_" +
                             std::to_string(seq_length) + "sl_" + std::to_string(seed) + "s";
    return {base + "_doc_idx.npy", base + "_sample_idx.npy", base + "_shuffle_idx.npy"};
}

bool index_cache_complete(const IndexCachePaths& paths) {
    return file_exists(paths.doc_idx) && file_exists(paths.sample_idx) && file_exists(paths.shuffle_idx);
}

void save_index_mappings(const IndexCachePaths& paths, const IndexMappings& m) {
    write_npy_1d(paths.doc_idx, m.doc_idx);
    const std::uint64_t rows[2] = {m.sample_idx.size() / 2, 2};
    write_npy(paths.sample_idx, NpyDType::Int32, rows, m.sample_idx.data());
    const NpyDType dt = m.plan.shuffle_dtype();
    if (dt == NpyDType::Int64) {
        write_npy_1d(paths.shuffle_idx, m.shuffle_idx);
        return;
    }
    // uint32 on disk: convert in chunks rather than holding a second copy of a large array.
    const std::uint64_t shape[1] = {m.shuffle_idx.size()};
    AtomicOutput out(paths.shuffle_idx);
    out.write(npy_header_bytes(dt, shape));
    std::vector<std::uint32_t> chunk;
    for (std::size_t k = 0; k < m.shuffle_idx.size(); k += chunk.size()) {
        const std::size_t n = std::min<std::size_t>(1 << 20, m.shuffle_idx.size() - k);
        chunk.assign(m.shuffle_idx.begin() + static_cast<std::ptrdiff_t>(k),
                     m.shuffle_idx.begin() + static_cast<std::ptrdiff_t>(k + n));
        out.write(chunk.data(), n * sizeof(std::uint32_t));
    }
    out.commit();
}

IndexFiles::IndexFiles(const IndexCachePaths& paths, const IndexPlan& plan, std::span<const std::int32_t> sizes)
    : doc_idx_(paths.doc_idx), sample_idx_(paths.sample_idx), shuffle_idx_(paths.shuffle_idx) {
    const std::uint64_t n_doc = plan.doc_idx_size();
    const auto total = static_cast<std::uint64_t>(plan.total_samples());
    const std::uint64_t doc_shape[1] = {n_doc}, sample_shape[2] = {total + 1, 2}, shuffle_shape[1] = {total};
    doc_idx_.expect(NpyDType::Int32, doc_shape);
    sample_idx_.expect(NpyDType::Int32, sample_shape);
    shuffle_idx_.expect(plan.shuffle_dtype(), shuffle_shape);
    view_.doc_idx = doc_idx_.array<std::int32_t>();
    view_.sample_idx = sample_idx_.array<std::int32_t>();
    view_.shuffle_wide = plan.shuffle_dtype() == NpyDType::Int64;
    if (view_.shuffle_wide)
        view_.shuffle_i64 = shuffle_idx_.array<std::int64_t>();
    else
        view_.shuffle_u32 = shuffle_idx_.array<std::uint32_t>();

    // Value checks, so that a damaged or foreign file is reported here rather than mid-training.
    for (std::size_t k = 0; k < view_.doc_idx.size(); ++k) {
        const std::int32_t d = view_.doc_idx[k];
        if (d < plan.doc_begin || d >= plan.doc_end)
            throw Error(paths.doc_idx + ": element " + std::to_string(k) + " is " + std::to_string(d) +
                        ", outside the split's documents [" + std::to_string(plan.doc_begin) + ", " +
                        std::to_string(plan.doc_end) + ")");
    }
    const bool wraps = n_doc > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max());
    std::int32_t prev = 0;
    for (std::size_t r = 0; r <= total && !wraps; ++r) {
        const std::int32_t di = view_.sample_idx[2 * r], off = view_.sample_idx[2 * r + 1];
        const bool ok = di >= prev && static_cast<std::uint64_t>(di) < n_doc && off >= 0 &&
                        off <= sizes[static_cast<std::size_t>(view_.doc_idx[static_cast<std::size_t>(di)])];
        if (!ok)
            throw Error(paths.sample_idx + ": row " + std::to_string(r) + " (" + std::to_string(di) + ", " +
                        std::to_string(off) + ") is not a valid position in doc_idx");
        prev = di;
    }
    for (std::size_t k = 0; k < total; ++k) {
        const std::int64_t s = view_.shuffle(k);
        if (s < 0 || static_cast<std::uint64_t>(s) >= total)
            throw Error(paths.shuffle_idx + ": element " + std::to_string(k) + " is " + std::to_string(s) +
                        ", not a sample index below " + std::to_string(total));
    }
}

void verify_index_files(const IndexCachePaths& paths, const SampleIndexView& files, const IndexMappings& expected) {
    auto mismatch = [](const std::string& path, std::size_t k, std::int64_t found, std::int64_t want) {
        throw Error(path + ": element " + std::to_string(k) + " is " + std::to_string(found) + ", a fresh build gives " +
                    std::to_string(want) + " (the file was built from other data, flags or code; delete the three "
                    "files to rebuild them)");
    };
    for (std::size_t k = 0; k < expected.doc_idx.size(); ++k)
        if (files.doc_idx[k] != expected.doc_idx[k]) mismatch(paths.doc_idx, k, files.doc_idx[k], expected.doc_idx[k]);
    for (std::size_t k = 0; k < expected.sample_idx.size(); ++k)
        if (files.sample_idx[k] != expected.sample_idx[k])
            mismatch(paths.sample_idx, k, files.sample_idx[k], expected.sample_idx[k]);
    for (std::size_t k = 0; k < expected.shuffle_idx.size(); ++k)
        if (files.shuffle(k) != expected.shuffle_idx[k])
            mismatch(paths.shuffle_idx, k, files.shuffle(k), expected.shuffle_idx[k]);
}

}  // namespace mds::data
