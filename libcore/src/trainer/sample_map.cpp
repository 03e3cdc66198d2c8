#include "mds/trainer/sample_map.h"

#include <ATen/ATen.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include <nlohmann/json.hpp>

#include "mds/data/gpt_datasets.h"
#include "mds/data/weighted_split.h"
#include "mds/flags/curriculum.h"
#include "mds/util/error.h"

namespace mds::trainer {

std::int64_t skip_ranges_due(std::deque<std::array<std::int64_t, 2>>& ranges, std::int64_t iteration, std::int64_t mbs,
                             std::int64_t dp, const std::function<void(std::int64_t, std::int64_t)>& on_skip) {
    std::int64_t skipped = 0;
    while (!ranges.empty() && ranges.front()[0] <= iteration + 1 && iteration + 1 <= ranges.front()[1]) {
        const auto [start, end] = ranges.front();
        ranges.pop_front();
        if (on_skip) on_skip(start, end);
        skipped += (end - iteration) * mbs * dp;  // a micro batch of every data-parallel rank each
    }
    return skipped;
}

void drop_skip_ranges_before(std::deque<std::array<std::int64_t, 2>>& ranges, std::int64_t iteration) {
    while (!ranges.empty() && ranges.front()[1] < iteration) ranges.pop_front();
}

std::vector<std::int64_t> rank_micro_batch_samples(const PretrainingSampler& order, std::int64_t step_position,
                                                   std::int64_t j, std::int64_t mbs, std::int64_t dp) {
    return order.micro_batch(step_position + j * mbs * dp);
}

std::function<MicroBatchInputs(std::int64_t)> dump_batches(std::function<MicroBatchInputs(std::int64_t)> batch,
                                                           BatchDump dump) {
    return [batch = std::move(batch), dump = std::move(dump)](std::int64_t j) {
        MicroBatchInputs in = batch(j);
        const at::Tensor tokens = in.tokens.to(at::kCPU).to(at::kLong).contiguous();
        const at::Tensor labels = in.labels.to(at::kCPU).to(at::kLong).contiguous();
        nlohmann::json rows = nlohmann::json::array();
        const auto tok = tokens.accessor<std::int64_t, 2>();
        const auto lab = labels.accessor<std::int64_t, 2>();
        for (std::int64_t b = 0; b < tokens.size(0); ++b) {
            std::vector<std::int64_t> row(static_cast<std::size_t>(tokens.size(1) + 1));
            for (std::int64_t t = 0; t < tokens.size(1); ++t) row[static_cast<std::size_t>(t)] = tok[b][t];
            row.back() = lab[b][labels.size(1) - 1];
            rows.push_back(std::move(row));
        }
        nlohmann::json line = {{"iteration", dump.iteration}, {"micro_batch", j},      {"dp_rank", dump.dp_rank},
                               {"tp_rank", dump.tp_rank},     {"pp_rank", dump.pp_rank}, {"samples", dump.samples(j)},
                               {"tokens", std::move(rows)}};
        // What else the model read, per position, where the batch has it (--eod-mask-loss, --reset-position-ids, --sft).
        const auto rows_of = [](const at::Tensor& t) {
            const at::Tensor c = t.to(at::kCPU).to(at::kDouble).contiguous();
            const auto a = c.accessor<double, 2>();
            nlohmann::json out = nlohmann::json::array();
            for (std::int64_t b = 0; b < c.size(0); ++b) {
                std::vector<std::int64_t> row(static_cast<std::size_t>(c.size(1)));
                for (std::int64_t k = 0; k < c.size(1); ++k) row[static_cast<std::size_t>(k)] = static_cast<std::int64_t>(a[b][k]);
                out.push_back(std::move(row));
            }
            return out;
        };
        if (in.loss_mask.defined()) line["loss_mask"] = rows_of(in.loss_mask);
        if (in.position_ids.defined()) line["position_ids"] = rows_of(in.position_ids);
        if (in.segment_ids.defined()) line["segment_ids"] = rows_of(in.segment_ids);
        const std::string text = line.dump() + "\n";
        std::FILE* f = std::fopen(dump.path.c_str(), "ab");
        if (!f) throw Error("MDS_DUMP_BATCHES: cannot open " + dump.path + " for appending: " + std::strerror(errno));
        const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
        if (std::fclose(f) != 0 || !ok) throw Error("MDS_DUMP_BATCHES: cannot write " + dump.path);
        return in;
    };
}

// The training dataset as mds-train's setup_data builds it: Mode 1 (--data-path, --split) or Mode 2
// (--train-weighted-split-paths).
struct SampleMap::Data {
    std::optional<data::GptDatasets> datasets;
    std::optional<data::WeightedSplitDatasets> weighted;
};

SampleMap::~SampleMap() = default;

SampleMap::SampleMap(const flags::TrainArgs& args, const SampleMapOptions& options)
    : args_(args), data_(std::make_unique<Data>()) {
    dp_ = options.data_parallel_size;
    if (dp_ < 1) throw UsageError("the data-parallel size must be at least 1, got " + std::to_string(dp_));
    mbs_ = args_.optimizer.micro_batch_size;
    seq_ = args_.model.seq_length;
    resumed_ = options.resumed_iteration;
    if (resumed_ < 0) throw UsageError("the resumed iteration must be 0 or more, got " + std::to_string(resumed_));
    const auto calculator = flags::make_num_micro_batches_calculator(args_);
    data::NumSamplesOptions num_samples;
    num_samples.train_samples = args_.length.train_samples;
    num_samples.train_iters = args_.length.train_iters;
    num_samples.global_batch_size = calculator.global_batch_size();
    num_samples.eval_interval = args_.logging.eval_interval;
    num_samples.eval_iters = args_.logging.eval_iters;
    if (const auto& r = args_.optimizer.rampup_batch_size)
        num_samples.rampup_batch_size =
            std::array<std::int64_t, 3>{r->start_global_batch_size, r->batch_size_increment, r->ramp_up_samples};
    if (!args_.data.weighted_split_paths[0].empty()) {
        data::WeightedSplitOptions wopt;
        for (int k = 0; k < 3; ++k) {
            const auto kk = static_cast<std::size_t>(k);
            const std::string& file = args_.data.weighted_split_paths_path[kk];
            const std::string where = file.empty() ? std::string() : "from " + file + " line 1";
            wopt.groups[kk] =
                data::parse_weighted_split_paths(data::weighted_split_flag(k), args_.data.weighted_split_paths[kk], where);
        }
        wopt.seq_length = static_cast<std::int32_t>(seq_);
        wopt.seed = args_.seed;
        wopt.num_samples = num_samples;
        wopt.log = options.log;
        const auto& w = data_->weighted.emplace(wopt);
        train_iters_ = w.train_iters();
        total_ = w.groups(0).front().size;
    } else {
        if (args_.data.data_path.empty())
            throw UsageError("--data-path (or --train-weighted-split-paths / --train-weighted-split-paths-path) is required");
        data::GptDatasetsOptions dopt;
        dopt.data_path = args_.data.data_path;
        if (args_.data.split) dopt.split = *args_.data.split;
        dopt.seq_length = static_cast<std::int32_t>(seq_);
        dopt.seed = args_.seed;
        dopt.num_samples = num_samples;
        dopt.log = options.log;
        const auto& d = data_->datasets.emplace(dopt);
        train_iters_ = d.summary().train_iters;
        total_ = d.summary().sizes[0];
    }
    if (resumed_ > train_iters_)
        throw UsageError("the resumed iteration " + std::to_string(resumed_) + " is beyond the training's " +
                         std::to_string(train_iters_) + " iterations");
    if (options.resumed_consumed_samples) {
        resumed_consumed_ = *options.resumed_consumed_samples;
    } else {
        // Consumed samples only count trained iterations (not skipped ones): the ramp-up replayed.
        auto calc = flags::make_num_micro_batches_calculator(args_);
        for (std::int64_t i = 0; i < resumed_; ++i) {
            calc.update(resumed_consumed_);
            resumed_consumed_ += calc.current_global_batch_size();
        }
    }
    // The sampler checks (cyclic: at least a micro batch per rank) as mds-train's set-up does.
    (void)PretrainingSampler(dataloader_type(args_.data.dataloader_type), total_, mbs_, dp_, 0);
}

void SampleMap::walk(std::int64_t last, const std::function<bool(const MappedIteration&)>& visit) const {
    if (last > train_iters_)
        throw UsageError("iteration " + std::to_string(last) + " is beyond the training's " + std::to_string(train_iters_) +
                         " iterations");
    auto calc = flags::make_num_micro_batches_calculator(args_);
    const auto type = dataloader_type(args_.data.dataloader_type);
    std::vector<PretrainingSampler> orders;
    for (std::int64_t r = 0; r < dp_; ++r) orders.emplace_back(type, total_, mbs_, dp_, r);
    std::deque<std::array<std::int64_t, 2>> ranges(args_.data.skip_ranges.begin(), args_.data.skip_ranges.end());
    std::optional<flags::CurriculumScheduler> curriculum;
    if (args_.curriculum && args_.curriculum->enabled) {
        curriculum.emplace(*args_.curriculum);
        // Its state at the resumed iteration: the difficulty only grows with the steps (a checkpoint holds it).
        for (std::int64_t i = 0; i < resumed_; ++i) (void)flags::curriculum_step(*curriculum, i, seq_);
    }
    std::int64_t iteration = resumed_, consumed = resumed_consumed_, skipped = 0;
    drop_skip_ranges_before(ranges, iteration);
    while (iteration < last) {
        MappedIteration m;
        skipped += skip_ranges_due(ranges, iteration, mbs_, dp_,
                                   [&m](std::int64_t a, std::int64_t b) { m.skipped.push_back({a, b}); });
        calc.update(consumed);
        m.iteration = iteration + 1;
        m.consumed_before = consumed;
        m.position = consumed + skipped;
        m.batch_size = calc.current_global_batch_size();
        m.micro_batches = calc.num_micro_batches();
        m.seqlen = curriculum ? flags::curriculum_step(*curriculum, iteration, seq_).batch_seq_length : seq_;
        m.samples.reserve(static_cast<std::size_t>(m.batch_size));
        for (std::int64_t j = 0; j < m.micro_batches; ++j)
            for (std::int64_t r = 0; r < dp_; ++r) {
                const auto ids = rank_micro_batch_samples(orders[static_cast<std::size_t>(r)], m.position, j, mbs_, dp_);
                for (std::int64_t k = 0; k < mbs_; ++k) {
                    MappedSample s;
                    s.iteration = m.iteration;
                    s.micro_batch = j;
                    s.dp_rank = r;
                    s.index = k;
                    const std::int64_t place = j * mbs_ * dp_ + r * mbs_ + k;
                    s.consumed = consumed + place;
                    s.position = m.position + place;
                    s.sample = ids[static_cast<std::size_t>(k)];
                    m.samples.push_back(s);
                }
            }
        consumed += m.batch_size;
        ++iteration;
        if (!visit(m)) return;
    }
}

data::SampleOrigin SampleMap::origin(std::int64_t n) const {
    return data_->weighted ? data_->weighted->origin(0, 0, n) : data_->datasets->origin(0, n);
}

std::vector<std::int64_t> SampleMap::tokens(std::int64_t n) const {
    return data_->weighted ? data_->weighted->sample(0, 0, n) : data_->datasets->sample(0, n);
}

}  // namespace mds::trainer
