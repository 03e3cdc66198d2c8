// MergedTensors of a DeepSpeed pipeline checkpoint: the layer files merged over TP
// (DsCheckpoint), the optimizer states per parameter (BF16 optimizer files: Bf16OptimizerShards;
// ZeRO stage 1/2 files of fp16 / fp32 runs: ZeroShards below), and the tied embedding's two copies
// (first and last pipeline stage) as TiedPairs.
#include <algorithm>
#include <array>
#include <cstring>  // memcpy
#include <filesystem>
#include <map>
#include <optional>

#include "ckpt/merged_tensors_internal.h"
#include "mds/ckpt/ds_layout.h"        // ds_optim_file, ds_mp_rank_file
#include "mds/ckpt/ds_optimizer_layout.h"  // ds_optimizer_layout
#include "mds/ckpt/safetensors.h"      // dtype_name
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

// The element count of a param_shapes entry: torch.Size((d0, d1, ...)) (or a plain tuple / list).
std::int64_t shape_numel(const PyValue& v, const std::string& where) {
    const PyValue* dims = &v;
    if (v.type() == PyType::Object) {
        const auto& args = v.as_object().args;
        if (args.type() != PyType::Tuple || args.as_tuple().size() != 1) throw Error(where + ": unreadable shape " + v.repr(80));
        dims = &args.as_tuple()[0];
    }
    std::int64_t n = 1;
    for (const auto& d : items_of(*dims, where + ": shape")) n *= d.as_int();
    return n;
}

// DeepSpeed's ZeRO stage 1/2 optimizer files (fp16 / fp32 runs: zero_pp_rank_{dp}_mp_rank_{mp}_
// optim_states.pt, stage_1_and_2.py state_dict): per group the rank's flat fp32 partition
// (single_partition_of_fp32_groups, its padding stripped) and the base optimizer's exp_avg /
// exp_avg_sq (the torch optimizer's state_dict, padding kept; or, from an elastic checkpoint, a
// list of per-group states without it). They are cut back into parameters by DeepSpeed's flat
// layout (ds_optimizer_layout.h) of the groups in each mp_rank file's param_shapes; the files'
// param_slice_mappings, when present, must agree with it.
class ZeroShards {
public:
    ZeroShards(const DsCheckpoint& ck, bool verify) : dir_(ck.directory()), tp_(ck.tp()), pp_(ck.pp()) {
        int files = 0, max_dp = -1;
        for (const auto& e : fs::directory_iterator(dir_))
            if (const auto f = parse_ds_optim_file(e.path().filename().string()); f && !f->bf16) {
                ++files;
                max_dp = std::max(max_dp, f->dp_rank);
            }
        dp_ = max_dp + 1;
        if (files == 0) throw Error(dir_ + ": no zero_pp_rank_*_mp_rank_*_optim_states.pt files");
        if (files != dp_ * tp_ * pp_)
            throw Error(dir_ + ": " + std::to_string(files) + " ZeRO optimizer files; expected " + std::to_string(dp_) + " data-parallel x " +
                        std::to_string(tp_ * pp_) + " model-parallel ranks = " + std::to_string(dp_ * tp_ * pp_));
        stages_.resize(static_cast<std::size_t>(pp_ * tp_));
        files_.resize(static_cast<std::size_t>(pp_ * tp_ * dp_));
        for (int s = 0; s < pp_; ++s)
            for (int r = 0; r < tp_; ++r) {
                Stage& st = stages_[static_cast<std::size_t>(s * tp_ + r)];
                read_layout(st, s * tp_ + r, verify);
                for (int d = 0; d < dp_; ++d) read_file(st, s, r, d, verify);
                for (std::size_t i = 0; i < st.names.size(); ++i) {
                    if (s > 0 && st.names[i].starts_with("tied_modules.")) continue;  // the stage-0 copy is the one read (§9)
                    const auto [it, fresh] = owner_.try_emplace(st.names[i], s);
                    if (!fresh && it->second != s)
                        throw Error(dir_ + ": " + st.names[i] + " in the optimizer groups of stages " + std::to_string(it->second) + " and " +
                                    std::to_string(s));
                    group_of_[st.names[i]] = st.group[i];
                }
            }
    }

    int dp() const { return dp_; }
    const std::map<std::string, int>& group_of() const { return group_of_; }
    const TorchFile& file(int stage, int tp_rank, int dp_rank) const { return *at(stage, tp_rank, dp_rank).file; }
    const PyValue& optimizer_state_dict(int stage, int tp_rank, int dp_rank) const {
        return file(stage, tp_rank, dp_rank).root().get("optimizer_state_dict");
    }
    bool holds(int stage, int tp_rank, const std::string& name) const {
        return stages_[static_cast<std::size_t>(stage * tp_ + tp_rank)].index.count(name) > 0;
    }

    // One TP rank's flat copy of `name`'s `state` on pipeline stage `stage`: its fragments joined in
    // data-parallel order.
    std::vector<float> rank_slice(int stage, int tp_rank, const std::string& name, OptimState state) const {
        const Stage& st = stages_[static_cast<std::size_t>(stage * tp_ + tp_rank)];
        const auto it = st.index.find(name);
        if (it == st.index.end()) throw Error(st.mp_file + ": " + name + " is in no optimizer group of param_shapes");
        const std::size_t i = it->second;
        const auto& g = st.layout[static_cast<std::size_t>(st.group[i])];
        const auto k = static_cast<std::size_t>(std::find(g.params.begin(), g.params.end(), i) - g.params.begin());
        std::vector<float> out(static_cast<std::size_t>(st.numel[i]));
        std::int64_t filled = 0;
        for (const auto& [rank, f] : g.pieces_of(k)) {
            const File& file = at(stage, tp_rank, rank);
            const TorchTensor& t = file.states[static_cast<std::size_t>(state)][static_cast<std::size_t>(st.group[i])];
            if (f.part_offset + f.length > t.numel() || f.offset + f.length > st.numel[i])
                throw Error(file.file->path() + ": group " + std::to_string(st.group[i]) + ": fragment of " + name + " [" +
                            std::to_string(f.part_offset) + ", +" + std::to_string(f.length) + ") outside its " + optim_state_name(state) +
                            " partition of " + std::to_string(t.numel()) + " elements");
            std::memcpy(out.data() + f.offset, t.bytes().data() + f.part_offset * 4, static_cast<std::size_t>(f.length) * 4);
            filled += f.length;
        }
        if (filled != st.numel[i])
            throw Error(dir_ + ": the fragments of " + name + " on stage " + std::to_string(stage) + ", tensor-parallel rank " +
                        std::to_string(tp_rank) + " hold " + std::to_string(filled) + " of its " + std::to_string(st.numel[i]) + " elements");
        return out;
    }

    // The global fp32 tensor of one state of `name`: the TP ranks' slices (fused-QKV rows normalised
    // from `qkv_version`) merged by `layout`, as Bf16OptimizerShards::global_state does.
    std::vector<float> global_state(const std::string& name, OptimState state, const TpLayout& layout,
                                     const std::vector<std::int64_t>& slice_shape, double qkv_version, std::int64_t heads) const {
        const auto owner = owner_.find(name);
        if (owner == owner_.end()) throw Error(dir_ + ": parameter " + name + " is in no ZeRO optimizer group");
        std::int64_t numel = 1;
        for (auto d : slice_shape) numel *= d;
        const bool qkv = qkv_version < 2.0 && name.find("query_key_value.") != std::string::npos;
        std::vector<std::vector<float>> slices;
        for (int r = 0; r < tp_; ++r) {
            auto slice = rank_slice(owner->second, r, name, state);
            if (static_cast<std::int64_t>(slice.size()) != numel)
                throw Error(stages_[static_cast<std::size_t>(owner->second * tp_ + r)].mp_file + ": param_shapes gives " + name + " " +
                            std::to_string(slice.size()) + " elements; its layer file shard has " + std::to_string(numel));
            if (qkv) {
                std::vector<std::byte> rows(reinterpret_cast<const std::byte*>(slice.data()),
                                            reinterpret_cast<const std::byte*>(slice.data() + slice.size()));
                qkv_rows_to_v2(rows, heads / tp_, static_cast<std::size_t>(numel / slice_shape[0]) * 4, qkv_version);
                std::memcpy(slice.data(), rows.data(), rows.size());
            }
            slices.push_back(std::move(slice));
        }
        return tp_merge_fp32(layout, slices, slice_shape);
    }

private:
    struct Stage {  // one model-parallel rank (stage x TP rank)
        std::string mp_file;
        std::vector<std::string> names;    // param_shapes' parameters, group by group in flat order
        std::vector<std::int64_t> numel;
        std::vector<int> group;
        std::map<std::string, std::size_t> index;
        std::vector<DsFlatGroup> layout;
    };
    struct File {
        std::unique_ptr<TorchFile> file;
        std::array<std::vector<TorchTensor>, 3> states;  // per OptimState, per group: the partition
    };

    const File& at(int stage, int tp_rank, int dp_rank) const {
        return files_.at(static_cast<std::size_t>((stage * tp_ + tp_rank) * dp_ + dp_rank));
    }

    // The groups of one model-parallel rank from its mp_rank file's param_shapes (DeepSpeed's
    // bit16_groups in flat order, as zero_to_fp32.py reads them), laid out over dp_ ranks.
    void read_layout(Stage& st, int mp_rank, bool verify) {
        st.mp_file = (fs::path(dir_) / ds_mp_rank_file(mp_rank)).string();
        const TorchFile mp(st.mp_file, verify);
        const auto* shapes = mp.root().find("param_shapes");
        if (!shapes || shapes->is_none())
            throw Error(st.mp_file + ": no param_shapes, so the flat ZeRO optimizer partitions cannot be cut into parameters");
        std::vector<DsParamGroup> groups;
        const auto& list = items_of(*shapes, st.mp_file + ": param_shapes");
        for (std::size_t g = 0; g < list.size(); ++g) {
            DsParamGroup group;
            for (const auto& [k, v] : list[g].ordered_dict_items().items()) {
                const std::string& name = k.as_str();
                if (!st.index.emplace(name, st.names.size()).second)
                    throw Error(st.mp_file + ": param_shapes names " + name + " twice");
                group.params.push_back(st.names.size());
                st.names.push_back(name);
                st.numel.push_back(shape_numel(v, st.mp_file + ": param_shapes " + name));
                st.group.push_back(static_cast<int>(g));
            }
            groups.push_back(std::move(group));
        }
        st.layout = ds_optimizer_layout(groups, st.numel, dp_);
    }

    void read_file(const Stage& st, int stage, int tp_rank, int dp_rank, bool verify) {
        const std::string path = (fs::path(dir_) / ds_optim_file(false, dp_rank, stage * tp_ + tp_rank)).string();
        if (!fs::exists(path)) throw Error(path + ": missing (data-parallel rank " + std::to_string(dp_rank) + " of " + std::to_string(dp_) + ")");
        File& f = files_[static_cast<std::size_t>((stage * tp_ + tp_rank) * dp_ + dp_rank)];
        f.file = std::make_unique<TorchFile>(path, verify);
        const auto* osd = f.file->root().find("optimizer_state_dict");
        if (!osd || osd->type() != PyType::Dict) throw Error(path + ": no optimizer_state_dict dict");
        const auto* singles = osd->find("single_partition_of_fp32_groups");
        if (!singles) {
            if (osd->find("local_sub_partitions_of_fp32_groups"))
                throw Error(path + ": the layout of DeepSpeed's older ZeRO stage-1 optimizer (local_sub_partitions_of_fp32_groups) "
                                   "is not read; only single_partition_of_fp32_groups (stage_1_and_2.py)");
            throw Error(path + ": no single_partition_of_fp32_groups (not a ZeRO stage 1/2 optimizer file?)");
        }
        const auto& base = osd->get("base_optimizer_state");
        const auto& fp32 = items_of(*singles, path + ": single_partition_of_fp32_groups");
        if (fp32.size() != st.layout.size())
            throw Error(path + ": " + std::to_string(fp32.size()) + " fp32 partitions; " + st.mp_file + " param_shapes has " +
                        std::to_string(st.layout.size()) + " groups");
        const PyValue* mappings = osd->find("param_slice_mappings");
        for (std::size_t g = 0; g < fp32.size(); ++g) {
            const std::string gw = path + ": group " + std::to_string(g);
            const PyValue* gs = nullptr;
            if (base.type() == PyType::Dict) {  // the torch optimizer's state_dict
                gs = base.get("state").as_dict().find(PyValue::integer(static_cast<std::int64_t>(g)));
                if (!gs) throw Error(gw + ": no base_optimizer_state['state'][" + std::to_string(g) + "]");
            } else {  // elastic: one lean state per group
                const auto& per_group = items_of(base, path + ": base_optimizer_state");
                if (g >= per_group.size()) throw Error(gw + ": no base_optimizer_state[" + std::to_string(g) + "]");
                gs = &per_group[g];
            }
            f.states[0].push_back(f.file->tensor(fp32[g], "single_partition_of_fp32_groups"));
            f.states[1].push_back(f.file->tensor(gs->get("exp_avg"), "exp_avg"));
            f.states[2].push_back(f.file->tensor(gs->get("exp_avg_sq"), "exp_avg_sq"));
            const DsFlatGroup& layout = st.layout[g];
            const std::int64_t data = layout.data_in_partition(dp_rank);
            for (std::size_t s = 0; s < 3; ++s) {
                const TorchTensor& t = f.states[s].back();
                // Padding stripped (fp32 partitions, elastic moments) or kept (the torch optimizer's moments).
                if (t.dtype != DType::F32 || !t.contiguous() || (t.numel() != data && t.numel() != layout.partition))
                    throw Error(gw + ": " + optim_state_name(kOptimStates[s]) + " is a " + dtype_name(t.dtype) + " tensor of " +
                                std::to_string(t.numel()) + " elements; DeepSpeed's layout over " + std::to_string(dp_) +
                                " data-parallel ranks of " + st.mp_file + " param_shapes gives a contiguous fp32 partition of " +
                                std::to_string(data) + " (" + std::to_string(layout.partition) + " with padding)");
            }
            if (mappings) check_mappings(list_at(*mappings, g, gw), layout, st, dp_rank, gw);
        }
    }

    static const PyValue& list_at(const PyValue& list, std::size_t g, const std::string& where) {
        const auto& items = items_of(list, where + ": param_slice_mappings");
        if (g >= items.size()) throw Error(where + ": no param_slice_mappings entry");
        return items[g];
    }

    // The file's own param_slice_mappings (DeepSpeed 0.7 and later) against the computed layout.
    static void check_mappings(const PyValue& m, const DsFlatGroup& layout, const Stage& st, int dp_rank, const std::string& where) {
        const auto& frags = layout.fragments[static_cast<std::size_t>(dp_rank)];
        const auto& items = m.ordered_dict_items();
        for (const auto& f : frags) {
            const std::string& name = st.names[f.param];
            const auto* v = items.find(name);
            if (!v) throw Error(where + ": param_slice_mappings has no " + name + ", which DeepSpeed's layout places in this partition");
            const auto [numel, start] = ds_fragment_address(*v, where + ": " + name);
            if (numel != f.length || start != f.part_offset)
                throw Error(where + ": param_slice_mappings places " + name + " at [" + std::to_string(start) + ", +" + std::to_string(numel) +
                            "); DeepSpeed's layout of param_shapes at [" + std::to_string(f.part_offset) + ", +" + std::to_string(f.length) + ")");
        }
        if (items.size() != frags.size())
            throw Error(where + ": param_slice_mappings has " + std::to_string(items.size()) + " fragments; DeepSpeed's layout of param_shapes " +
                        std::to_string(frags.size()));
    }

    std::string dir_;
    int tp_ = 0, pp_ = 0, dp_ = 0;
    std::vector<Stage> stages_;  // index stage * tp + tp_rank
    std::vector<File> files_;    // index (stage * tp + tp_rank) * dp + dp_rank
    std::map<std::string, int> owner_;     // parameter -> the stage whose partitions are read
    std::map<std::string, int> group_of_;
};

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
        const std::string ds_name = ds_param_name(e.layer, e.name, ck_.layers().front());
        const auto values = zero_ ? zero_->global_state(ds_name, *e.state, layout, slice, ck_.checkpoint_version(), ck_.int_arg("num_attention_heads"))
                                  : optim_->global_state(ds_name, *e.state, layout, slice,
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
        if ((!optim_ && !zero_) || ck_.pp() < 2 || !last_stage_tied_) return pairs;
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
    std::unique_ptr<Bf16OptimizerShards> optim_;  // BF16 optimizer files, or
    std::unique_ptr<ZeroShards> zero_;            // ZeRO stage 1/2 files (fp16 / fp32 runs)
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
        if (required && !any) {
            // DeepSpeed's FP16_Optimizer (fp16 at ZeRO stage 0) keeps its state in the mp_rank files' 'optimizer'.
            const TorchFile mp((fs::path(ck_.directory()) / ds_mp_rank_file(0)).string(), verify_);
            const auto* o = mp.root().find("optimizer");
            if (o && !o->is_none())
                throw Error(mp.path() + ": the optimizer state is inside the mp_rank files ('optimizer': DeepSpeed's FP16_Optimizer at "
                                        "ZeRO stage 0), which --optimizer does not read; it reads [bf16_]zero_pp_rank_*_mp_rank_*_optim_states.pt");
            throw Error(ck_.directory() + ": --optimizer reads the optimizer files ([bf16_]zero_pp_rank_*_mp_rank_*_optim_states.pt); "
                                          "there are none (a weights-only checkpoint?)");
        }
        if (!any || (!required && ck_.pp() < 2)) return;  // without a tied copy to check, nothing to read
        try {
            if (bf16) optim_ = std::make_unique<Bf16OptimizerShards>(ck_.directory(), ck_.tp(), ck_.pp(), verify_);
            else zero_ = std::make_unique<ZeroShards>(ck_, verify_);
        } catch (const Error& e) {
            if (required) throw;
            notes_.push_back(std::string("tied embedding copies not checked: ") + e.what());
            return;
        }
        if (ck_.pp() > 1)
            last_stage_tied_ = zero_ ? zero_->holds(ck_.pp() - 1, 0, kTiedWeight) : mapping_of(ck_.pp() - 1, 0, 0, kTiedWeight).has_value();
    }

    void list_optimizer_states() {
        const std::size_t weights = infos_.size();
        const int embedding = ck_.layers().front();
        for (std::size_t i = 0; i < weights; ++i) {
            const std::string ds_name = ds_param_name(entries_[i].layer, entries_[i].name, embedding);
            if (!(zero_ ? zero_->group_of() : optim_->group_of()).count(ds_name)) {
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
        const std::string d = ck_.directory() + (zero_ ? "/zero_pp_rank_*_mp_rank_" : "/bf16_zero_pp_rank_*_mp_rank_");
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
        if (zero_) {
            const auto v = zero_->rank_slice(stage, tp_rank, kTiedWeight, state);
            g.data.resize(v.size() * 4);
            std::memcpy(g.data.data(), v.data(), g.data.size());
            g.shape = {static_cast<std::int64_t>(v.size())};
            return g;
        }
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
    // An elastic ZeRO file: base_optimizer_state_step, else base_optimizer_state[0]['step'].
    GlobalTensor step_tensor() const {
        const TorchFile& file = zero_ ? zero_->file(0, 0, 0) : optim_->file(0, 0, 0);
        const auto& osd = zero_ ? zero_->optimizer_state_dict(0, 0, 0) : optim_->optimizer_state_dict(0, 0, 0);
        const std::string where = file.path();
        const auto& base = osd.get("base_optimizer_state");
        const PyValue* step = nullptr;
        if (base.type() != PyType::Dict) {
            step = osd.find("base_optimizer_state_step");
            if (!step && !items_of(base, where + ": base_optimizer_state").empty()) step = items_of(base, where)[0].find("step");
        } else {
            if (const auto* groups = base.find("param_groups"); groups && !items_of(*groups, where).empty())
                step = items_of(*groups, where)[0].find("step");
            if (!step)
                if (const auto* gs = base.get("state").as_dict().find(PyValue::integer(0))) step = gs->find("step");
        }
        if (!step) throw Error(where + ": no optimizer step (base_optimizer_state param_groups[0]['step'] or state[0]['step'])");
        double value = 0;
        if (step->type() == PyType::Int) value = static_cast<double>(step->as_int());
        else if (step->type() == PyType::Float) value = step->as_float();
        else if (TorchFile::is_tensor(*step)) {
            const auto t = file.tensor(*step, "step");
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
