// The micro batches of one training step as Megatron's pretraining sampler
// (megatron/data/data_samplers.py, MegatronPretrainingSampler) hands them to the data-parallel
// ranks: a step's global batch is the samples [first, first + batch size) of the sample index;
// micro batch j of the step is the run [j·mbs·DP, (j+1)·mbs·DP) of it, and data-parallel rank r
// takes the mbs samples at r·mbs within that run.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mds/data/packed_sft_dataset.h"  // PackedSample

namespace mds::trainer {

// Sample n of one dataset (the training one, a validation or test split or group): seq + 1 token ids.
using Sampler = std::function<std::vector<std::int64_t>(std::int64_t)>;

// Where `dp_rank`'s part of micro batch `j` starts, for a step whose global batch starts at sample
// `step_first`.
std::int64_t micro_batch_first_sample(std::int64_t step_first, std::int64_t j, std::int64_t mbs, std::int64_t dp,
                                      std::int64_t dp_rank);

// One micro batch of the `mbs` consecutive samples from `first`, as [mbs, seq + 1] token ids on
// `device` (the ids form below, for a sampler's ids). Throws mds::Error naming the sample when one
// has another length.
at::Tensor micro_batch(const Sampler& sample, std::int64_t first, std::int64_t mbs, std::int64_t seq, c10::Device device);

// The model's tokens and labels from a micro batch [mbs, seq + 1], cut to `seqlen` (<= seq: the
// curriculum's length, Megatron-DeepSpeed's): tokens [:, 0, seqlen), labels [:, 1, seqlen + 1).
std::pair<at::Tensor, at::Tensor> tokens_and_labels(const at::Tensor& batch, std::int64_t seqlen);

// What the model takes of one micro batch: tokens and labels [mbs, seqlen], the loss mask
// (float, 0 where the loss is not counted) or an undefined tensor when every position counts, the
// position ids [mbs, seqlen] or an undefined tensor for 0 … seqlen-1 in every sample, and the
// segment ids [mbs, seqlen] of packed rows (--sft: attention within each example) or undefined.
struct MicroBatchInputs {
    at::Tensor tokens, labels, loss_mask, position_ids, segment_ids;
};

// A dataset as the trainer reads it: the model's inputs of the samples `ids`, cut to `seqlen`
// (GPT samples through micro_batch_inputs, packed --sft rows through sft_micro_batch_inputs).
using BatchSource = std::function<MicroBatchInputs(const std::vector<std::int64_t>& ids, std::int64_t seqlen)>;

// tokens_and_labels, plus --eod-mask-loss's mask when `eod_mask_id` is given: 0 where the INPUT
// token is that id, 1 elsewhere (BMD's get_ltor_masks_and_position_ids masks `data == eod_token`,
// the tokens, not the labels; the curriculum then cuts the mask with the tokens), and
// --reset-position-ids' position ids when `reset_position_eod` (the EOD id) is given
// (reset_position_ids() of the tokens; BMD cuts them with the tokens too). All on `device` (default: the
// batch's); give the batch in host memory: the ids are computed there, and it goes to a GPU in one
// asynchronous upload (upload_to_device).
MicroBatchInputs micro_batch_inputs(const at::Tensor& batch, std::int64_t seqlen, std::optional<std::int64_t> eod_mask_id,
                                    std::optional<std::int64_t> reset_position_eod = std::nullopt,
                                    std::optional<c10::Device> device = std::nullopt);

// `host` (a tensor in host memory) on `device`. To a GPU the copy is queued on the device's current stream from
// page-locked memory (a copy of `host` there when it is not), and the host does not wait: from pageable memory
// a copy to a GPU makes the host wait until the device has run everything queued before it, which left the GPU
// idle 0.6-1.1 ms before every micro batch. LibTorch's caching host allocator keeps the page-locked block
// until the copy has run.
at::Tensor upload_to_device(const at::Tensor& host, c10::Device device);

// An uninitialized host tensor to fill and then upload to `for_device`: page-locked when that is a GPU (from
// LibTorch's caching host allocator, so upload_to_device copies nothing first), ordinary memory otherwise.
at::Tensor host_buffer(at::IntArrayRef sizes, at::ScalarType dtype, c10::Device for_device);

// Position ids [b, s] int64 (on the CPU) of tokens [b, s] that restart at 0 after each token `eod`
// (BMD's get_ltor_masks_and_position_ids with reset_position_ids).
at::Tensor reset_position_ids(const at::Tensor& tokens, std::int64_t eod);

// --reset-position-ids / --reset-attention-mask's batch side, as Megatron's
// get_ltor_masks_and_position_ids (megatron/utils.py) builds them from tokens [b, s] (on the CPU)
// with EOD id `eod`: position ids [b, s] int64 restart at 0 after each EOD token when
// `reset_position_ids`; the attention mask [b or 1, 1, s, s] bool, true where attention is NOT
// allowed: causal, and with `reset_attention_mask` no position attends across an EOD token to the
// document before it (one mask per sample then, one shared causal mask otherwise). The model takes
// the position ids (micro_batch_inputs); the attention mask is what BMD builds and then drops
// (GPTModelPipe attends causally), kept here for tests/crosscheck/test_ltor_masks.py.
struct LtorMasks {
    at::Tensor position_ids, attention_mask;
};
LtorMasks ltor_masks_and_position_ids(const at::Tensor& tokens, std::int64_t eod, bool reset_position_ids,
                                      bool reset_attention_mask);

// --sft: how packed rows (data::PackedSample) become the model's inputs.
struct SftBatchOptions {
    bool loss_on_targets_only = false;        // --loss-on-targets-only: loss on answer tokens only
    std::optional<std::int64_t> eod_mask_id;  // --eod-mask-loss: no loss where the input token is EOD
};

// The inputs of packed rows of seq + 1 tokens each, cut to `seqlen`: tokens [:, 0, seqlen) and labels
// [:, 1, seqlen + 1) as for GPT samples; the tokens' segment ids (the model keeps attention within a
// segment); position ids restarting at 0 where a segment starts (absolute position embeddings see each
// example as if it stood alone); and the loss mask: position t counts when its label (token t + 1) is
// in the same example as token t (never across examples, never on padding, segment 0), with
// --loss-on-targets-only only when that label is an answer token, and with --eod-mask-loss not when
// token t is EOD. Throws mds::Error when a row has another length or its fields disagree.
MicroBatchInputs sft_micro_batch_inputs(const std::vector<data::PackedSample>& rows, std::int64_t seq, std::int64_t seqlen,
                                        const SftBatchOptions& options, c10::Device device);

// One micro batch from the given sample ids, as [ids.size(), seq + 1] token ids on `device`.
at::Tensor micro_batch(const Sampler& sample, const std::vector<std::int64_t>& ids, std::int64_t seq, c10::Device device);
// The same in host memory, in a host_buffer for `for_device` (for micro_batch_inputs, which computes there).
at::Tensor host_micro_batch(const Sampler& sample, const std::vector<std::int64_t>& ids, std::int64_t seq, c10::Device for_device);

// --dataloader-type: Megatron's two pretraining samplers (megatron/data/data_samplers.py).
enum class DataloaderType { Single, Cyclic };
DataloaderType dataloader_type(const std::string& flag_value);  // "single" | "cyclic"

// Which samples a data-parallel rank takes for a micro batch, from the data stream's position:
// the samples every rank has drawn before that micro batch (consumed samples, plus what
// --skip-train-iteration-range skipped). A multiple of mbs · DP.
//  - Single (MegatronPretrainingSampler): samples [position + rank·mbs, + mbs).
//  - Cyclic (MegatronPretrainingRandomSampler): the dataset's first `active` = ⌊total / (mbs·DP)⌋·mbs·DP
//    samples cut into DP buckets of active / DP; epoch e = position / active shuffles each bucket
//    with torch.randperm(bucket, generator seeded with e); the rank takes mbs consecutive entries of
//    its bucket's permutation from (position mod active) / DP. LibTorch's randperm on a CPU generator
//    is the one Python's torch calls, so the order is BMD's.
class PretrainingSampler {
public:
    // `total_samples`: len() of the dataset (the training one for Cyclic). Throws mds::UsageError
    // when Cyclic has less than one micro batch per rank in it.
    PretrainingSampler(DataloaderType type, std::int64_t total_samples, std::int64_t mbs, std::int64_t dp,
                       std::int64_t dp_rank);
    std::vector<std::int64_t> micro_batch(std::int64_t position) const;

private:
    DataloaderType type_;
    std::int64_t total_, mbs_, dp_, rank_, active_ = 0, bucket_ = 0;
    mutable std::int64_t epoch_ = -1;  // the epoch perm_ shuffles (computed once per epoch)
    mutable std::vector<std::int64_t> perm_;
};

}  // namespace mds::trainer
