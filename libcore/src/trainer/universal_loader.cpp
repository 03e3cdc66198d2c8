// A resume from DeepSpeed's universal checkpoint (`--universal-checkpoint`), as Megatron-DeepSpeed
// with DeepSpeed's load_universal does it: `--load DIR` names the folder through DIR/latest_universal
// (not `latest`), the folder holds one full, TP-merged fp32 tensor per parameter and state
// (zero/<DeepSpeed name>/{fp32,exp_avg,exp_avg_sq}.pt, written by ds_to_universal.py or
// mds-ckpt-reshape --universal) plus the source's mp_rank_*_model_states.pt (progress, LR schedule,
// RNG). Each rank cuts its own tensor-parallel shard out of the full tensors, so any TP / PP / DP
// resumes; the ZeRO-1 partition at the new data-parallel size is the optimizer's (load_state).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "checkpoint_files.h"
#include "mds/ckpt/ds_layout.h"
#include "mds/ckpt/tp_reshard.h"
#include "mds/util/error.h"
#include "mds/util/int_range.h"

namespace mds::trainer::checkpoint_detail {
namespace fs = std::filesystem;

namespace {

std::string shape_text(at::IntArrayRef shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

// One state of one parameter: zero/<name>/<state>.pt's 'param' tensor. A contiguous fp32 tensor is a
// view into the mapped file (valid while `file` lives), so that a rank copies only its shard: the
// word embeddings of BLOOM are 14 GB per state in fp32.
struct StateFile {
    std::unique_ptr<ckpt::TorchFile> file;
    at::Tensor full;  // fp32; a view into `file` or an owned copy
};
StateFile read_state_file(const fs::path& path, const std::string& name, const std::string& root) {
    if (!fs::exists(path))
        throw Error(path.string() + ": missing: the universal checkpoint " + root + " has no " + path.filename().string() +
                    " for parameter " + name + " (a checkpoint of another model? check --num-layers, --embed-layernorm, "
                    "--position-embedding-type)");
    StateFile out;
    out.file = std::make_unique<ckpt::TorchFile>(path.string());
    const auto& r = out.file->root();
    const ckpt::PyValue* param = r.type() == ckpt::PyType::Dict ? r.find("param") : nullptr;
    if (!param && ckpt::TorchFile::is_tensor(r)) param = &r;  // older converters saved the bare tensor
    if (!param || !ckpt::TorchFile::is_tensor(*param))
        throw Error(path.string() + ": expected a dict with a 'param' tensor (a universal checkpoint state file)");
    const auto t = out.file->tensor(*param, name);
    if (t.dtype == ckpt::DType::F32 && t.contiguous() && t.numel() > 0) {
        const auto bytes = t.bytes();
        out.full = at::from_blob(const_cast<std::byte*>(bytes.data()), t.shape, at::TensorOptions().dtype(at::kFloat));
    } else {
        out.full = to_tensor(t).to(at::kFloat);
    }
    return out;
}

}  // namespace

fs::path universal_checkpoint_dir(const std::string& load) {
    const fs::path latest = fs::path(load) / "latest_universal";
    if (!fs::is_regular_file(latest))
        throw Error("--universal-checkpoint: " + latest.string() + " does not exist (DeepSpeed resumes a universal checkpoint "
                    "from the folder that file names; write one with ds_to_universal.py or mds-ckpt-reshape --universal, "
                    "or resume without --universal-checkpoint)");
    std::ifstream in(latest);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string tag = ss.str();
    const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
    while (!tag.empty() && space(tag.back())) tag.pop_back();
    tag.erase(tag.begin(), std::find_if(tag.begin(), tag.end(), [&](char c) { return !space(c); }));
    if (tag.empty() || tag.find('/') != std::string::npos || tag == "." || tag == "..")
        throw Error(latest.string() + ": expected the name of a folder beside it, found '" + tag + "'");
    const fs::path dir = fs::path(load) / tag;
    if (!fs::is_directory(dir)) throw Error(latest.string() + " names '" + tag + "', but " + dir.string() + " is not a folder");
    if (!fs::is_directory(dir / "zero"))
        throw Error("--universal-checkpoint: " + dir.string() + " is not a universal checkpoint folder (no zero/ with one "
                    "folder per parameter); convert it with ds_to_universal.py or mds-ckpt-reshape --universal");
    return dir;
}

std::string universal_mp_rank_file(const fs::path& dir, int tp_rank, int tp) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir)) {
        const auto name = e.path().filename().string();
        if (ckpt::parse_ds_mp_rank_file(name)) files.push_back(name);
    }
    if (files.empty())
        throw Error(dir.string() + ": no mp_rank_*_model_states.pt (a universal checkpoint folder carries the source's, "
                    "with the iteration, the LR schedule and the RNG states)");
    std::sort(files.begin(), files.end());
    // DeepSpeed's engine in universal mode: the source file at the same relative model-parallel
    // position (checkpoint_mp_rank * files // mp_world_size), the TP rank for a pipeline engine.
    const auto k = static_cast<std::size_t>(tp_rank) * files.size() / static_cast<std::size_t>(tp);
    return (dir / files[k]).string();
}

at::Tensor universal_shard(const fs::path& dir, const model::Parameter& p, ckpt::OptimState state, int tp, int tp_rank,
                           bool glu) {
    const std::string name = ds_param_name(p);
    const fs::path file = dir / "zero" / name / (std::string(ckpt::optim_state_name(state)) + ".pt");
    const StateFile state_file = read_state_file(file, name, dir.string());
    at::Tensor full = state_file.full;  // clone() what is returned: `full` may be a view into the file
    const auto shard = p.tensor.sizes();
    if (p.split == model::TpSplit::Replicated) {
        if (full.sizes() != shard)
            throw Error(file.string() + ": shape " + shape_text(full.sizes()) + ", expected " + shape_text(shard) +
                        " (a parameter every tensor-parallel rank holds whole; check the model flags)");
        return full.clone();
    }
    const std::int64_t dim = p.split == model::TpSplit::RowParallel ? 1 : 0;
    auto global = shard.vec();
    global[static_cast<std::size_t>(dim)] *= tp;
    // The vocabulary: ds_to_universal strips Megatron's padding ('vocab_tensor'); the rows this run
    // pads to (--make-vocab-size-divisible-by x TP) are zeros, as DeepSpeed pads them.
    if (p.name == "word_embeddings.weight" && full.dim() == 2 && full.size(1) == global[1] && full.size(0) < global[0])
        full = at::constant_pad_nd(full, {0, 0, 0, global[0] - full.size(0)}, 0);
    if (full.sizes() != at::IntArrayRef(global))
        throw Error(file.string() + ": shape " + shape_text(full.sizes()) + ", expected " + shape_text(global) + " (" +
                    std::to_string(tp) + " tensor-parallel shard" + (tp == 1 ? "" : "s") + " of " + shape_text(shard) +
                    "; check the model flags and --make-vocab-size-divisible-by)");
    const int sub = dim == 0 ? ckpt::tp_layout(p.name, glu).sub_params : 1;
    if (sub == 1) return full.chunk(tp, dim)[static_cast<std::size_t>(tp_rank)].clone(at::MemoryFormat::Contiguous);
    // GLU's dense_h_to_4h: [A; B] split separately, rank r holds [A_r; B_r].
    std::vector<at::Tensor> parts;
    for (const auto& half : full.chunk(sub, 0)) parts.push_back(half.chunk(tp, 0)[static_cast<std::size_t>(tp_rank)]);
    return at::cat(parts, 0);  // a new tensor
}

void load_universal_weights(const fs::path& dir, model::GptModel& model, int tp, int tp_rank) {
    c10::NoGradGuard no_grad;
    const bool glu = model.config().glu != model::Glu::None;
    for (auto& p : model.parameters())
        p.tensor.detach().copy_(universal_shard(dir, p, ckpt::OptimState::FP32, tp, tp_rank, glu));
}

std::int64_t universal_step(const fs::path& dir, const std::string& first_param) {
    // A per-parameter step.pt (optimizers that keep the step in their state, torch's Adam) ...
    const fs::path step_file = dir / "zero" / first_param / "step.pt";
    if (fs::exists(step_file)) {
        ckpt::TorchFile f(step_file.string());
        const auto& r = f.root();
        if (r.type() == ckpt::PyType::Int) return r.as_int();
        std::optional<std::int64_t> step;
        if (r.type() == ckpt::PyType::Float) step = truncate_to_int64(r.as_float());
        else if (ckpt::TorchFile::is_tensor(r)) step = truncate_to_int64(to_tensor(f.tensor(r, "step")).item<double>());
        else throw Error(step_file.string() + ": expected a number");
        if (!step) throw Error(step_file.string() + ": the step is not a number within int64's range");
        return *step;
    }
    // ... else the param groups of zero/optimizer_state.pt (apex's FusedAdam keeps it there), which
    // DeepSpeed copies into the optimizer's groups.
    const fs::path osd = dir / "zero" / "optimizer_state.pt";
    if (!fs::exists(osd)) throw Error(osd.string() + ": missing (the universal checkpoint's optimizer-wide state)");
    ckpt::TorchFile f(osd.string());
    const auto* groups = f.root().type() == ckpt::PyType::Dict ? f.root().find("param_groups") : nullptr;
    if (!groups || groups->type() != ckpt::PyType::List || groups->as_list().empty())
        throw Error(osd.string() + ": no param_groups");
    const auto* step = groups->as_list().front().find("step");
    if (step && (step->type() == ckpt::PyType::Int || step->type() == ckpt::PyType::Float))
        return static_cast<std::int64_t>(number(*step));
    throw Error(osd.string() + ": no Adam step count (neither zero/" + first_param + "/step.pt nor param_groups[0]['step'])");
}

UniversalStates read_universal_states(const fs::path& dir, const model::GptModel& model, int tp, int tp_rank) {
    UniversalStates out;
    const bool glu = model.config().glu != model::Glu::None;
    for (const auto& p : model.parameters()) {
        auto get = [&](ckpt::OptimState s) { return universal_shard(dir, p, s, tp, tp_rank, glu).to(p.tensor.device()); };
        out.master.push_back(get(ckpt::OptimState::FP32));
        out.m1.push_back(get(ckpt::OptimState::ExpAvg));
        out.m2.push_back(get(ckpt::OptimState::ExpAvgSq));
    }
    out.steps = model.parameters().empty() ? 0 : universal_step(dir, ds_param_name(model.parameters().front()));
    out.optimizer_state = (dir / "zero" / "optimizer_state.pt").string();
    return out;
}

}  // namespace mds::trainer::checkpoint_detail
