// MergedTensors of a DeepSpeed pipeline checkpoint: the layer files merged over TP
// (DsCheckpoint), the BF16 optimizer states per parameter (Bf16OptimizerShards), and the tied
// embedding's two copies (first and last pipeline stage) as TiedPairs.
#include <algorithm>
#include <cstring>  // memcpy
#include <filesystem>
#include <optional>

#include "ckpt/merged_tensors_internal.h"
#include "mds/ckpt/ds_layout.h"        // ds_optim_file, ds_mp_rank_file
#include "mds/ckpt/tp_reshard.h"       // tp_layout, tp_shard_shape
#include "mds/ckpt/universal.h"        // Bf16OptimizerShards, ds_param_name
#include "mds/util/error.h"

namespace mds::ckpt::merged_detail {
namespace fs = std::filesystem;
namespace {

constexpr const char* kTiedWeight = "tied_modules.embed.word_embeddings.weight";

struct DsEntry {
    int layer = 0;
    std::string name;                     // inside the layer file
    std::optional<OptimState> state;      // an optimizer state of that parameter
    bool step = false;                    // optimizer.step
};

const std::vector<PyValue>& items_of(const PyValue& v, const std::string& where) {
    if (v.type() == PyType::List) return v.as_list();
    if (v.type() == PyType::Tuple) return v.as_tuple();
    throw Error(where + ": expected a list, got " + py_type_name(v.type()));
}

class DsTensors final : public MergedTensors {
public:
    DsTensors(const std::string& path, bool optimizer, bool verify) : ck_(path, "", verify), verify_(verify) {
        const auto& layers = ck_.layers();
        for (std::size_t i = 0; i < layers.size(); ++i) {
            const auto layer = ck_.open_layer(layers[i]);
            for (const auto& name : layer.names()) {
                MergedTensorInfo info;
                info.dtype = layer.dtype(name);
                info.shape = layer.shape(name);
                info.where = ck_.layer_file(layers[i], 0);
                if (i == 0) {
                    info.name = embedding_name(name);
                } else if (i + 1 == layers.size()) {
                    // A last layer file holding the word embedding keeps the LM head's tied copy.
                    if (name == "word_embeddings.weight") {
                        tied_layer_copy_ = true;
                        continue;
                    }
                    info.name = final_name(name);
                } else {
                    info.name = block_name(i - 1, name);
                }
                infos_.push_back(std::move(info));
                entries_.push_back({layers[i], name, std::nullopt, false});
            }
        }
        read_original_vocab();
        open_optimizer(optimizer);
        if (optimizer) list_optimizer_states();
    }

    std::string kind() const override { return "deepspeed"; }
    std::string directory() const override { return ck_.directory(); }
    const std::vector<MergedTensorInfo>& tensors() const override { return infos_; }
    std::optional<std::int64_t> original_vocab_size() const override { return original_vocab_; }
    std::vector<std::string> notes() const override { return notes_; }

    GlobalTensor load(std::size_t index) override {
        const DsEntry& e = entries_.at(index);
        if (e.step) return step_tensor();
        if (!e.state) return layer(e.layer).merge(e.name);
        const auto& info = infos_[index];
        const TpLayout layout = tp_layout(e.name, glu());
        const auto slice = tp_shard_shape(layout, info.shape, ck_.tp(), info.where);
        GlobalTensor g;
        g.dtype = DType::F32;
        g.shape = info.shape;
        const auto values = optim_->global_state(ds_param_name(e.layer, e.name, ck_.layers().front()), *e.state, layout, slice,
                                                 ck_.checkpoint_version(), ck_.int_arg("num_attention_heads"));
        g.data.resize(values.size() * sizeof(float));
        std::memcpy(g.data.data(), values.data(), g.data.size());
        return g;
    }

    std::vector<TiedPair> tied_pairs(bool optimizer_states) const override {
        std::vector<TiedPair> pairs;
        const auto& layers = ck_.layers();
        if (tied_layer_copy_)
            pairs.push_back({"word_embeddings.weight", ck_.layer_file(layers.front(), 0), ck_.layer_file(layers.back(), 0),
                             [this] { return ck_.open_layer(ck_.layers().front()).merge("word_embeddings.weight"); },
                             [this] { return ck_.open_layer(ck_.layers().back()).merge("word_embeddings.weight"); }});
        if (!optim_ || ck_.pp() < 2 || !last_stage_tied_) return pairs;
        const int last = ck_.pp() - 1;
        for (OptimState s : kOptimStates) {
            if (s != OptimState::FP32 && !optimizer_states) continue;
            for (int r = 0; r < ck_.tp(); ++r) {
                const std::string label = std::string(kTiedWeight) + ":" + optim_state_name(s) +
                                          (ck_.tp() > 1 ? " (TP rank " + std::to_string(r) + ")" : "");
                pairs.push_back({label, stage_files(0, r), stage_files(last, r), [this, s, r] { return tied_slice(0, r, s); },
                                 [this, s, r, last] { return tied_slice(last, r, s); }});
            }
        }
        return pairs;
    }

private:
    DsCheckpoint ck_;
    bool verify_ = true;
    std::vector<MergedTensorInfo> infos_;
    std::vector<DsEntry> entries_;
    std::optional<std::int64_t> original_vocab_;
    std::unique_ptr<Bf16OptimizerShards> optim_;
    bool tied_layer_copy_ = false, last_stage_tied_ = false;
    std::vector<std::string> notes_;
    std::optional<DsCheckpoint::Layer> open_;
    int open_index_ = -1;

    const DsCheckpoint::Layer& layer(int index) {
        if (open_index_ != index) {
            open_.reset();
            open_.emplace(ck_.open_layer(index));
            open_index_ = index;
        }
        return *open_;
    }

    bool glu() const {
        const auto* v = ck_.arg("glu_activation");
        return v && !v->is_none();
    }

    void read_original_vocab() {
        const TorchFile mp((fs::path(ck_.directory()) / ds_mp_rank_file(0)).string(), verify_);
        const auto* info = mp.root().find("checkpoint_info");
        if (!info || info->type() != PyType::Dict) return;
        const auto* v = info->find("original_vocab_size");
        if (v && v->type() == PyType::Int) original_vocab_ = v->as_int();
    }

    // The BF16 optimizer files: needed with --optimizer (errors go up), else read when present for
    // the tied-copy check only (an unreadable set is a note, not a failure of the weights' diff).
    void open_optimizer(bool required) {
        bool any = false, bf16 = false;
        for (const auto& e : fs::directory_iterator(ck_.directory()))
            if (const auto f = parse_ds_optim_file(e.path().filename().string())) {
                any = true;
                bf16 = bf16 || f->bf16;
            }
        if (required && !bf16)
            throw Error(ck_.directory() + ": --optimizer reads BF16 optimizer files (bf16_zero_pp_rank_*_mp_rank_*_optim_states.pt); " +
                        (any ? "these are ZeRO files of another layout (zero_pp_rank_*: fp16 / fp32 runs)" : "there are none (a weights-only checkpoint?)"));
        if (!required && !bf16) {
            if (any && ck_.pp() > 1) notes_.push_back(ck_.directory() + ": tied embedding copies not checked (only BF16 optimizer files are read)");
            return;
        }
        try {
            optim_ = std::make_unique<Bf16OptimizerShards>(ck_.directory(), ck_.tp(), ck_.pp(), verify_);
        } catch (const Error& e) {
            if (required) throw;
            notes_.push_back(std::string("tied embedding copies not checked: ") + e.what());
            return;
        }
        if (ck_.pp() > 1) last_stage_tied_ = mapping_of(ck_.pp() - 1, 0, 0, kTiedWeight).has_value();
    }

    void list_optimizer_states() {
        const std::size_t weights = infos_.size();
        const int embedding = ck_.layers().front();
        for (std::size_t i = 0; i < weights; ++i) {
            const std::string ds_name = ds_param_name(entries_[i].layer, entries_[i].name, embedding);
            if (!optim_->group_of().count(ds_name)) {
                notes_.push_back(ck_.directory() + ": no optimizer state for " + infos_[i].name + " (" + ds_name + ")");
                continue;
            }
            for (OptimState s : kOptimStates) {
                MergedTensorInfo info = infos_[i];
                info.name += std::string(":") + optim_state_name(s);
                info.dtype = DType::F32;
                info.where = stage_files(-1, -1);
                infos_.push_back(std::move(info));
                entries_.push_back({entries_[i].layer, entries_[i].name, s, false});
            }
        }
        MergedTensorInfo step{"optimizer.step", DType::I64, {}, stage_files(0, 0)};
        infos_.push_back(step);
        entries_.push_back({0, "", std::nullopt, true});
    }

    std::string stage_files(int stage, int tp_rank) const {
        const std::string d = ck_.directory() + "/bf16_zero_pp_rank_*_mp_rank_";
        if (stage < 0) return d + "*_optim_states.pt";
        std::string mp = std::to_string(stage * ck_.tp() + tp_rank);
        if (mp.size() < 2) mp = "0" + mp;  // DeepSpeed's {mp:02d}
        return d + mp + "_optim_states.pt";
    }

    // Where parameter `name` sits in the flat partition of group g of one rank's file:
    // (group, numel, start), or nullopt when that file holds no piece of it.
    std::optional<std::tuple<int, std::int64_t, std::int64_t>> mapping_of(int stage, int tp_rank, int dp_rank, const std::string& name) const {
        const auto& osd = optim_->optimizer_state_dict(stage, tp_rank, dp_rank);
        const std::string where = optim_->file(stage, tp_rank, dp_rank).path();
        const auto& groups = items_of(osd.get("param_slice_mappings"), where + ": param_slice_mappings");
        for (std::size_t g = 0; g < groups.size(); ++g)
            if (const auto* v = groups[g].ordered_dict_items().find(name)) {
                const auto [numel, start] = ds_fragment_address(*v, where + ": " + name);
                return std::make_tuple(static_cast<int>(g), numel, start);
            }
        return std::nullopt;
    }

    // One TP rank's flat slice of the tied word embedding's `state` on pipeline stage `stage`: its
    // fragments joined in data-parallel order.
    GlobalTensor tied_slice(int stage, int tp_rank, OptimState state) const {
        GlobalTensor g;
        g.dtype = DType::F32;
        for (int d = 0; d < optim_->dp(); ++d) {
            const auto m = mapping_of(stage, tp_rank, d, kTiedWeight);
            if (!m) continue;
            const auto [group, numel, start] = *m;
            const TorchFile& file = optim_->file(stage, tp_rank, d);
            const auto& osd = optim_->optimizer_state_dict(stage, tp_rank, d);
            const std::string where = file.path() + ": group " + std::to_string(group);
            const PyValue* t = nullptr;
            if (state == OptimState::FP32) {
                t = &items_of(osd.get("single_partition_of_fp32_groups"), where).at(static_cast<std::size_t>(group));
            } else {
                const auto* gs = osd.get("base_optimizer_state").get("state").as_dict().find(PyValue::integer(group));
                if (!gs) throw Error(where + ": no base_optimizer_state['state'][" + std::to_string(group) + "]");
                t = &gs->get(optim_state_name(state));
            }
            const TorchTensor tensor = file.tensor(*t, optim_state_name(state));
            if (tensor.dtype != DType::F32 || start < 0 || numel < 0 || start + numel > tensor.numel())
                throw Error(where + ": fragment of " + kTiedWeight + " [" + std::to_string(start) + ", +" + std::to_string(numel) +
                            ") outside the fp32 partition of " + std::to_string(tensor.numel()) + " elements");
            const auto bytes = tensor.bytes();
            g.data.insert(g.data.end(), bytes.begin() + start * 4, bytes.begin() + (start + numel) * 4);
        }
        g.shape = {static_cast<std::int64_t>(g.data.size() / 4)};
        return g;
    }

    // The optimizer's step: param_groups[0]['step'] (DeepSpeed's fused Adam), else state[0]['step'].
    GlobalTensor step_tensor() const {
        const auto& osd = optim_->optimizer_state_dict(0, 0, 0);
        const std::string where = optim_->file(0, 0, 0).path();
        const auto& base = osd.get("base_optimizer_state");
        const PyValue* step = nullptr;
        if (const auto* groups = base.find("param_groups"); groups && !items_of(*groups, where).empty())
            step = items_of(*groups, where)[0].find("step");
        if (!step)
            if (const auto* gs = base.get("state").as_dict().find(PyValue::integer(0))) step = gs->find("step");
        if (!step) throw Error(where + ": no optimizer step (base_optimizer_state param_groups[0]['step'] or state[0]['step'])");
        double value = 0;
        if (step->type() == PyType::Int) value = static_cast<double>(step->as_int());
        else if (step->type() == PyType::Float) value = step->as_float();
        else if (TorchFile::is_tensor(*step)) {
            const auto t = optim_->file(0, 0, 0).tensor(*step, "step");
            const auto b = t.gather();
            if (t.numel() != 1 || (t.dtype != DType::F32 && t.dtype != DType::I64)) throw Error(where + ": step is not a scalar");
            if (t.dtype == DType::F32) value = load_float(t.dtype, b.data());
            else {
                std::int64_t v = 0;
                std::memcpy(&v, b.data(), 8);
                value = static_cast<double>(v);
            }
        } else {
            throw Error(where + ": the optimizer step is " + step->repr(60) + ", expected a number");
        }
        GlobalTensor g;
        g.dtype = DType::I64;
        const auto v = static_cast<std::int64_t>(value);
        g.data.resize(8);
        std::memcpy(g.data.data(), &v, 8);
        return g;
    }
};

}  // namespace

std::unique_ptr<MergedTensors> open_deepspeed(const std::string& path, bool optimizer, bool verify) {
    return std::make_unique<DsTensors>(path, optimizer, verify);
}

}  // namespace mds::ckpt::merged_detail
