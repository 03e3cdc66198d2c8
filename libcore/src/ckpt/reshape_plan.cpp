#include "ckpt/reshape_plan.h"

#include <algorithm>
#include <filesystem>

#include "mds/ckpt/ds_layout.h"
#include "mds/util/error.h"
#include "mds/util/safe_paths.h"  // checked_entry_name, printable

namespace mds::ckpt::reshape_detail {
namespace fs = std::filesystem;

std::int64_t Param::shard_numel() const {
    std::int64_t n = 1;
    for (auto d : target_shard) n *= d;
    return n;
}

namespace {


const PyValue* present(const PyValue* v) { return v && !v->is_none() ? v : nullptr; }

std::int64_t int_or(const DsCheckpoint& ck, const char* name, std::int64_t fallback) {
    const auto* v = present(ck.arg(name));
    if (!v) return fallback;
    if (v->type() != PyType::Int) throw Error(ck.directory() + "/" + ds_mp_rank_file(0) + ": args." + name + " is not an int: " + v->repr(60));
    return v->as_int();
}

bool bool_arg(const DsCheckpoint& ck, const char* name) {
    const auto* v = present(ck.arg(name));
    return v && v->type() == PyType::Bool && v->as_bool();
}

// Megatron's weight-decay rule (§5.1): LayerNorm modules' parameters and every `bias` go without.
bool megatron_weight_decay(const std::string& name, bool final_norm) {
    if (final_norm || name.ends_with("bias")) return false;
    return name.find("layernorm.") == std::string::npos && !name.starts_with("word_embeddings.norm.");
}

// The parameter → optimizer group map of the source's param_shapes (one OrderedDict per group),
// over all stages of TP rank 0; the group count, 0 when there are none.
int param_shape_groups(const DsCheckpoint& ck, const std::string& dir, bool verify, std::map<std::string, int>& group_of,
                       std::vector<std::string>& buffers) {
    int groups = 0;
    std::set<std::string> seen_buffers;
    for (int s = 0; s < ck.pp(); ++s) {
        const std::string path = (fs::path(dir) / ds_mp_rank_file(s * ck.tp())).string();
        TorchFile f(path, verify);
        if (f.root().type() != PyType::Dict) throw Error(path + ": expected a dict at the top");
        if (const auto* b = present(f.root().find("buffer_names")); b && b->type() == PyType::List)
            for (const auto& n : b->as_list())
                if (n.type() == PyType::Str && seen_buffers.insert(n.as_str()).second) buffers.push_back(n.as_str());
        const auto* shapes = present(f.root().find("param_shapes"));
        if (!shapes || shapes->type() != PyType::List) continue;
        groups = std::max(groups, static_cast<int>(shapes->as_list().size()));
        for (std::size_t g = 0; g < shapes->as_list().size(); ++g)
            for (const auto& [k, v] : shapes->as_list()[g].ordered_dict_items().items())
                if (k.type() == PyType::Str && !(s > 0 && k.as_str().starts_with("tied_modules."))) group_of[k.as_str()] = static_cast<int>(g);
    }
    return groups;
}


void note(const ReshapeOptions& o, const std::string& m) {
    if (o.note) o.note(m);
}

void check_options(const ReshapeOptions& o) {
    if (o.target_tp < 1) throw UsageError("--target-tp " + std::to_string(o.target_tp) + ": expected at least 1");
    if (o.target_pp < 1) throw UsageError("--target-pp " + std::to_string(o.target_pp) + ": expected at least 1");
    if (o.target_dp < 0) throw UsageError("--target-dp " + std::to_string(o.target_dp) + ": expected at least 1");
    if (o.original_vocab_size < 0)
        throw UsageError("--original-vocab-size " + std::to_string(o.original_vocab_size) + ": expected at least 1");
    if (o.write_universal && !o.with_optimizer) throw UsageError("--universal needs the optimizer states (--with-optimizer)");
}

// The source checkpoint, the output tag, the target TP / PP and the model facts the TP split needs.
void open_source(Plan& plan, const std::string& src, const ReshapeOptions& o) {
    plan.source = std::make_unique<DsCheckpoint>(src, o.tag, o.verify);
    const DsCheckpoint& ck = *plan.source;
    const fs::path dir = ck.directory();
    // The output tag is the source folder's name: a plain name, whatever SRC looked like.
    plan.tag = checked_entry_name(dir.filename().string(), "the source tag folder " + printable(dir.string(), 200));
    plan.source_root = dir.parent_path().string();
    plan.tp = o.target_tp;
    plan.pp = o.target_pp;
    const std::string mp0 = (dir / ds_mp_rank_file(0)).string();
    plan.mp_rank0 = std::make_unique<TorchFile>(mp0, o.verify);
    if (plan.mp_rank0->root().type() != PyType::Dict) throw Error(mp0 + ": expected a dict at the top");

    plan.heads = ck.int_arg("num_attention_heads");
    if (plan.heads % plan.tp != 0)
        throw Error(mp0 + ": num_attention_heads " + std::to_string(plan.heads) + " is not divisible by --target-tp " + std::to_string(plan.tp) +
                    " (fused QKV is split on head boundaries)");
    plan.glu = present(ck.arg("glu_activation")) != nullptr;
    if (plan.pp * plan.tp > 100)
        note(o, "warning: " + std::to_string(plan.pp * plan.tp) + " mp_rank files; DeepSpeed sorts their names as strings and picks wrong ones past 100");
}

// Optimizer states: BF16 optimizer files only (§5.2); anything else is dropped or refused. Sets the
// source and target DP.
void plan_optimizer(Plan& plan, const ReshapeOptions& o) {
    const DsCheckpoint& ck = *plan.source;
    const fs::path dir = ck.directory();
    const std::string mp0 = (dir / ds_mp_rank_file(0)).string();
    const PyValue* engine_optimizer = present(plan.mp_rank0->root().find("optimizer"));
    if (o.with_optimizer) {
        if (engine_optimizer)
            throw Error(mp0 + ": the optimizer state sits in the mp_rank files (fp16/fp32 without ZeRO); only BF16 optimizer files "
                              "(bf16_zero_pp_rank_*) can be resharded. Reshape without --with-optimizer instead");
        plan.optimizer = std::make_unique<Bf16OptimizerShards>(dir.string(), ck.tp(), ck.pp(), o.verify);
        plan.source_dp = plan.optimizer->dp();
        if (plan.optimizer->groups() != 2 && plan.optimizer->groups() != 3)
            throw Error(dir.string() + ": " + std::to_string(plan.optimizer->groups()) +
                        " optimizer parameter groups; expected Megatron's 2 ([decay, no decay]) or 3 ([decay, decay, no decay])");
    } else {
        const auto* d = present(plan.mp_rank0->root().find("dp_world_size"));
        plan.source_dp = d && d->type() == PyType::Int ? static_cast<int>(d->as_int()) : 1;
        bool has_optimizer_files = engine_optimizer != nullptr;
        for (const auto& e : fs::directory_iterator(dir)) has_optimizer_files |= parse_ds_optim_file(e.path().filename().string()).has_value();
        if (has_optimizer_files)
            note(o, "optimizer states are not carried over (weights only; resume with --no-load-optim, or pass --with-optimizer)");
    }
    plan.dp = o.target_dp > 0 ? o.target_dp : plan.source_dp;
}

// Vocabulary (§6.3): the padded size follows the new TP degree unless pad_vocab_size_to fixes it.
void plan_vocabulary(Plan& plan, const ReshapeOptions& o) {
    const DsCheckpoint& ck = *plan.source;
    const std::string mp0 = (fs::path(ck.directory()) / ds_mp_rank_file(0)).string();
    const int embed = ck.layers().front();
    {
        auto layer = ck.open_layer(embed);
        const auto& names = layer.names();
        if (std::find(names.begin(), names.end(), "word_embeddings.weight") == names.end())
            throw Error(ck.layer_file(embed, 0) + ": no word_embeddings.weight (expected the embedding in the first layer file)");
        plan.source_vocab = layer.shape("word_embeddings.weight")[0];
    }
    plan.original_vocab = o.original_vocab_size;
    if (plan.original_vocab == 0)
        if (const auto* info = present(plan.mp_rank0->root().find("checkpoint_info")); info && info->type() == PyType::Dict)
            if (const auto* v = present(info->find("original_vocab_size")); v && v->type() == PyType::Int) plan.original_vocab = v->as_int();
    if (plan.original_vocab > plan.source_vocab)
        throw Error(mp0 + ": original vocabulary size " + std::to_string(plan.original_vocab) + " is larger than the embedding's " +
                    std::to_string(plan.source_vocab) + " rows");
    const std::int64_t pad_to = int_or(ck, "pad_vocab_size_to", 0);
    if (pad_to > 0) plan.target_vocab = padded_vocab_size(plan.original_vocab, 1, plan.tp, pad_to);
    else if (plan.original_vocab > 0) plan.target_vocab = padded_vocab_size(plan.original_vocab, int_or(ck, "make_vocab_size_divisible_by", 128), plan.tp, 0);
    else if (plan.tp == ck.tp()) plan.target_vocab = plan.source_vocab;
    else
        throw Error(mp0 + ": the padded vocabulary size depends on the TP degree and the checkpoint does not record the original size "
                          "(checkpoint_info.original_vocab_size, written since 2022-07); pass --original-vocab-size (the tokenizer's)");
    if (plan.target_vocab != plan.source_vocab && plan.original_vocab == 0)
        throw Error(mp0 + ": the padded vocabulary changes from " + std::to_string(plan.source_vocab) + " to " + std::to_string(plan.target_vocab) +
                    " rows; pass --original-vocab-size so that only padding rows are dropped");
    if (plan.target_vocab % plan.tp != 0)
        throw Error(mp0 + ": padded vocabulary size " + std::to_string(plan.target_vocab) + " is not divisible by --target-tp " + std::to_string(plan.tp));
}

// The parameters of the source's layer files, and its persistent buffers.
struct SourceParams {
    std::map<int, std::vector<std::size_t>> layer_params;  // on-disk layer → Plan::params indices
    std::vector<std::string> buffers;                      // ds names, source order
};

// One parameter of layer `layer` with its source and target shapes.
Param make_param(const Plan& plan, int layer, const std::string& name, const DsCheckpoint::Layer& l, const std::string& ds) {
    const DsCheckpoint& ck = *plan.source;
    Param p;
    p.ds_name = ds;
    p.layer = layer;
    p.name = name;
    p.dtype = l.dtype(name);
    p.source_shape = l.shape(name);
    p.layout = tp_layout(name, plan.glu);
    const std::string what = ck.layer_file(layer, 0) + ": " + name;
    p.source_slice = tp_shard_shape(p.layout, p.source_shape, ck.tp(), what);
    p.vocab = layer == ck.layers().front() && name == "word_embeddings.weight";
    p.target_shape = p.source_shape;
    if (p.vocab) p.target_shape[0] = plan.target_vocab;
    p.target_shard = tp_shard_shape(p.layout, p.target_shape, plan.tp, what);
    return p;
}

// Parameters in layer order, and how the source groups them (§5.1): the BF16 optimizer files' groups
// with --with-optimizer, else the mp_rank files' param_shapes when complete, else Megatron's rule.
SourceParams collect_params(Plan& plan, const ReshapeOptions& o) {
    const DsCheckpoint& ck = *plan.source;
    const std::string dir = ck.directory();
    const int embed = ck.layers().front(), final_norm = ck.layers().back();
    SourceParams out;
    std::map<std::string, int> shape_groups;
    const int shape_group_count = param_shape_groups(ck, dir, o.verify, shape_groups, out.buffers);
    const std::set<std::string> buffer_set(out.buffers.begin(), out.buffers.end());
    const std::map<std::string, int>* group_of = nullptr;
    int source_groups = 0;
    if (plan.optimizer) {
        group_of = &plan.optimizer->group_of();
        source_groups = plan.optimizer->groups();
    } else if (shape_group_count == 2 || shape_group_count == 3) {
        group_of = &shape_groups;
        source_groups = shape_group_count;
    }
    plan.groups = source_groups ? source_groups : 3;
    for (int layer : ck.layers()) {
        auto l = ck.open_layer(layer);
        for (const auto& name : l.names()) {
            const std::string ds = ds_param_name(layer, name, embed);
            if (buffer_set.count(ds) || name.ends_with("inv_freq")) {
                if (!buffer_set.count(ds)) out.buffers.push_back(ds);
                continue;
            }
            Param p = make_param(plan, layer, name, l, ds);
            const auto g = group_of ? group_of->find(ds) : std::map<std::string, int>::const_iterator{};
            if (group_of && g == group_of->end()) {
                if (plan.optimizer) throw Error(dir + ": parameter " + ds + " is in no BF16 optimizer file");
                group_of = nullptr;  // incomplete param_shapes: fall back to Megatron's rule for all
            }
            p.weight_decay = group_of ? (source_groups == 3 ? g->second < 2 : g->second == 0) : megatron_weight_decay(name, layer == final_norm);
            plan.by_name[ds] = plan.params.size();
            out.layer_params[layer].push_back(plan.params.size());
            plan.params.push_back(std::move(p));
        }
    }
    if (!group_of)
        for (auto& p : plan.params) p.weight_decay = megatron_weight_decay(p.name, p.layer == final_norm);
    return out;
}

// The spec list with each entry's parameters per target TP rank ('parameters' weighting).
std::vector<PipeSpec> weighted_specs(const Plan& plan, const SourceParams& sp) {
    const DsCheckpoint& ck = *plan.source;
    const int embed = ck.layers().front();
    bool half = bool_arg(ck, "fp16") || bool_arg(ck, "bf16");
    if (!present(ck.arg("fp16")) && !present(ck.arg("bf16"))) half = plan.params.front().dtype != DType::F32;
    auto specs = gpt_pipe_specs(ck.layers(), half);
    const auto layer_numel = [&](int layer) {
        std::int64_t n = 0;
        if (const auto it = sp.layer_params.find(layer); it != sp.layer_params.end())
            for (auto i : it->second) n += plan.params[i].shard_numel();
        return n;
    };
    const std::int64_t embed_params = layer_numel(embed);
    for (auto& s : specs) {
        if (s.layer >= 0) s.parameters += layer_numel(s.layer);
        else if (s.tied_embedding) s.parameters = embed_params;
    }
    return specs;
}

// Target stage `s` of spec entries [parts[s], parts[s+1]): its layers, parameters in DeepSpeed's
// traversal order, optimizer groups and persistent buffers.
Stage make_stage(const Plan& plan, const std::vector<PipeSpec>& specs, const std::vector<int>& parts, int s, const SourceParams& sp) {
    const int embed = plan.source->layers().front();
    const auto params_of = [&](int layer) -> const std::vector<std::size_t>& {
        static const std::vector<std::size_t> none;
        const auto it = sp.layer_params.find(layer);
        return it == sp.layer_params.end() ? none : it->second;
    };
    Stage st;
    st.info.first_spec = parts[static_cast<std::size_t>(s)];
    st.info.end_spec = parts[static_cast<std::size_t>(s) + 1];
    int blocks = 0;
    for (int i = st.info.first_spec; i < st.info.end_spec; ++i) {
        const auto& spec = specs[static_cast<std::size_t>(i)];
        if (spec.layer >= 0) st.info.layers.push_back(spec.layer);
        st.info.tied_embedding |= spec.tied_embedding;
        blocks += spec.type_name == "ParallelTransformerLayerPipe";
    }
    if (blocks == 0)
        throw Error("stage " + std::to_string(s) + " of " + std::to_string(plan.pp) + " gets no transformer layer (partition method '" +
                    plan.partition_method + "', spec entries " + std::to_string(st.info.first_spec) + ".." + std::to_string(st.info.end_spec) +
                    "); Megatron-DeepSpeed cannot run such a stage: use fewer stages");
    // Traversal order: tied_modules.embed first (its LayerNorm only on the first stage, §9), then the numbered layers.
    if (st.info.tied_embedding)
        for (auto i : params_of(embed))
            if (s == 0 || !plan.params[i].name.starts_with("word_embeddings.norm.")) st.params.push_back(i);
    for (int layer : st.info.layers)
        if (layer != embed) st.params.insert(st.params.end(), params_of(layer).begin(), params_of(layer).end());
    std::vector<bool> decay;
    for (auto i : st.params) {
        decay.push_back(plan.params[i].weight_decay);
        st.info.parameters += plan.params[i].shard_numel();
    }
    st.groups = megatron_param_groups(st.params, decay, plan.groups);
    for (const auto& b : sp.buffers) {
        const auto dot = b.find('.');
        const std::string head = b.substr(0, dot);
        const bool mine = b.starts_with("tied_modules.") ? st.info.tied_embedding
                                                          : std::find(st.info.layers.begin(), st.info.layers.end(), std::atoi(head.c_str())) != st.info.layers.end();
        if (mine) st.buffer_names.push_back(b);
    }
    return st;
}

// Stages (§1.3, §6.1): the spec list cut as DeepSpeed's PipelineModule cuts it.
void plan_stages(Plan& plan, const ReshapeOptions& o, const SourceParams& sp) {
    const auto specs = weighted_specs(plan, sp);
    plan.partition_method = o.partition_method;
    if (plan.partition_method.empty())
        if (const auto* m = present(plan.source->arg("pp_partition_method")); m && m->type() == PyType::Str) plan.partition_method = m->as_str();
    if (plan.partition_method.empty()) plan.partition_method = "type:transformer";
    const auto parts = partition_pipe_specs(specs, plan.partition_method, plan.pp, o.partition_algorithm);
    for (int s = 0; s < plan.pp; ++s) plan.stages.push_back(make_stage(plan, specs, parts, s, sp));
}

}  // namespace

PyValue stage_param_shapes(const Plan& plan, int stage) {
    std::vector<PyValue> groups;
    for (const auto& g : plan.stages[static_cast<std::size_t>(stage)].groups) {
        auto od = PyValue::object("collections", "OrderedDict", PyValue::tuple({}));
        for (auto i : g.params) {
            std::vector<PyValue> dims;
            for (auto d : plan.params[i].target_shard) dims.push_back(PyValue::integer(d));
            od.as_object().dict_items.set(plan.params[i].ds_name, PyValue::object("torch", "Size", PyValue::tuple({PyValue::tuple(std::move(dims))})));
        }
        groups.push_back(od);
    }
    return PyValue::list(std::move(groups));
}

Plan make_plan(const std::string& src, const ReshapeOptions& o) {
    check_options(o);
    Plan plan;
    plan.verify = o.verify;
    open_source(plan, src, o);
    plan_optimizer(plan, o);
    plan_vocabulary(plan, o);
    const SourceParams sp = collect_params(plan, o);
    plan_stages(plan, o, sp);
    return plan;
}

std::vector<DsFlatGroup> stage_optimizer_layout(const Plan& plan, const Stage& stage) {
    std::vector<std::int64_t> numel;
    numel.reserve(plan.params.size());
    for (const auto& p : plan.params) numel.push_back(p.shard_numel());
    return ds_optimizer_layout(stage.groups, numel, plan.dp);
}

}  // namespace mds::ckpt::reshape_detail
