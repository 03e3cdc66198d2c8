// Target BF16 optimizer files of mds-ckpt-reshape (specs/checkpoints.md §5.2, §6.5): per stage, the
// parameters' universal fp32 / exp_avg / exp_avg_sq tensors (Bf16OptimizerShards::global_state)
// cut into the new TP shards and laid into the new flat DP partitions, written to all T' x D' files
// of the stage side by side, one parameter and state at a time.
#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>

#include "ckpt/reshape_plan.h"
#include "mds/ckpt/ds_layout.h"
#include "mds/ckpt/torch_stream_writer.h"
#include "mds/util/error.h"
#include "mds/util/files.h"

namespace mds::ckpt::reshape_detail {
namespace fs = std::filesystem;
namespace {

bool holds_tensor(const PyValue& v) {
    bool found = false;
    map_tensors(v, [&](const PyValue& t, const std::string&) {
        found = true;
        return t;
    });
    return found;
}

// A tensor-free value copied from the source; anything holding tensors cannot be resharded blindly.
PyValue copy_plain(const PyValue& v, const std::string& where) {
    if (holds_tensor(v)) throw Error(where + " holds tensors mds-ckpt-reshape does not know how to reshard");
    return v;
}

PyValue int_list(const std::vector<std::int64_t>& values) {
    std::vector<PyValue> items;
    for (auto v : values) items.push_back(PyValue::integer(v));
    return PyValue::list(std::move(items));
}

// The class the source pickled its fragment addresses with (deepspeed.runtime.bf16_optimizer
// fragment_address in the BLOOM branch and v0.7; deepspeed.utils.tensor_fragment later).
PyGlobal fragment_class(const PyValue& osd) {
    const auto& mappings = osd.get("param_slice_mappings");
    if (mappings.type() == PyType::List)
        for (const auto& m : mappings.as_list())
            for (const auto& [k, v] : m.ordered_dict_items().items())
                if (v.type() == PyType::Object) return v.as_object().cls;
    return {"deepspeed.runtime.bf16_optimizer", "fragment_address"};
}

PyValue fragment_address(const PyGlobal& cls, std::int64_t numel, std::int64_t start) {
    // A dataclass as pickle protocol 2 writes it: cls.__new__(cls), then BUILD with its __dict__.
    auto o = PyValue::object(cls.module, cls.name, PyValue::tuple({}), /*newobj=*/true);
    auto state = PyValue::dict();
    state.as_dict().set("numel", PyValue::integer(numel));
    state.as_dict().set("start", PyValue::integer(start));
    o.as_object().has_state = true;
    o.as_object().state = state;
    return o;
}

// The source's base_optimizer_state with this file's moment tensors: 'state' per group with
// exp_avg / exp_avg_sq replaced, 'param_groups' each naming its one flat partition.
PyValue target_base_state(const PyValue& src_base, const std::vector<PyValue>& exp_avg, const std::vector<PyValue>& exp_avg_sq,
                          const std::string& src_where) {
    const int G = static_cast<int>(exp_avg.size());
    const auto& src_groups = src_base.get("param_groups");
    auto base = PyValue::dict();
    for (const auto& [bk, bv] : src_base.as_dict().items()) {
        const std::string bkey = bk.type() == PyType::Str ? bk.as_str() : bk.repr(40);
        if (bkey == "state") {
            auto state = PyValue::dict();
            for (int g = 0; g < G; ++g) {
                auto gs = PyValue::dict();
                const auto* src_gs = bv.as_dict().find(PyValue::integer(g));
                if (!src_gs) throw Error(src_where + ": no base_optimizer_state['state'][" + std::to_string(g) + "]");
                for (const auto& [sk, sv] : src_gs->as_dict().items()) {
                    const std::string skey = sk.type() == PyType::Str ? sk.as_str() : "";
                    if (skey == "exp_avg") gs.as_dict().set(sk, exp_avg[static_cast<std::size_t>(g)]);
                    else if (skey == "exp_avg_sq") gs.as_dict().set(sk, exp_avg_sq[static_cast<std::size_t>(g)]);
                    else gs.as_dict().set(sk, copy_plain(sv, src_where + "['base_optimizer_state']['state'][" + std::to_string(g) + "][" + sk.repr(30) + "]"));
                }
                state.as_dict().set(PyValue::integer(g), gs);
            }
            base.as_dict().set(bk, state);
        } else if (bkey == "param_groups") {
            std::vector<PyValue> pgs;
            for (int g = 0; g < G; ++g) {
                const auto& src_pg = src_groups.as_list()[static_cast<std::size_t>(g)];
                auto pg = PyValue::dict();
                for (const auto& [pk, pv] : src_pg.as_dict().items())
                    pg.as_dict().set(pk, pk.type() == PyType::Str && pk.as_str() == "params" ? PyValue::list({PyValue::integer(g)})
                                                                                              : copy_plain(pv, src_where + " param_groups"));
                pgs.push_back(pg);
            }
            base.as_dict().set(bk, PyValue::list(std::move(pgs)));
        } else {
            base.as_dict().set(bk, copy_plain(bv, src_where + "['base_optimizer_state'][" + bk.repr(30) + "]"));
        }
    }
    return base;
}

// param_slice_mappings of DP rank `d`: per group, each fragment of its partition by parameter name.
PyValue slice_mappings(const Plan& plan, const std::vector<DsFlatGroup>& groups, int d, const PyGlobal& frag_cls) {
    std::vector<PyValue> maps;
    for (const auto& f : groups) {
        auto m = PyValue::object("collections", "OrderedDict", PyValue::tuple({}));
        for (const auto& frag : f.fragments[static_cast<std::size_t>(d)])
            m.as_object().dict_items.set(plan.params[frag.param].ds_name, fragment_address(frag_cls, frag.length, frag.part_offset));
        maps.push_back(m);
    }
    return PyValue::list(std::move(maps));
}

// The optimizer_state_dict of DP rank `d`: the source's keys in the source's order, the layout's
// values; `tensors` are the file's declared [fp32, exp_avg, exp_avg_sq] partitions per group.
PyValue target_optimizer_state(const Plan& plan, const std::vector<DsFlatGroup>& groups, int d, const PyValue& osd0,
                               const PyGlobal& frag_cls, const std::array<std::vector<PyValue>, 3>& tensors,
                               const std::string& src_where) {
    const int D = plan.dp, G = static_cast<int>(groups.size());
    auto osd = PyValue::dict();
    for (const auto& [k, v] : osd0.as_dict().items()) {
        const std::string key = k.type() == PyType::Str ? k.as_str() : k.repr(40);
        if (key == "base_optimizer_state") {
            osd.as_dict().set(k, target_base_state(osd0.get("base_optimizer_state"), tensors[1], tensors[2], src_where));
        } else if (key == "single_partition_of_fp32_groups") {
            osd.as_dict().set(k, PyValue::list(tensors[0]));
        } else if (key == "group_paddings" || key == "groups_padding") {
            std::vector<std::int64_t> pads;
            for (const auto& f : groups) pads.push_back(d == D - 1 ? f.padding : 0);
            osd.as_dict().set(k, int_list(pads));
        } else if (key == "partition_count") {
            osd.as_dict().set(k, v.type() == PyType::Int ? PyValue::integer(D) : int_list(std::vector<std::int64_t>(static_cast<std::size_t>(G), D)));
        } else if (key == "param_slice_mappings") {
            osd.as_dict().set(k, slice_mappings(plan, groups, d, frag_cls));
        } else {
            osd.as_dict().set(k, copy_plain(v, src_where + "[" + k.repr(40) + "]"));
        }
    }
    return osd;
}

// All T x D files of the stage, their object trees declared up front; writers[r * D + d].
std::vector<std::unique_ptr<TorchStreamWriter>> open_stage_writers(const Plan& plan, int stage, const std::vector<DsFlatGroup>& groups,
                                                                   const std::string& out_dir) {
    const int T = plan.tp, D = plan.dp, G = static_cast<int>(groups.size());
    const auto& src_file = plan.optimizer->file(0, 0, 0);
    const PyValue& osd0 = plan.optimizer->optimizer_state_dict(0, 0, 0);
    const std::string src_where = src_file.path() + ": optimizer_state_dict";
    const PyGlobal frag_cls = fragment_class(osd0);
    const auto& src_groups = osd0.get("base_optimizer_state").get("param_groups");
    if (src_groups.type() != PyType::List || static_cast<int>(src_groups.as_list().size()) != G)
        throw Error(src_where + ": base_optimizer_state['param_groups'] does not list " + std::to_string(G) + " groups");
    std::vector<std::unique_ptr<TorchStreamWriter>> writers;
    for (int r = 0; r < T; ++r)
        for (int d = 0; d < D; ++d) {
            auto w = std::make_unique<TorchStreamWriter>((fs::path(out_dir) / ds_optim_file(true, d, stage * T + r)).string(), "cpu");
            std::array<std::vector<PyValue>, 3> tensors;
            for (int s = 0; s < 3; ++s)
                for (const auto& f : groups) tensors[static_cast<std::size_t>(s)].push_back(w->declare(DType::F32, {f.partition}));
            const PyValue osd = target_optimizer_state(plan, groups, d, osd0, frag_cls, tensors, src_where);
            auto root = PyValue::dict();
            for (const auto& [k, v] : src_file.root().as_dict().items()) {
                const std::string key = k.type() == PyType::Str ? k.as_str() : "";
                // DeepSpeed 0.5 kept param_shapes here rather than in the mp_rank files.
                root.as_dict().set(k, key == "optimizer_state_dict" ? osd
                                      : key == "param_shapes" && !v.is_none() ? stage_param_shapes(plan, stage)
                                                                               : copy_plain(v, src_file.path() + ": " + k.repr(40)));
            }
            w->begin(root);
            writers.push_back(std::move(w));
        }
    return writers;
}

// One state of parameter params[k] of `group`: its global tensor (written to the universal folder
// once when asked), re-padded to the target vocabulary, cut into the target TP shards, each shard's
// fragments into the files of the DP ranks holding them.
void stream_param_state(const Plan& plan, const DsFlatGroup& group, std::size_t k, OptimState state,
                        std::vector<std::unique_ptr<TorchStreamWriter>>& writers, const std::string& universal_zero,
                        std::set<std::string>& universal_written, std::mutex& universal_mutex) {
    const int T = plan.tp, D = plan.dp;
    const Param& p = plan.params[group.params[k]];
    std::size_t target_numel = 1;
    for (auto dim : p.target_shape) target_numel *= static_cast<std::size_t>(dim);
    auto global = plan.optimizer->global_state(p.ds_name, state, p.layout, p.source_slice, plan.source->checkpoint_version(), plan.heads,
                                               target_numel);
    const std::int64_t row = p.source_shape.size() > 1 ? static_cast<std::int64_t>(global.size()) / p.source_shape[0] : 1;
    const std::string key = p.ds_name + "/" + optim_state_name(state);
    bool first = false;
    if (!universal_zero.empty()) {
        const std::lock_guard<std::mutex> lock(universal_mutex);
        first = universal_written.insert(key).second;
    }
    if (first) {
        UniversalParamInfo info{p.layout, p.vocab && plan.original_vocab > 0};
        auto shape = p.source_shape;
        if (info.vocab_stripped) shape[0] = plan.original_vocab;
        write_universal_state((fs::path(universal_zero) / p.ds_name).string(), state,
                              std::span<const float>(global.data(), static_cast<std::size_t>(shape[0] * row)), shape, info);
    }
    if (p.vocab && plan.vocab_changes()) {
        const std::int64_t keep = std::min(plan.original_vocab, plan.target_vocab);
        global.resize(static_cast<std::size_t>(plan.target_vocab * row));
        std::fill(global.begin() + keep * row, global.end(), 0.0f);
    }
    const std::int64_t n = p.shard_numel();
    const auto pieces = group.pieces_of(k);
    for (int r = 0; r < T; ++r) {
        std::vector<std::byte> copy;
        const std::byte* shard;
        const auto bytes = std::as_bytes(std::span<const float>(global));
        if (p.layout.rule == TpRule::Replicated) {
            shard = bytes.data();
        } else if (p.layout.rule == TpRule::ColumnParallel && p.layout.sub_params == 1) {
            shard = bytes.data() + static_cast<std::size_t>(r * n) * 4;
        } else {
            copy = tp_shard(p.layout, bytes, p.target_shape, 4, T, r);
            shard = copy.data();
        }
        for (const auto& [d, f] : pieces)
            writers[static_cast<std::size_t>(r * D + d)]->write(
                std::span<const std::byte>(shard + f.offset * 4, static_cast<std::size_t>(f.length) * 4));
    }
}

}  // namespace

std::uint64_t optimizer_bytes(const Plan& plan) {
    std::uint64_t total = 0;
    for (const auto& st : plan.stages)
        for (const auto& f : stage_optimizer_layout(plan, st))
            total += static_cast<std::uint64_t>(f.partition) * 4 * 3 * static_cast<std::uint64_t>(plan.dp * plan.tp);
    return total;
}

void write_stage_optimizer(const Plan& plan, int stage, const std::string& out_dir, const std::string& universal_zero,
                           std::set<std::string>& universal_written, std::mutex& universal_mutex,
                           const std::function<void(std::uint64_t)>& progress) {
    const auto groups = stage_optimizer_layout(plan, plan.stages[static_cast<std::size_t>(stage)]);
    const int T = plan.tp, D = plan.dp;
    auto writers = open_stage_writers(plan, stage, groups, out_dir);
    // Stream: per state and group, every parameter's global tensor once, its shards into all files.
    for (const auto state : kOptimStates)
        for (const auto& f : groups) {
            for (std::size_t k = 0; k < f.params.size(); ++k) {
                stream_param_state(plan, f, k, state, writers, universal_zero, universal_written, universal_mutex);
                if (progress) progress(static_cast<std::uint64_t>(plan.params[f.params[k]].shard_numel()) * 4 * static_cast<std::uint64_t>(T));
            }
            // Padding (zeros, as DeepSpeed keeps it) fills each partition to its size.
            for (int r = 0; r < T; ++r)
                for (int d = 0; d < D; ++d)
                    writers[static_cast<std::size_t>(r * D + d)]->write_zeros(static_cast<std::uint64_t>(f.partition - f.data_in_partition(d)) * 4);
        }
    for (auto& w : writers) w->finish();
}

void write_universal_common(const Plan& plan, const std::string& universal_dir) {
    const auto& src_file = plan.optimizer->file(0, 0, 0);
    const PyValue& osd0 = plan.optimizer->optimizer_state_dict(0, 0, 0);
    const std::string where = src_file.path() + ": optimizer_state_dict";
    auto out = PyValue::dict();
    for (const auto& [k, v] : osd0.as_dict().items()) {
        const std::string key = k.type() == PyType::Str ? k.as_str() : "";
        if (key == "base_optimizer_state" || key == "param_slice_mappings" || key == "single_partition_of_fp32_groups") continue;
        out.as_dict().set(k, copy_plain(v, where + "[" + k.repr(40) + "]"));
    }
    out.as_dict().set("param_groups", copy_plain(osd0.get("base_optimizer_state").get("param_groups"), where + " param_groups"));
    fs::create_directories(fs::path(universal_dir) / "zero");
    TorchSaveWriter w((fs::path(universal_dir) / "zero" / "optimizer_state.pt").string(), "cpu");
    w.finish(out);
    for (int i = 0; i < plan.source->tp() * plan.source->pp(); ++i) {
        const auto name = ds_mp_rank_file(i);
        AtomicOutput copy((fs::path(universal_dir) / name).string());
        copy.append_file((fs::path(plan.source->directory()) / name).string());
        copy.commit();
    }
}

}  // namespace mds::ckpt::reshape_detail
