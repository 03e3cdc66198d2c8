#include "mds/trainer/micro_batches.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>  // make_generator<CPUGeneratorImpl>: torch.Generator() on the CPU

#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>

#include "mds/util/error.h"

namespace mds::trainer {

std::int64_t micro_batch_first_sample(std::int64_t step_first, std::int64_t j, std::int64_t mbs, std::int64_t dp,
                                      std::int64_t dp_rank) {
    return step_first + j * mbs * dp + dp_rank * mbs;
}

at::Tensor micro_batch(const Sampler& sample, std::int64_t first, std::int64_t mbs, std::int64_t seq, c10::Device device) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(mbs));
    std::iota(ids.begin(), ids.end(), first);
    return micro_batch(sample, ids, seq, device);
}

std::pair<at::Tensor, at::Tensor> tokens_and_labels(const at::Tensor& batch, std::int64_t seqlen) {
    return {batch.narrow(1, 0, seqlen), batch.narrow(1, 1, seqlen)};
}

at::Tensor host_buffer(at::IntArrayRef sizes, at::ScalarType dtype, c10::Device for_device) {
    return at::empty(sizes, at::TensorOptions().dtype(dtype).pinned_memory(for_device.is_cuda()));
}

at::Tensor upload_to_device(const at::Tensor& host, c10::Device device) {
    if (!device.is_cuda() || !host.is_cpu()) return host.to(device);  // only a host tensor goes through page-locked memory
    return (host.is_pinned() ? host : host.pin_memory()).to(device, /*non_blocking=*/true);
}

MicroBatchInputs micro_batch_inputs(const at::Tensor& batch, std::int64_t seqlen, std::optional<std::int64_t> eod_mask_id,
                                    std::optional<std::int64_t> reset_position_eod, std::optional<c10::Device> device) {
    const c10::Device to = device.value_or(batch.device());
    MicroBatchInputs in;
    std::tie(in.tokens, in.labels) = tokens_and_labels(upload_to_device(batch, to), seqlen);
    if (eod_mask_id) in.loss_mask = in.tokens.ne(*eod_mask_id).to(at::kFloat);
    // A position's id depends only on the tokens before it: those of the cut tokens are the cut ids.
    if (reset_position_eod)
        in.position_ids = upload_to_device(reset_position_ids(batch.narrow(1, 0, seqlen), *reset_position_eod), to);
    return in;
}

MicroBatchInputs sft_micro_batch_inputs(const std::vector<data::PackedSample>& rows, std::int64_t seq, std::int64_t seqlen,
                                        const SftBatchOptions& options, c10::Device device) {
    const auto n = static_cast<std::int64_t>(rows.size());
    if (seqlen > seq) throw Error("internal: sequence length " + std::to_string(seqlen) + " over the rows' " + std::to_string(seq));
    auto tokens = host_buffer({n, seqlen}, at::kLong, device), labels = host_buffer({n, seqlen}, at::kLong, device);
    auto segments = host_buffer({n, seqlen}, at::kLong, device), positions = host_buffer({n, seqlen}, at::kLong, device);
    auto mask = host_buffer({n, seqlen}, at::kFloat, device);
    auto* tok = tokens.data_ptr<std::int64_t>();
    auto* lab = labels.data_ptr<std::int64_t>();
    auto* seg = segments.data_ptr<std::int64_t>();
    auto* pos = positions.data_ptr<std::int64_t>();
    auto* m = mask.data_ptr<float>();
    const auto width = static_cast<std::size_t>(seq + 1);
    for (std::int64_t r = 0; r < n; ++r) {
        const auto& row = rows[static_cast<std::size_t>(r)];
        if (row.tokens.size() != width || row.segment_ids.size() != width || row.is_input.size() != width)
            throw Error("packed row of " + std::to_string(row.tokens.size()) + " tokens, " + std::to_string(row.segment_ids.size()) +
                        " segment ids and " + std::to_string(row.is_input.size()) + " input flags; expected " + std::to_string(width) +
                        " of each (--seq-length + 1)");
        std::int64_t start = 0;  // where the current segment began
        for (std::int64_t t = 0; t < seqlen; ++t) {
            const auto i = static_cast<std::size_t>(t);
            const auto k = r * seqlen + t;
            if (t > 0 && row.segment_ids[i] != row.segment_ids[i - 1]) start = t;
            tok[k] = row.tokens[i];
            lab[k] = row.tokens[i + 1];
            seg[k] = row.segment_ids[i];
            pos[k] = t - start;
            bool counts = row.segment_ids[i + 1] != 0 && row.segment_ids[i + 1] == row.segment_ids[i];
            if (options.loss_on_targets_only) counts = counts && row.is_input[i + 1] == 0;
            if (options.eod_mask_id) counts = counts && row.tokens[i] != *options.eod_mask_id;
            m[k] = counts ? 1.0f : 0.0f;
        }
    }
    MicroBatchInputs in;
    in.tokens = upload_to_device(tokens, device);
    in.labels = upload_to_device(labels, device);
    in.loss_mask = upload_to_device(mask, device);
    in.position_ids = upload_to_device(positions, device);
    in.segment_ids = upload_to_device(segments, device);
    return in;
}

at::Tensor reset_position_ids(const at::Tensor& tokens, std::int64_t eod) {
    const auto t = tokens.to(at::kCPU, at::kLong).contiguous();
    const std::int64_t b = t.size(0), s = t.size(1);
    auto pos = at::empty({b, s}, at::kLong);
    const auto* tok = t.data_ptr<std::int64_t>();
    auto* p = pos.data_ptr<std::int64_t>();
    for (std::int64_t r = 0; r < b; ++r) {
        std::int64_t next = 0;  // the id of the next position: 0 after an EOD token
        for (std::int64_t i = 0; i < s; ++i) {
            p[r * s + i] = next++;
            if (tok[r * s + i] == eod) next = 0;
        }
    }
    return pos;
}

LtorMasks ltor_masks_and_position_ids(const at::Tensor& tokens, std::int64_t eod, bool reset_positions,
                                      bool reset_attention_mask) {
    const auto t = tokens.to(at::kCPU, at::kLong).contiguous();
    const std::int64_t b = t.size(0), s = t.size(1);
    auto allowed = at::ones({reset_attention_mask ? b : 1, 1, s, s}, at::kFloat).tril();
    // The ids are those the model takes (micro_batch_inputs), so test_ltor_masks.py checks them.
    auto pos = reset_positions ? reset_position_ids(t, eod) : at::arange(s, at::kLong).unsqueeze(0).expand({b, s}).clone();
    const auto* tok = t.data_ptr<std::int64_t>();
    if (reset_attention_mask) {
        for (std::int64_t r = 0; r < b; ++r)
            for (std::int64_t i = 0; i < s; ++i)  // positions after an EOD see nothing up to it
                if (tok[r * s + i] == eod) allowed[r][0].narrow(0, i + 1, s - i - 1).narrow(1, 0, i + 1).zero_();
    }
    return {pos, allowed.lt(0.5)};
}

at::Tensor host_micro_batch(const Sampler& sample, const std::vector<std::int64_t>& ids, std::int64_t seq, c10::Device for_device) {
    const auto n = static_cast<std::int64_t>(ids.size());
    auto t = host_buffer({n, seq + 1}, at::kLong, for_device);
    auto* out = t.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i) {
        const auto id = ids[static_cast<std::size_t>(i)];
        const auto s = sample(id);
        if (static_cast<std::int64_t>(s.size()) != seq + 1)
            throw Error("sample " + std::to_string(id) + " has " + std::to_string(s.size()) + " tokens, expected " +
                        std::to_string(seq + 1));
        std::copy(s.begin(), s.end(), out + i * (seq + 1));
    }
    return t;
}

at::Tensor micro_batch(const Sampler& sample, const std::vector<std::int64_t>& ids, std::int64_t seq, c10::Device device) {
    return upload_to_device(host_micro_batch(sample, ids, seq, device), device);
}

DataloaderType dataloader_type(const std::string& flag_value) {
    if (flag_value == "single") return DataloaderType::Single;
    if (flag_value == "cyclic") return DataloaderType::Cyclic;
    throw UsageError("--dataloader-type " + flag_value + ": expected single or cyclic");
}

PretrainingSampler::PretrainingSampler(DataloaderType type, std::int64_t total_samples, std::int64_t mbs, std::int64_t dp,
                                       std::int64_t dp_rank)
    : type_(type), total_(total_samples), mbs_(mbs), dp_(dp), rank_(dp_rank) {
    if (type_ != DataloaderType::Cyclic) return;
    // MegatronPretrainingRandomSampler drops the last total % (mbs·DP) samples of every epoch.
    active_ = total_ / (mbs_ * dp_) * mbs_ * dp_;
    bucket_ = active_ / dp_;
    if (active_ <= 0)
        throw UsageError("--dataloader-type cyclic: the training dataset has " + std::to_string(total_) +
                         " samples, less than one micro batch per data-parallel rank (" + std::to_string(mbs_ * dp_) + ")");
}

std::vector<std::int64_t> PretrainingSampler::micro_batch(std::int64_t position) const {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(mbs_));
    if (type_ == DataloaderType::Single) {
        for (std::int64_t i = 0; i < mbs_; ++i) ids[static_cast<std::size_t>(i)] = position + rank_ * mbs_ + i;
        return ids;
    }
    const std::int64_t epoch = position / active_;
    if (epoch != epoch_) {
        // torch.Generator().manual_seed(epoch); torch.randperm(bucket, generator=g)
        auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(epoch));
        const at::Tensor p = at::randperm(bucket_, gen, at::TensorOptions().dtype(at::kLong));  // locks gen itself
        perm_.assign(p.data_ptr<std::int64_t>(), p.data_ptr<std::int64_t>() + bucket_);
        epoch_ = epoch;
    }
    const std::int64_t offset = position % active_ / dp_;
    for (std::int64_t i = 0; i < mbs_; ++i)
        ids[static_cast<std::size_t>(i)] = rank_ * bucket_ + perm_[static_cast<std::size_t>(offset + i)];
    return ids;
}

}  // namespace mds::trainer
