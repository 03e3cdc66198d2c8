// The files of a DeepSpeed pipeline checkpoint as Megatron-DeepSpeed writes them (specs/checkpoints.md
// §1-§5): layer_XX-model_YY-model_states.pt (DeepSpeed's PipelineModule.save_state_dict),
// mp_rank_XX_model_states.pt (engine._save_checkpoint with BMD's client state) and the optimizer
// partitions [bf16_]zero_pp_rank_D_mp_rank_XX_optim_states.pt (engine._save_zero_checkpoint).
#include <ATen/ATen.h>
#include <ATen/DeviceAccelerator.h>  // at::accelerator::synchronizeDevice (the snapshot's copies)

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "checkpoint_files.h"
#include "mds/ckpt/ds_layout.h"
#include "mds/model/tensor_io.h"
#include "mds/util/cli.h"  // mds_version
#include "mds/util/error.h"
#include "megatron_args.h"
#include "py_values.h"

namespace mds::trainer::checkpoint_detail {
namespace fs = std::filesystem;
using ckpt::PyValue;
using namespace py;

// ---- tensors and values ----------------------------------------------------------------------------

std::span<const std::byte> bytes_of(const at::Tensor& t) {
    return {static_cast<const std::byte*>(t.data_ptr()), static_cast<std::size_t>(t.nbytes())};
}

at::Tensor to_tensor(const ckpt::TorchTensor& t) {
    auto out = at::empty(t.shape, at::TensorOptions().dtype(model::to_scalar_type(t.dtype)));
    const auto data = t.gather();
    if (data.size() != static_cast<std::size_t>(out.nbytes())) throw Error("internal: tensor size mismatch");
    if (!data.empty()) std::memcpy(out.data_ptr(), data.data(), data.size());
    return out;
}

std::string ds_param_name(const model::Parameter& p) {
    if (p.layer == model::kEmbeddingLayer) return "tied_modules.embed." + p.name;
    return std::to_string(p.layer) + "." + p.name;
}

double number(const PyValue& v) { return v.type() == ckpt::PyType::Float ? v.as_float() : static_cast<double>(v.as_int()); }

// ---- the snapshot of an asynchronous save -------------------------------------------------------------

void Snapshot::begin() {
    next_ = 0;
    files_.clear();
}

at::Tensor Snapshot::take(at::ScalarType dtype, std::int64_t numel) {
    const std::int64_t nbytes = numel * static_cast<std::int64_t>(c10::elementSize(dtype));
    if (next_ == buffers_.size() || buffers_[next_].numel() < nbytes) {
        auto buffer = at::empty({std::max<std::int64_t>(nbytes, 1)}, at::TensorOptions().dtype(at::kByte).pinned_memory(pinned_));
        if (next_ == buffers_.size()) buffers_.push_back(buffer);
        else buffers_[next_] = buffer;  // a save asking for other sizes (it should not happen): replaced
    }
    return buffers_[next_++].narrow(0, 0, nbytes).view(dtype);
}

void Snapshot::wait_copies() const {
    // Pinned buffers received non-blocking copies from the device; pageable ones were copied at once.
    if (pinned_) at::accelerator::synchronizeDevice(device_.has_index() ? device_.index() : c10::DeviceIndex(0));
}

void Snapshot::write_files() {
    for (auto& f : files_) f.writer.finish(f.root);
}

std::uint64_t Snapshot::buffer_bytes() const {
    std::uint64_t n = 0;
    for (const auto& b : buffers_) n += static_cast<std::uint64_t>(b.numel());
    return n;
}

// ---- torch.save files -----------------------------------------------------------------------------------

FileBuilder::FileBuilder(std::string path, Snapshot* snapshot) : writer_(std::move(path), "cpu"), snapshot_(snapshot) {}

PyValue FileBuilder::tensor(const at::Tensor& t) {
    at::Tensor c;
    if (snapshot_) {  // a copy of its own: the live tensor changes with the next step
        c = snapshot_->take(t.scalar_type(), t.numel()).view(t.sizes());
        c.copy_(t.detach(), /*non_blocking=*/true);
    } else {
        c = t.detach().to(at::kCPU).contiguous();
    }
    keep_.push_back(c);
    return writer_.add_tensor(model::to_ckpt_dtype(c.scalar_type()), c.sizes().vec(), bytes_of(c));
}

PyValue FileBuilder::flat(std::vector<at::Tensor> pieces, std::int64_t padding) {
    std::int64_t numel = padding;
    for (const auto& p : pieces) numel += p.numel();
    if (snapshot_) {  // materialized now (fp32), the padding still streamed as zeros
        auto buffer = snapshot_->take(at::kFloat, numel - padding);
        std::int64_t at = 0;
        for (const auto& p : pieces) {
            buffer.narrow(0, at, p.numel()).copy_(p.detach().reshape({-1}), /*non_blocking=*/true);
            at += p.numel();
        }
        keep_.push_back(buffer);
        pieces = {buffer};
    }
    return writer_.add_tensor(ckpt::DType::F32, {numel}, [pieces = std::move(pieces), padding](ckpt::TorchZipWriter& out) {
        for (const auto& p : pieces) {
            const auto c = p.detach().to(at::kCPU, at::kFloat).contiguous();
            out.write(bytes_of(c));
        }
        const std::vector<std::byte> zeros(static_cast<std::size_t>(padding) * 4);
        out.write(zeros);
    });
}

void FileBuilder::finish(const PyValue& root) {
    if (snapshot_) {
        snapshot_->add({std::move(writer_), root, std::move(keep_)});
        keep_.clear();
        return;
    }
    writer_.finish(root);
    keep_.clear();
}

namespace {

std::string decay_style_name(optim::LrDecayStyle s) { return optim::to_string(s); }

PyValue lr_scheduler_state(const optim::LrScheduleState& s) {
    // BMD's AnnealingLR.state_dict() keys, then megatron-core's extra ones (ignored by BMD).
    auto d = PyValue::dict();
    auto& m = d.as_dict();
    m.set("max_lr", floating(s.params.max_lr));
    m.set("warmup_steps", floating(s.params.lr_warmup_steps));
    m.set("num_steps", integer(s.num_steps));
    m.set("warmup_tokens", integer(s.warmup_tokens));
    m.set("num_tokens", integer(s.num_tokens));
    m.set("decay_style", str(decay_style_name(s.params.lr_decay_style)));
    m.set("decay_steps", integer(s.params.lr_decay_steps));
    m.set("min_lr", floating(s.params.min_lr));
    m.set("decay_tokens", s.params.lr_decay_tokens ? integer(*s.params.lr_decay_tokens) : PyValue::none());
    m.set("init_lr", floating(s.params.init_lr));
    m.set("start_wd", floating(s.params.start_wd));
    m.set("end_wd", floating(s.params.end_wd));
    m.set("wd_incr_steps", integer(s.params.wd_incr_steps));
    m.set("wd_incr_style", str(optim::to_string(s.params.wd_incr_style)));
    return d;
}

PyValue deepspeed_loss_scaler(const flags::TrainArgs& a, const TrainingProgress& p) {
    auto d = PyValue::dict();
    auto& m = d.as_dict();
    if (p.deepspeed_scaler || p.megatron_scaler) {
        const auto cfg = optim::deepspeed_loss_scaler_config(a.optimizer);
        const double scale = p.deepspeed_scaler ? p.deepspeed_scaler->cur_scale : static_cast<double>(p.megatron_scaler->scale);
        m.set("cur_scale", floating(scale));
        m.set("dynamic", PyValue::boolean(cfg.dynamic));
        if (cfg.dynamic) {
            m.set("cur_iter", integer(p.deepspeed_scaler ? p.deepspeed_scaler->cur_iter : 0));
            m.set("last_overflow_iter", integer(p.deepspeed_scaler ? p.deepspeed_scaler->last_overflow_iter : -1));
            m.set("scale_factor", floating(cfg.scale_factor));
            m.set("scale_window", integer(cfg.scale_window));
            m.set("min_scale", floating(cfg.min_scale));
            m.set("delayed_shift", integer(cfg.hysteresis));
            m.set("cur_hysteresis", integer(p.deepspeed_scaler ? p.deepspeed_scaler->cur_hysteresis : cfg.hysteresis));
            m.set("consecutive_hysteresis", PyValue::boolean(cfg.consecutive_hysteresis));
            m.set("raise_error_at_min_scale", PyValue::boolean(cfg.raise_error_at_min_scale));
            m.set("dtype", PyValue::global("torch", "float16"));
            return instance("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler", d);
        }
        return instance("deepspeed.runtime.fp16.loss_scaler", "LossScaler", d);
    }
    m.set("cur_scale", floating(1.0));
    m.set("dynamic", PyValue::boolean(false));
    return instance("deepspeed.runtime.fp16.loss_scaler", "LossScaler", d);
}

}  // namespace

// ---- optimizer partitions ---------------------------------------------------------------------------

namespace {

// BMD's parameter group `g` as the base optimizer (apex FusedAdam) saves it.
PyValue adam_param_group(const flags::TrainArgs& a, const FlatGroup& grp, std::size_t g, const AdamOptimizer& opt,
                         const TrainingProgress& p) {
    auto pg = PyValue::dict();
    auto& pm = pg.as_dict();
    pm.set("lr", floating(p.current_lr));
    pm.set("bias_correction", PyValue::boolean(true));
    pm.set("betas", PyValue::tuple({floating(a.optimizer.adam_beta1), floating(a.optimizer.adam_beta2)}));
    pm.set("eps", floating(a.optimizer.adam_eps));
    pm.set("weight_decay", floating(grp.weight_decay ? p.current_weight_decay : 0.0));
    pm.set("step", integer(opt.steps_taken()));
    pm.set("params", PyValue::list({integer(static_cast<std::int64_t>(g))}));
    return pg;
}

// One group's param_slice_mappings: each fragment's place in the partition (DeepSpeed's
// fragment_address), under the parameter's DeepSpeed name.
PyValue slice_mappings(const std::vector<StateSlice>& slices, const std::vector<model::Parameter>& params) {
    auto mapping = ordered_dict();
    for (const auto& s : slices) {
        auto address = PyValue::dict();
        address.as_dict().set("numel", integer(s.where.length));
        address.as_dict().set("start", integer(s.where.part_offset));
        od_set(mapping, ds_param_name(params[s.where.param]), instance("deepspeed.runtime.bf16_optimizer", "fragment_address", address));
    }
    return mapping;
}

// Megatron's DynamicGradScaler.state_dict(), for an exact resume of a non-DeepSpeed fp16 run.
PyValue megatron_grad_scaler(const optim::MegatronGradScaler::State& s) {
    auto gs = PyValue::dict();
    gs.as_dict().set("scale", floating(s.scale));
    gs.as_dict().set("growth_tracker", integer(s.growth_tracker));
    gs.as_dict().set("hysteresis_tracker", integer(s.hysteresis_tracker));
    return gs;
}

}  // namespace

void write_optimizer_file(const std::string& path, const flags::TrainArgs& a, const std::vector<model::Parameter>& params,
                          const AdamOptimizer& opt, const StatePartition& part, const TrainingProgress& p,
                          Snapshot* snapshot) {
    FileBuilder file(path, snapshot);
    const bool bf16 = a.optimizer.bf16;
    auto state = PyValue::dict();
    std::vector<PyValue> param_groups, fp32_groups, mappings, paddings, counts;
    for (std::size_t g = 0; g < part.groups.size(); ++g) {
        std::vector<at::Tensor> master, m1, m2;
        std::int64_t held = 0;
        for (const auto& s : part.slices[g]) {
            master.push_back(s.master);
            m1.push_back(s.exp_avg);
            m2.push_back(s.exp_avg_sq);
            held += s.where.length;
        }
        const std::int64_t padding = part.partition_numel[g] - held;
        auto moments = PyValue::dict();
        moments.as_dict().set("exp_avg", file.flat(m1, padding));
        moments.as_dict().set("exp_avg_sq", file.flat(m2, padding));
        state.as_dict().set(integer(static_cast<std::int64_t>(g)), moments);
        param_groups.push_back(adam_param_group(a, part.groups[g], g, opt, p));
        // The BF16 optimizer keeps the padding in its fp32 partitions; ZeRO 1/2 strips it.
        fp32_groups.push_back(file.flat(master, bf16 ? padding : 0));
        mappings.push_back(slice_mappings(part.slices[g], params));
        paddings.push_back(integer(padding));
        counts.push_back(integer(part.count));
    }
    auto base = PyValue::dict();
    base.as_dict().set("state", state);
    base.as_dict().set("param_groups", PyValue::list(std::move(param_groups)));

    auto osd = PyValue::dict();
    auto& o = osd.as_dict();
    if (!bf16) {
        o.set("loss_scaler", deepspeed_loss_scaler(a, p));
        o.set("dynamic_loss_scale", PyValue::boolean((p.deepspeed_scaler || p.megatron_scaler) &&
                                                     optim::deepspeed_loss_scaler_config(a.optimizer).dynamic));
        o.set("overflow", PyValue::boolean(false));
    }
    o.set("clip_grad", floating(a.optimizer.clip_grad));
    o.set("base_optimizer_state", base);
    o.set("single_partition_of_fp32_groups", PyValue::list(std::move(fp32_groups)));
    if (!bf16) o.set("zero_stage", PyValue::object("deepspeed.runtime.zero.config", "ZeroStageEnum", PyValue::tuple({integer(1)})));
    o.set("group_paddings", PyValue::list(std::move(paddings)));
    o.set("partition_count", PyValue::list(std::move(counts)));
    o.set("ds_version", str(kDeepSpeedFormatVersion));
    o.set("param_slice_mappings", PyValue::list(std::move(mappings)));
    if (p.megatron_scaler) o.set("grad_scaler", megatron_grad_scaler(*p.megatron_scaler));
    auto root = PyValue::dict();
    root.as_dict().set("optimizer_state_dict", osd);
    root.as_dict().set("ds_config", ds_config(a));
    root.as_dict().set("ds_version", str(kDeepSpeedFormatVersion));
    file.finish(root);
}

// ---- model states -----------------------------------------------------------------------------------

int model_parallel_rank(const model::GptModel& model) {
    return model.pipeline_stage().rank * model.tensor_parallel().size + model.tensor_parallel().rank;
}

namespace {

// DeepSpeed's keys (engine._save_checkpoint), pipeline engine: the weights are in the layer files.
void set_deepspeed_keys(ckpt::PyDict& r, const flags::TrainArgs& a, const TrainingProgress& p,
                        const std::vector<model::Parameter>& params) {
    r.set("module", PyValue::none());
    r.set("buffer_names", PyValue::list());
    r.set("optimizer", PyValue::none());
    std::vector<PyValue> shapes;
    for (const auto& g : optimizer_groups(params, 1)) {
        auto od = ordered_dict();
        for (auto i : g.params) od_set(od, ds_param_name(params[i]), torch_size(params[i].tensor.sizes().vec()));
        shapes.push_back(od);
    }
    r.set("param_shapes", PyValue::list(std::move(shapes)));
    r.set("frozen_param_shapes", PyValue::none());
    r.set("shared_params", PyValue::dict());
    r.set("frozen_param_fragments", PyValue::none());
    r.set("lr_scheduler", lr_scheduler_state(p.lr));
    r.set("data_sampler", PyValue::none());
    r.set("random_ltd", PyValue::none());
    r.set("sparse_tensor_module_names", PyValue::object("builtins", "set", PyValue::tuple({PyValue::list()})));
    r.set("skipped_steps", integer(p.skipped_steps));
    r.set("global_steps", integer(p.iteration));
    r.set("global_samples", integer(p.consumed_train_samples));
    r.set("dp_world_size", integer(a.parallel.data_parallel_size));
    r.set("mp_world_size", integer(a.parallel.tensor_model_parallel_size * a.parallel.pipeline_model_parallel_size));
    auto dims = PyValue::dict();
    dims.as_dict().set("pp_degree", integer(a.parallel.pipeline_model_parallel_size));
    dims.as_dict().set("tp_degree", integer(a.parallel.tensor_model_parallel_size));
    r.set("checkpoint_parallel_dimensions", dims);
    r.set("ds_config", ds_config(a));
    r.set("ds_version", str(kDeepSpeedFormatVersion));
}

// Megatron's client state (BMD save_checkpoint), without the RNG states.
void set_megatron_keys(ckpt::PyDict& r, const flags::TrainArgs& a, std::int64_t original_vocab, const model::GptModel& model,
                       const TrainingProgress& p) {
    r.set("args", megatron_args(a, model, p));
    r.set("checkpoint_version", floating(kCheckpointVersion));
    r.set("iteration", integer(p.iteration));
    r.set("tokens", integer(p.consumed_train_tokens));
    auto info = PyValue::dict();
    info.as_dict().set("padded_vocab_size", integer(model.config().padded_vocab_size));
    info.as_dict().set("original_vocab_size", integer(original_vocab));
    r.set("checkpoint_info", info);
}

}  // namespace

void write_mp_rank_file(const std::string& path, const flags::TrainArgs& a, std::int64_t original_vocab,
                        const model::GptModel& model, const TrainingProgress& p, const TiedModule& tied,
                        Snapshot* snapshot) {
    FileBuilder file(path, snapshot);
    auto root = PyValue::dict();
    auto& r = root.as_dict();
    set_deepspeed_keys(r, a, p, tied.params.empty() ? model.parameters() : tied.params);
    set_megatron_keys(r, a, original_vocab, model, p);
    if (!a.checkpoint.no_save_rng) set_rng_states(r, file, a, model);
    r.set("mds_version", str(mds_version()));
    if (!p.mlflow_run_id.empty()) r.set("mds_mlflow_run_id", str(p.mlflow_run_id));
    if (p.hf_vocab_size > 0) r.set("mds_hf_vocab_size", integer(p.hf_vocab_size));
    file.finish(root);
}

void write_layer_files(const std::string& dir, const model::GptModel& model, Snapshot* snapshot) {
    const auto& params = model.parameters();
    std::size_t i = 0;
    while (i < params.size()) {
        const int layer = params[i].layer;
        if (params[i].tied_copy) {  // the first stage saves the tied embeddings (DeepSpeed: layer_01 only)
            ++i;
            continue;
        }
        FileBuilder file((fs::path(dir) / ckpt::ds_layer_file(layer, model.tensor_parallel().rank)).string(), snapshot);
        auto od = ordered_dict();
        for (; i < params.size() && params[i].layer == layer; ++i) od_set(od, params[i].name, file.tensor(params[i].tensor));
        file.finish(od);
    }
}

}  // namespace mds::trainer::checkpoint_detail

namespace mds::trainer {

double megatron_parameters_in_billions_no_embedding(const model::GptModel& model, std::int64_t model_parallel_size) {
    std::int64_t n = 0;
    for (const auto& p : model.parameters()) {
        const bool embedding = p.layer == model::kEmbeddingLayer &&
                               (p.name == "word_embeddings.weight" || p.name == "position_embeddings.weight");
        if (!embedding) n += p.tensor.numel();
    }
    const auto stage = model.pipeline_stage();
    if (stage.last() && !stage.first() && model.config().embed_layernorm) n += 2 * model.config().hidden_size;
    return static_cast<double>(n * model_parallel_size) / 1e9;
}

}  // namespace mds::trainer
