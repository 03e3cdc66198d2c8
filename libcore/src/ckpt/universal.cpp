#include "mds/ckpt/universal.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "mds/ckpt/ds_layout.h"
#include "mds/util/error.h"

namespace mds::ckpt {
namespace fs = std::filesystem;

const char* optim_state_name(OptimState s) {
    switch (s) {
    case OptimState::ExpAvg: return "exp_avg";
    case OptimState::ExpAvgSq: return "exp_avg_sq";
    case OptimState::FP32: break;
    }
    return "fp32";
}

std::string ds_param_name(int layer, const std::string& name, int embedding_layer) {
    if (layer == embedding_layer) return "tied_modules.embed." + name;
    return std::to_string(layer) + "." + name;
}

namespace {

const PyValue& need(const PyValue& dict, const char* key, const std::string& where) {
    if (dict.type() != PyType::Dict) throw Error(where + ": expected a dict, got " + py_type_name(dict.type()));
    const auto* v = dict.find(key);
    if (!v) throw Error(where + ": no '" + std::string(key) + "' (not a BF16 optimizer file?)");
    return *v;
}

const PyValue& list_item(const PyValue& list, std::size_t i, const std::string& where) {
    if (list.type() != PyType::List && list.type() != PyType::Tuple) throw Error(where + ": expected a list, got " + py_type_name(list.type()));
    const auto& items = list.type() == PyType::List ? list.as_list() : list.as_tuple();
    if (i >= items.size()) throw Error(where + ": " + std::to_string(items.size()) + " entries, expected more than " + std::to_string(i));
    return items[i];
}

std::size_t list_size(const PyValue& list, const std::string& where) {
    if (list.type() == PyType::List) return list.as_list().size();
    if (list.type() == PyType::Tuple) return list.as_tuple().size();
    throw Error(where + ": expected a list, got " + py_type_name(list.type()));
}

}  // namespace

std::pair<std::int64_t, std::int64_t> ds_fragment_address(const PyValue& v, const std::string& where) {
    const PyValue* state = &v;
    if (v.type() == PyType::Object) state = &v.as_object().state;
    if (state->type() == PyType::Dict) return {state->get("numel").as_int(), state->get("start").as_int()};
    if (v.type() == PyType::Object && v.as_object().args.type() == PyType::Tuple && v.as_object().args.as_tuple().size() == 2)
        return {v.as_object().args.as_tuple()[0].as_int(), v.as_object().args.as_tuple()[1].as_int()};
    throw Error(where + ": unreadable fragment_address " + v.repr(120));
}

Bf16OptimizerShards::Bf16OptimizerShards(const std::string& dir, int tp, int pp, bool verify) : dir_(dir), tp_(tp), pp_(pp) {
    int bf16_files = 0, fp16_files = 0;
    int max_dp = -1;
    for (const auto& e : fs::directory_iterator(dir)) {
        const auto name = e.path().filename().string();
        if (const auto f = parse_ds_optim_file(name)) {
            (f->bf16 ? bf16_files : fp16_files)++;
            if (f->bf16) max_dp = std::max(max_dp, f->dp_rank);
        }
    }
    if (bf16_files == 0) {
        if (fp16_files > 0)
            throw Error(dir + ": the optimizer files are fp16 ZeRO shards (zero_pp_rank_*); only BF16 optimizer files "
                              "(bf16_zero_pp_rank_*) can be resharded. Reshape without the optimizer states instead");
        throw Error(dir + ": no bf16_zero_pp_rank_*_optim_states.pt files (a weights-only checkpoint?)");
    }
    dp_ = max_dp + 1;
    if (bf16_files != dp_ * tp * pp)
        throw Error(dir + ": " + std::to_string(bf16_files) + " BF16 optimizer files; expected " + std::to_string(dp_) + " data-parallel x " +
                    std::to_string(tp * pp) + " model-parallel ranks = " + std::to_string(dp_ * tp * pp));
    files_.resize(static_cast<std::size_t>(pp * tp * dp_));
    for (int s = 0; s < pp; ++s)
        for (int r = 0; r < tp; ++r)
            for (int d = 0; d < dp_; ++d) {
                const std::string path = (fs::path(dir) / ds_optim_file(true, d, s * tp + r)).string();
                if (!fs::exists(path)) throw Error(path + ": missing (data-parallel rank " + std::to_string(d) + " of " + std::to_string(dp_) + ")");
                File& f = files_[static_cast<std::size_t>((s * tp + r) * dp_ + d)];
                f.file = std::make_unique<TorchFile>(path, verify);
                const auto& osd = need(f.file->root(), "optimizer_state_dict", path);
                const auto& singles = need(osd, "single_partition_of_fp32_groups", path);
                const auto& base = need(osd, "base_optimizer_state", path);
                const auto& state = need(base, "state", path);
                if (!osd.find("param_slice_mappings"))
                    throw Error(path + ": no param_slice_mappings (DeepSpeed releases before 0.7 did not write them), so the flat "
                                       "partitions cannot be mapped to parameters; reshape without the optimizer states");
                const auto& mappings = need(osd, "param_slice_mappings", path);
                const int g_count = static_cast<int>(list_size(singles, path + ": single_partition_of_fp32_groups"));
                if (groups_ == 0) groups_ = g_count;
                if (g_count != groups_ || static_cast<int>(list_size(mappings, path + ": param_slice_mappings")) != groups_)
                    throw Error(path + ": " + std::to_string(g_count) + " parameter groups; other files have " + std::to_string(groups_));
                for (int g = 0; g < groups_; ++g) {
                    const std::string gw = path + ": group " + std::to_string(g);
                    const auto* gs = state.as_dict().find(PyValue::integer(g));
                    if (!gs) throw Error(gw + ": no base_optimizer_state['state'][" + std::to_string(g) + "]");
                    f.states[0].push_back(f.file->tensor(list_item(singles, static_cast<std::size_t>(g), gw), "single_partition_of_fp32_groups"));
                    f.states[1].push_back(f.file->tensor(need(*gs, "exp_avg", gw), "exp_avg"));
                    f.states[2].push_back(f.file->tensor(need(*gs, "exp_avg_sq", gw), "exp_avg_sq"));
                    for (const auto& st : f.states) {
                        const auto& t = st.back();
                        if (t.dtype != DType::F32 || !t.contiguous() || t.numel() != f.states[0].back().numel())
                            throw Error(gw + ": optimizer states must be contiguous fp32 tensors of one size (fp32 partition: " +
                                        std::to_string(f.states[0].back().numel()) + " elements)");
                    }
                    const auto& m = list_item(mappings, static_cast<std::size_t>(g), gw);
                    const std::int64_t partition = f.states[0].back().numel();
                    for (const auto& [k, v] : m.ordered_dict_items().items()) {
                        const std::string& pname = k.as_str();
                        // The last stage's copy of the tied embedding mirrors stage 0's (§9).
                        if (s > 0 && pname.starts_with("tied_modules.")) continue;
                        const auto [numel, start] = ds_fragment_address(v, gw + ": " + pname);
                        if (numel < 0 || start < 0 || start + numel > partition)
                            throw Error(gw + ": fragment of " + pname + " [" + std::to_string(start) + ", +" + std::to_string(numel) +
                                        ") outside the partition of " + std::to_string(partition));
                        auto [it, fresh] = params_.try_emplace(pname);
                        if (fresh) {
                            it->second.pp = s;
                            it->second.group = g;
                            it->second.per_tp.resize(static_cast<std::size_t>(tp));
                            group_of_[pname] = g;
                        } else if (it->second.pp != s || it->second.group != g) {
                            throw Error(gw + ": " + pname + " also appears in stage " + std::to_string(it->second.pp) + " group " +
                                        std::to_string(it->second.group));
                        }
                        it->second.per_tp[static_cast<std::size_t>(r)].push_back({d, start, numel});
                    }
                }
            }
}

const Bf16OptimizerShards::File& Bf16OptimizerShards::at(int pp, int tp, int dp) const {
    return files_.at(static_cast<std::size_t>((pp * tp_ + tp) * dp_ + dp));
}

const TorchFile& Bf16OptimizerShards::file(int pp, int tp, int dp) const { return *at(pp, tp, dp).file; }

const PyValue& Bf16OptimizerShards::optimizer_state_dict(int pp, int tp, int dp) const {
    return file(pp, tp, dp).root().get("optimizer_state_dict");
}

std::vector<float> Bf16OptimizerShards::global_state(const std::string& name, OptimState state, const TpLayout& layout,
                                                     const std::vector<std::int64_t>& slice_shape, double qkv_version,
                                                     std::int64_t heads, std::size_t reserve_numel) const {
    const auto it = params_.find(name);
    if (it == params_.end()) throw Error(dir_ + ": parameter " + name + " has no fragment in any BF16 optimizer file");
    const Param& p = it->second;
    std::int64_t numel = 1;
    for (auto d : slice_shape) numel *= d;
    const bool qkv = qkv_version < 2.0 && name.find("query_key_value.") != std::string::npos;
    // Plain dim-0 concatenation (the vocabulary, QKV, h->4h: the largest tensors) is assembled in
    // place, without a copy per slice.
    const bool direct = layout.rule == TpRule::ColumnParallel && layout.sub_params == 1 && !qkv;
    std::vector<float> out;
    if (direct) {
        out.reserve(std::max(reserve_numel, static_cast<std::size_t>(numel * tp_)));
        out.resize(static_cast<std::size_t>(numel * tp_));
    }
    std::vector<std::vector<float>> slices(direct ? 0 : static_cast<std::size_t>(tp_));
    for (int r = 0; r < tp_; ++r) {
        float* slice = nullptr;
        if (direct) {
            slice = out.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(numel);
        } else {
            slices[static_cast<std::size_t>(r)].resize(static_cast<std::size_t>(numel));
            slice = slices[static_cast<std::size_t>(r)].data();
        }
        std::int64_t offset = 0;
        auto frags = p.per_tp[static_cast<std::size_t>(r)];
        std::stable_sort(frags.begin(), frags.end(), [](const Fragment& a, const Fragment& b) { return a.dp < b.dp; });
        for (const auto& f : frags) {
            const auto& t = at(p.pp, r, f.dp).states[static_cast<std::size_t>(state)][static_cast<std::size_t>(p.group)];
            if (offset + f.numel > numel)
                throw Error(at(p.pp, r, f.dp).file->path() + ": fragments of " + name + " hold more than its " + std::to_string(numel) + " elements");
            std::memcpy(slice + offset, t.bytes().data() + f.start * 4, static_cast<std::size_t>(f.numel) * 4);
            offset += f.numel;
        }
        if (offset != numel)
            throw Error(dir_ + ": the fragments of " + name + " on tensor-parallel rank " + std::to_string(r) + " hold " + std::to_string(offset) +
                        " elements; its shard has " + std::to_string(numel));
        if (qkv) {
            std::vector<std::byte> rows(reinterpret_cast<const std::byte*>(slice), reinterpret_cast<const std::byte*>(slice + numel));
            qkv_rows_to_v2(rows, heads / tp_, static_cast<std::size_t>(numel / slice_shape[0]) * 4, qkv_version);
            std::memcpy(slice, rows.data(), rows.size());
        }
    }
    if (direct) return out;
    return tp_merge_fp32(layout, slices, slice_shape);
}

void write_universal_state(const std::string& param_dir, OptimState state, std::span<const float> data,
                           const std::vector<std::int64_t>& shape, const UniversalParamInfo& info) {
    fs::create_directories(param_dir);
    TorchSaveWriter w((fs::path(param_dir) / (std::string(optim_state_name(state)) + ".pt")).string(), "cpu");
    auto root = PyValue::dict();
    auto& d = root.as_dict();
    if (info.layout.rule != TpRule::Replicated) d.set("cat_dim", PyValue::integer(info.layout.dim()));
    if (info.layout.sub_params > 1) d.set("param_n_sub_params", PyValue::integer(info.layout.sub_params));
    if (info.vocab_stripped) d.set("vocab_tensor", PyValue::boolean(true));
    d.set("param", w.add_tensor(DType::F32, shape, std::as_bytes(data)));
    w.finish(root);
}

}  // namespace mds::ckpt
