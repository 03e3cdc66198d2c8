// Which training samples each iteration reads, as mds-train feeds them (and Megatron-DeepSpeed's
// train loop with its pretraining samplers): the batch-size ramp-up's global batch per iteration,
// micro batch j / data-parallel rank r's samples from the data stream's position (consumed samples
// plus what --skip-train-iteration-range skipped), --dataloader-type, the curriculum's sequence
// length, and each sample's origin in the (blended) datasets. mds-train calls the same functions
// (skip_ranges_due, rank_micro_batch_samples); mds-sample-text walks the whole map.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mds/data/gpt_dataset_index.h"  // SampleOrigin
#include "mds/flags/train_args.h"
#include "mds/trainer/micro_batches.h"

namespace mds::trainer {

// --skip-train-iteration-range at the top of an iteration, as BMD's train loop: while iteration + 1
// falls in the FIRST range left, drop that range and skip (END - iteration) micro batches of every
// data-parallel rank; returns the samples skipped (0 when none is due). `on_skip` hears each range
// dropped. Only the first range is looked at, so a range ending before the resumed iteration that
// was not dropped blocks the later ones, as in BMD.
std::int64_t skip_ranges_due(std::deque<std::array<std::int64_t, 2>>& ranges, std::int64_t iteration, std::int64_t mbs,
                             std::int64_t dp, const std::function<void(std::int64_t, std::int64_t)>& on_skip = {});

// At the start of training (BMD's train()): drops the ranges that end before `iteration`.
void drop_skip_ranges_before(std::deque<std::array<std::int64_t, 2>>& ranges, std::int64_t iteration);

// The training sample ids a data-parallel rank (the one `order` was made for) reads for micro batch
// j of a step whose data stream starts at `step_position`.
std::vector<std::int64_t> rank_micro_batch_samples(const PretrainingSampler& order, std::int64_t step_position,
                                                   std::int64_t j, std::int64_t mbs, std::int64_t dp);

// MDS_DUMP_BATCHES (a debugging aid, docs/mds-sample-text.md): where the training batches are dumped.
struct BatchDump {
    std::string path;  // this rank's file (PATH.rank{N}); lines are appended
    std::int64_t iteration = 0, dp_rank = 0, tp_rank = 0, pp_rank = 0;
    std::function<std::vector<std::int64_t>(std::int64_t)> samples;  // micro batch j's sample ids
};

// `batch` that also appends, for each micro batch it returns, the JSON line {"iteration",
// "micro_batch", "dp_rank", "tp_rank", "pp_rank", "samples": [ids], "tokens": [[...]]} to dump.path
// (tokens: the seqlen + 1 ids the model read per sample, tokens then the last label), and where the
// batch has them "loss_mask" (0 / 1), "position_ids" and "segment_ids" ([[seqlen per sample]]). Throws
// mds::Error when the file cannot be written.
std::function<MicroBatchInputs(std::int64_t)> dump_batches(std::function<MicroBatchInputs(std::int64_t)> batch,
                                                           BatchDump dump);

struct SampleMapOptions {
    std::int64_t data_parallel_size = 1;
    // The iteration of the checkpoint the launch resumed from (0: none), and its consumed samples
    // (default: the batch sizes of iterations 1 … resumed_iteration replayed through the ramp-up).
    std::int64_t resumed_iteration = 0;
    std::optional<std::int64_t> resumed_consumed_samples;
    std::function<void(const std::string&)> log;  // data set-up messages (none when empty)
};

// One sample a data-parallel rank read.
struct MappedSample {
    std::int64_t iteration = 0, micro_batch = 0, dp_rank = 0;
    std::int64_t index = 0;     // in the rank's micro batch (0 … mbs-1)
    std::int64_t consumed = 0;  // consumed samples before it: before the iteration + its place in the global batch
    std::int64_t position = 0;  // in the data stream (consumed plus skipped samples)
    std::int64_t sample = 0;    // training dataset sample id (after the sampler)
};

// One iteration's batch.
struct MappedIteration {
    std::int64_t iteration = 0;
    std::int64_t consumed_before = 0;  // consumed samples before the iteration
    std::int64_t position = 0;         // data stream position of its first micro batch
    std::int64_t batch_size = 0;       // global batch size in force (ramp-up)
    std::int64_t micro_batches = 0;
    std::int64_t seqlen = 0;           // tokens per sample the model reads (curriculum), of seq_length
    std::vector<std::array<std::int64_t, 2>> skipped;  // --skip-train-iteration-range ranges applied just before
    std::vector<MappedSample> samples;  // by micro batch, then data-parallel rank, then index
};

class SampleMap {
public:
    // Validated args (resolve_train_args). Opens the datasets as mds-train does (building missing index
    // files). Throws mds::Error / UsageError.
    SampleMap(const flags::TrainArgs& args, const SampleMapOptions& options);
    ~SampleMap();
    SampleMap(const SampleMap&) = delete;
    SampleMap& operator=(const SampleMap&) = delete;

    std::int64_t train_iters() const { return train_iters_; }
    std::int64_t seq_length() const { return seq_; }
    std::int64_t dataset_size() const { return total_; }  // samples of the training dataset
    std::int64_t resumed_iteration() const { return resumed_; }
    std::int64_t resumed_consumed_samples() const { return resumed_consumed_; }

    // Iterations resumed_iteration + 1 … `last` (≤ train_iters) in order; `visit` returns false to stop.
    void walk(std::int64_t last, const std::function<bool(const MappedIteration&)>& visit) const;

    // Training sample n: its origin and its seq_length + 1 token ids.
    data::SampleOrigin origin(std::int64_t n) const;
    std::vector<std::int64_t> tokens(std::int64_t n) const;

private:
    struct Data;
    flags::TrainArgs args_;
    std::unique_ptr<Data> data_;
    std::int64_t dp_ = 1, mbs_ = 1, seq_ = 0, train_iters_ = 0, total_ = 0, resumed_ = 0, resumed_consumed_ = 0;
};

}  // namespace mds::trainer
