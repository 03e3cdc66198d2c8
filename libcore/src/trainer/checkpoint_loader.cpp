// CheckpointLoader (mds/trainer/checkpoint.h): a DeepSpeed pipeline checkpoint opened for a resume,
// as Megatron-DeepSpeed's load_checkpoint reads it: the tag `latest` names, the layer files into the
// model, the optimizer partitions of any data-parallel size into the optimizer, the RNG states and
// the progress (iteration, consumed samples, LR schedule, loss scaler).
//
// Reading runs at the disk's speed: the rank's files (layer files, optimizer partitions) and the
// tensors in them are read on several threads at once (parallel_for), each file announced to the
// kernel first (read-ahead), and every tensor is copied once, from the mapped file straight into the
// model's or the optimizer's memory. Errors are the same, whatever the timing: parallel_for rethrows
// the failure of the lowest index, the one a sequential read would have met first.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <fcntl.h>   // open, posix_fadvise
#include <unistd.h>  // close

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "checkpoint_files.h"
#include "mds/ckpt/ds_layout.h"
#include "mds/model/tensor_io.h"  // to_scalar_type
#include "mds/util/error.h"
#include "mds/util/int_range.h"
#include "mds/util/parallel.h"

namespace mds::trainer {
namespace fs = std::filesystem;
using ckpt::PyValue;
using namespace checkpoint_detail;

namespace {

// Threads reading one rank's files. Reading waits on the disk more than on the CPU, so more threads
// than LibTorch's compute threads pay off; 8 keep a node's ranks from starting hundreds at once.
int reader_threads() { return std::min(workers_or_cores(0), 8); }

// Asks the kernel to start reading the whole file into the page cache now, so that the pages are
// there (or on their way) when the tensors are touched, instead of being faulted in a few at a time.
// Only a hint: a file that cannot be opened here fails with its proper error when TorchFile opens it.
void read_ahead(const fs::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
    ::close(fd);
}

// A checkpoint tensor as a LibTorch tensor over the file's mapped bytes (checked against the zip's
// CRC-32 first): valid while the TorchFile lives, read only. Copying from it into the model or the
// optimizer is the only copy. A strided tensor (mds and DeepSpeed write none) takes to_tensor's copy.
at::Tensor file_view(const ckpt::TorchTensor& t) {
    if (!t.contiguous()) return to_tensor(t);
    const auto bytes = t.bytes();
    // from_blob wants a mutable pointer; nothing writes through this tensor.
    return at::from_blob(const_cast<std::byte*>(bytes.data()), t.shape,
                         at::TensorOptions().dtype(model::to_scalar_type(t.dtype)));
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

// Megatron's check_checkpoint_args, for the values mds-train's flags set.
void check_checkpoint_args(const ckpt::TorchFile& mp_rank, const flags::TrainArgs& args) {
    const auto& r = mp_rank.root();
    const std::string file = mp_rank.path();
    if (r.type() != ckpt::PyType::Dict) throw Error(file + ": expected a dict at the top");
    const auto* a = r.find("args");
    if (!a || !a->is_object("argparse", "Namespace")) return;
    auto check = [&](const char* name, std::int64_t flags) {
        const auto* v = a->namespace_attributes().find(name);
        if (v && v->type() == ckpt::PyType::Int && v->as_int() != flags)
            throw Error(file + ": the checkpoint has " + name + " " + std::to_string(v->as_int()) + ", the flags say " +
                        std::to_string(flags));
    };
    check("num_layers", args.model.num_layers);
    check("hidden_size", args.model.hidden_size);
    check("num_attention_heads", args.model.num_attention_heads);
}

}  // namespace

struct CheckpointLoader::Impl {
    const flags::TrainArgs* args = nullptr;
    fs::path dir;
    std::string dir_text;
    std::unique_ptr<ckpt::TorchFile> mp_rank;  // this model-parallel rank's
    std::vector<int> layers;  // on-disk layer indices of every stage, sorted
    int tp_rank = 0, mp = 0;  // this process's tensor-parallel rank and DeepSpeed model-parallel rank
    bool universal = false;   // --universal-checkpoint: `dir` is a universal folder (universal_loader.cpp)
};

CheckpointLoader::CheckpointLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointLoader::~CheckpointLoader() = default;

std::unique_ptr<CheckpointLoader> CheckpointLoader::open(const flags::TrainArgs& args, int tp_rank, int pp_rank) {
    const std::string& root = args.checkpoint.load;
    if (args.checkpoint.universal_checkpoint) {
        // Any TP / PP / DP: every rank cuts its shard from the full tensors. Megatron skips
        // check_checkpoint_args in this mode; the shapes are checked per tensor.
        auto impl = std::make_unique<Impl>();
        impl->args = &args;
        impl->universal = true;
        impl->dir = universal_checkpoint_dir(root);
        impl->dir_text = impl->dir.string();
        impl->tp_rank = tp_rank;
        impl->mp_rank = std::make_unique<ckpt::TorchFile>(
            universal_mp_rank_file(impl->dir, tp_rank, static_cast<int>(args.parallel.tensor_model_parallel_size)));
        return std::unique_ptr<CheckpointLoader>(new CheckpointLoader(std::move(impl)));
    }
    // Megatron-DeepSpeed (DeepSpeed's load_checkpoint) warns and starts from scratch when there is no
    // `latest` file, a missing folder included: the first launch of a job chain.
    if (!fs::is_directory(root)) return nullptr;
    const auto tag = ckpt::read_latest_tag(root);
    if (!tag) return nullptr;
    auto impl = std::make_unique<Impl>();
    impl->args = &args;
    impl->dir = fs::path(root) / *tag;
    impl->dir_text = impl->dir.string();
    const std::string where = impl->dir.string();
    if (tag->empty() || !fs::is_directory(impl->dir))
        throw Error((fs::path(root) / "latest").string() + " names tag '" + *tag + "', but " + where + " is not a folder");
    int mp_files = 0, ckpt_tp = 0;
    for (const auto& e : fs::directory_iterator(impl->dir)) {
        const auto name = e.path().filename().string();
        if (const auto l = ckpt::parse_ds_layer_file(name)) {
            ckpt_tp = std::max(ckpt_tp, l->tp_rank + 1);
            if (l->tp_rank == tp_rank) impl->layers.push_back(l->layer);
        } else if (ckpt::parse_ds_mp_rank_file(name)) {
            ++mp_files;
        }
    }
    std::sort(impl->layers.begin(), impl->layers.end());
    const std::int64_t flags_tp = args.parallel.tensor_model_parallel_size, flags_pp = args.parallel.pipeline_model_parallel_size;
    const std::string reshape = "; make a copy at that shape with mds-ckpt-reshape --target-tp " + std::to_string(flags_tp) +
                                " --target-pp " + std::to_string(flags_pp) + " --with-optimizer";
    if (mp_files == 0) throw Error(where + ": no " + ckpt::ds_mp_rank_file(0) + " (not a DeepSpeed checkpoint?)");
    if (ckpt_tp != flags_tp)
        throw Error(where + " holds " + std::to_string(ckpt_tp) + " tensor-parallel shard" + (ckpt_tp == 1 ? "" : "s") +
                    ", the flags say --tensor-model-parallel-size " + std::to_string(flags_tp) + reshape);
    if (mp_files != ckpt_tp * flags_pp)
        throw Error(where + " has " + std::to_string(mp_files) + " mp_rank files for " + std::to_string(ckpt_tp) +
                    " tensor-parallel shards: " + (mp_files % ckpt_tp == 0 ? std::to_string(mp_files / ckpt_tp) : std::string("?")) +
                    " pipeline stages, the flags say --pipeline-model-parallel-size " + std::to_string(flags_pp) + reshape);
    impl->tp_rank = tp_rank;
    impl->mp = pp_rank * static_cast<int>(flags_tp) + tp_rank;
    impl->mp_rank = std::make_unique<ckpt::TorchFile>((impl->dir / ckpt::ds_mp_rank_file(impl->mp)).string());
    check_checkpoint_args(*impl->mp_rank, args);
    return std::unique_ptr<CheckpointLoader>(new CheckpointLoader(std::move(impl)));
}

const std::string& CheckpointLoader::directory() const { return impl_->dir_text; }

std::int64_t CheckpointLoader::iteration() const {
    const auto* it = impl_->mp_rank->root().find("iteration");
    return it && it->type() == ckpt::PyType::Int ? it->as_int() : 0;
}

void CheckpointLoader::load_weights(model::GptModel& model) const {
    if (impl_->universal) {
        load_universal_weights(impl_->dir, model, static_cast<int>(impl_->args->parallel.tensor_model_parallel_size), impl_->tp_rank);
        return;
    }
    c10::NoGradGuard no_grad;
    auto& params = model.parameters();
    const std::int64_t blocks = model.config().num_layers;
    const auto& layers = impl_->layers;
    const std::string where = impl_->dir.string();
    if (static_cast<std::int64_t>(layers.size()) != blocks + 2)
        throw Error(where + " has " + std::to_string(layers.size()) + " layer files per TP rank, a model of " +
                    std::to_string(blocks) + " layers needs " + std::to_string(blocks + 2) +
                    " (embedding, blocks, final norm)");
    // On-disk order decides (first = embedding, last = final norm): BMD numbers blocks from 3,
    // microsoft's fork after mid-2023 from 2.
    auto disk_layer = [&](int model_layer) {
        if (model_layer == model::kEmbeddingLayer) return layers.front();
        if (model_layer == model::final_norm_layer_index(blocks)) return layers.back();
        return layers[static_cast<std::size_t>(model_layer - model::transformer_layer_index(0) + 1)];
    };
    // The model's parameters come grouped by layer, one file per layer: [begin, end) of each group.
    std::vector<std::pair<std::size_t, std::size_t>> groups;
    for (std::size_t i = 0; i < params.size(); ++i)
        if (groups.empty() || params[i].layer != params[groups.back().first].layer) groups.emplace_back(i, i + 1);
        else groups.back().second = i + 1;
    // One file per task: the groups touch disjoint parameters, so they copy without a lock.
    parallel_for(groups.size(), reader_threads(), [&](std::size_t g) {
        const auto [begin, end] = groups[g];
        const int layer = params[begin].layer;
        const fs::path path = impl_->dir / ckpt::ds_layer_file(disk_layer(layer), impl_->tp_rank);
        read_ahead(path);
        c10::NoGradGuard no_grad_here;  // grad mode is per thread
        ckpt::TorchFile file(path.string());
        const auto& items = file.root().ordered_dict_items();
        std::size_t used = 0;
        bool tied_copy = false;  // the last stage's copy of the embeddings: the file holds more than it
        for (std::size_t i = begin; i < end; ++i) {
            auto& p = params[i];
            const auto* v = items.find(p.name);
            if (!v) throw Error(file.path() + ": no tensor " + p.name);
            const auto t = file.tensor(*v, p.name);
            if (t.shape != p.tensor.sizes().vec())
                throw Error(file.path() + ": " + p.name + " has shape " + shape_text(t.shape) + ", the model's is " +
                            shape_text(p.tensor.sizes().vec()) + " (check the model flags and --make-vocab-size-divisible-by)");
            p.tensor.detach().copy_(file_view(t));
            tied_copy = tied_copy || p.tied_copy;
            ++used;
        }
        if (used != items.size() && !tied_copy) {
            for (const auto& [k, v] : items.items()) {
                const bool known = std::any_of(params.begin(), params.end(), [&](const model::Parameter& p) {
                    return p.layer == layer && k.type() == ckpt::PyType::Str && p.name == k.as_str();
                });
                if (!known)
                    throw Error(file.path() + ": tensor " + k.repr(80) + " is not a parameter of this model (check "
                                "--embed-layernorm, --position-embedding-type)");
            }
        }
    });
}

namespace {

// The optimizer files of model-parallel rank `mp`: data-parallel rank 0's (into `path`), then the
// other ranks' that its partition_count names. The states of a run on N data-parallel ranks are in
// N files, each with its partition of every flat group (fragment addresses relative to it).
std::vector<std::unique_ptr<ckpt::TorchFile>> open_optimizer_files(const fs::path& dir, bool bf16, int mp, fs::path& path) {
    path = dir / ckpt::ds_optim_file(bf16, 0, mp);
    if (!fs::exists(path)) path = dir / ckpt::ds_optim_file(!bf16, 0, mp);  // DeepSpeed tries both names too
    if (!fs::exists(path)) {
        bool other_dp = false;
        for (const auto& e : fs::directory_iterator(dir))
            if (const auto o = ckpt::parse_ds_optim_file(e.path().filename().string())) other_dp = other_dp || o->dp_rank != 0;
        throw Error(dir.string() + " has no optimizer states (" + ckpt::ds_optim_file(bf16, 0, mp) + ")" +
                    (other_dp ? "" : ": a weights-only checkpoint (mds-ckpt-shrink, --no-save-optim)?") +
                    "; resume with --no-load-optim to rebuild the fp32 masters from the weights and restart Adam");
    }
    const bool bf16_name = path.filename().string().rfind("bf16_", 0) == 0;
    std::vector<std::unique_ptr<ckpt::TorchFile>> files;
    files.push_back(std::make_unique<ckpt::TorchFile>(path.string()));
    const auto& osd = files[0]->root().get("optimizer_state_dict");
    std::int64_t count = 0;
    for (const auto& c : osd.get("partition_count").as_list()) {
        if (c.as_int() < 1 || (count && c.as_int() != count))
            throw Error(files[0]->path() + ": partition_count " + osd.get("partition_count").repr(80) +
                        " (expected one positive count for every group)");
        count = c.as_int();
    }
    for (std::int64_t k = 1; k < count; ++k) {
        const fs::path other = dir / ckpt::ds_optim_file(bf16_name, static_cast<int>(k), mp);
        if (!fs::exists(other))
            throw Error(files[0]->path() + " says the optimizer states are partitioned over " + std::to_string(count) +
                        " data-parallel ranks, but " + other.string() + " is missing");
        files.push_back(std::make_unique<ckpt::TorchFile>(other.string()));
    }
    return files;
}

// A fragment of one parameter's state: in which file's partition of which group, and where.
struct StatePiece {
    std::size_t file = 0, group = 0;
    std::int64_t start = 0, numel = 0;
};

// Every file's flat partitions (fp32 masters, first and second moments: [file][group]), the
// fragments of each parameter in them by DeepSpeed name, and Adam's step count. The partitions are
// views into the files (file_view): they live as long as the TorchFiles.
struct OptimizerPartitions {
    std::map<std::string, std::vector<StatePiece>> pieces;
    std::optional<std::int64_t> steps;
    std::vector<std::vector<at::Tensor>> master, m1, m2;
    std::optional<std::size_t> num_groups;
};

// A flat partition found while parsing, read after: the big tensors of all files go to the reader
// threads together (one group's partition can be most of a file).
struct PendingRead {
    ckpt::TorchTensor tensor;
    at::Tensor* out = nullptr;  // into OptimizerPartitions' vectors, sized before the pointers are taken
};

// Parses file `k` (BF16_Optimizer's or ZeRO stage 1's state_dict) into `out`; its partitions go to `reads`.
void read_partition(const ckpt::TorchFile& file, std::size_t k, const std::string& first_path, OptimizerPartitions& out,
                    std::vector<PendingRead>& reads) {
    const std::string where = file.path();
    const auto& fosd = file.root().get("optimizer_state_dict");
    const auto& fp32 = fosd.get("single_partition_of_fp32_groups").as_list();
    const auto& base = fosd.get("base_optimizer_state");
    const auto& state = base.get("state").as_dict();
    const auto& groups = base.get("param_groups").as_list();
    const auto& mappings = fosd.get("param_slice_mappings").as_list();
    if (fp32.size() != mappings.size() || groups.size() != mappings.size())
        throw Error(where + ": " + std::to_string(mappings.size()) + " param_slice_mappings for " +
                    std::to_string(fp32.size()) + " fp32 groups and " + std::to_string(groups.size()) + " param groups");
    if (out.num_groups && *out.num_groups != mappings.size())
        throw Error(where + ": " + std::to_string(mappings.size()) + " parameter groups, " + first_path + " has " +
                    std::to_string(*out.num_groups));
    out.num_groups = mappings.size();
    out.master[k].resize(mappings.size());
    out.m1[k].resize(mappings.size());
    out.m2[k].resize(mappings.size());
    for (std::size_t g = 0; g < mappings.size(); ++g) {
        for (const auto& [key, v] : mappings[g].ordered_dict_items().items()) {
            const auto& st = v.as_object().state.as_dict();
            out.pieces[key.as_str()].push_back({k, g, st.find("start")->as_int(), st.find("numel")->as_int()});
        }
        const auto* step = groups[g].find("step");
        std::int64_t sv = 0;
        if (step && step->type() == ckpt::PyType::Int) sv = step->as_int();
        else if (const auto f = step && step->type() == ckpt::PyType::Float ? truncate_to_int64(step->as_float())
                                                                             : std::nullopt)
            sv = *f;
        else throw Error(where + ": param group " + std::to_string(g) + " has no step count (a number within int64's range)");
        if (out.steps && *out.steps != sv) throw Error(where + ": param groups have different step counts");
        out.steps = sv;
        const std::string what = "group " + std::to_string(g);
        reads.push_back({file.tensor(fp32[g], what + " fp32"), &out.master[k][g]});
        const auto* s = state.find(PyValue::integer(static_cast<std::int64_t>(g)));
        if (!s) throw Error(where + ": no Adam state for param group " + std::to_string(g));
        reads.push_back({file.tensor(s->get("exp_avg"), what + " exp_avg"), &out.m1[k][g]});
        reads.push_back({file.tensor(s->get("exp_avg_sq"), what + " exp_avg_sq"), &out.m2[k][g]});
    }
}

OptimizerPartitions read_partitions(const std::vector<std::unique_ptr<ckpt::TorchFile>>& files) {
    OptimizerPartitions out;
    out.master.resize(files.size());
    out.m1.resize(files.size());
    out.m2.resize(files.size());
    std::vector<PendingRead> reads;
    for (std::size_t k = 0; k < files.size(); ++k) read_partition(*files[k], k, files[0]->path(), out, reads);
    // The CRC-32 check and the first touch of the pages (the disk reads) of each partition, in parallel.
    // No read-ahead hint here: one partition is read front to back, which the kernel's own read-ahead
    // of a mapped file follows (madvise WILLNEED on a 1.2 GB file measured slower, not faster).
    parallel_for(reads.size(), reader_threads(), [&](std::size_t i) {
        *reads[i].out = file_view(reads[i].tensor).to(at::kFloat);
    });
    return out;
}

// Each parameter's masters and moments put back together from its fragments, in rank order, so a
// checkpoint of any data-parallel size resumes at any other.
struct WholeStates {
    std::vector<at::Tensor> master, m1, m2;
};
WholeStates whole_states(const OptimizerPartitions& parts, const std::vector<std::unique_ptr<ckpt::TorchFile>>& files,
                         const model::GptModel& model, const fs::path& path) {
    WholeStates out;
    for (const auto& p : model.parameters()) {
        const auto name = ds_param_name(p);
        const auto it = parts.pieces.find(name);
        if (it == parts.pieces.end()) throw Error(path.string() + ": no optimizer state for parameter " + name);
        std::int64_t total = 0;
        for (const auto& pc : it->second) total += pc.numel;
        if (total != p.tensor.numel())
            throw Error(path.string() + ": optimizer state of " + name + " has " + std::to_string(total) +
                        " elements, the parameter " + std::to_string(p.tensor.numel()));
        auto whole = [&](const std::vector<std::vector<at::Tensor>>& flats, const char* what) {
            std::vector<at::Tensor> pieces;
            for (const auto& pc : it->second) {
                const auto& flat = flats[pc.file][pc.group];
                if (pc.start < 0 || pc.numel < 0 || pc.start + pc.numel > flat.numel())
                    throw Error(files[pc.file]->path() + ": " + what + " fragment of " + name +
                                " lies outside its group's partition");
                pieces.push_back(flat.narrow(0, pc.start, pc.numel));
            }
            return (pieces.size() == 1 ? pieces[0] : at::cat(pieces)).view(p.tensor.sizes()).to(p.tensor.device());
        };
        out.master.push_back(whole(parts.master, "fp32"));
        out.m1.push_back(whole(parts.m1, "exp_avg"));
        out.m2.push_back(whole(parts.m2, "exp_avg_sq"));
    }
    return out;
}

// The fp16 loss scaler of an fp16 run: Megatron's own state when mds wrote it, else DeepSpeed's
// scaler object (`file`: where the optimizer_state_dict `osd` is).
void load_loss_scaler(const PyValue& osd, const std::string& file, const flags::TrainArgs& a, TrainingProgress& progress) {
    if (const auto* gs = osd.find("grad_scaler"); gs && !a.parallel.deepspeed) {
        optim::MegatronGradScaler::State st;
        st.scale = static_cast<float>(number(gs->get("scale")));
        st.growth_tracker = gs->get("growth_tracker").as_int();
        st.hysteresis_tracker = gs->get("hysteresis_tracker").as_int();
        st.skipped_iterations = progress.skipped_steps;
        progress.megatron_scaler = st;
        return;
    }
    const auto* ls = osd.find("loss_scaler");
    if (!ls || ls->type() != ckpt::PyType::Object || !ls->as_object().has_state || ls->as_object().state.type() != ckpt::PyType::Dict)
        throw Error(file + ": no loss_scaler state for this fp16 run");
    const auto& st = ls->as_object().state;
    auto get = [&](const char* k, double fallback) {
        const auto* v = st.find(k);
        return v && (v->type() == ckpt::PyType::Int || v->type() == ckpt::PyType::Float) ? number(*v) : fallback;
    };
    if (a.parallel.deepspeed) {
        optim::DeepSpeedLossScaler::State ds;
        ds.cur_scale = get("cur_scale", 1.0);
        auto get_int = [&](const char* k, double fallback) {
            const double v = get(k, fallback);
            const auto i = truncate_to_int64(v);
            if (!i) throw Error(file + ": loss_scaler." + k + " is " + std::to_string(v) + ", not an int64");
            return *i;
        };
        ds.cur_iter = get_int("cur_iter", 0);
        ds.last_overflow_iter = get_int("last_overflow_iter", -1);
        ds.cur_hysteresis = get_int("cur_hysteresis", static_cast<double>(a.optimizer.hysteresis));
        ds.skipped_iterations = progress.skipped_steps;
        progress.deepspeed_scaler = ds;
    } else {
        // A DeepSpeed run resumed without --deepspeed: Megatron's scaler starts from the saved scale.
        optim::MegatronGradScaler::State mg;
        mg.scale = static_cast<float>(get("cur_scale", 1.0));
        mg.hysteresis_tracker = a.optimizer.hysteresis;
        mg.skipped_iterations = progress.skipped_steps;
        progress.megatron_scaler = mg;
    }
}

}  // namespace

void CheckpointLoader::load_optimizer(AdamOptimizer& optimizer, const model::GptModel& model, TrainingProgress& progress) const {
    if (impl_->universal) {
        const auto states = read_universal_states(impl_->dir, model, static_cast<int>(impl_->args->parallel.tensor_model_parallel_size),
                                                  impl_->tp_rank);
        optimizer.load_state(states.master, states.m1, states.m2, states.steps);
        if (!impl_->args->optimizer.fp16) return;
        // zero/optimizer_state.pt is the source's optimizer_state_dict without the partitions.
        const ckpt::TorchFile osd(states.optimizer_state);
        load_loss_scaler(osd.root(), osd.path(), *impl_->args, progress);
        return;
    }
    fs::path path;
    const auto files = open_optimizer_files(impl_->dir, impl_->args->optimizer.bf16, impl_->mp, path);
    const OptimizerPartitions parts = read_partitions(files);
    const WholeStates states = whole_states(parts, files, model, path);
    optimizer.load_state(states.master, states.m1, states.m2, parts.steps.value_or(0));
    if (!impl_->args->optimizer.fp16) return;
    load_loss_scaler(files[0]->root().get("optimizer_state_dict"), files[0]->path(), *impl_->args, progress);
}

std::vector<std::string> CheckpointLoader::load_rng(const model::GptModel& model) const {
    return restore_rng_states(*impl_->mp_rank, model);
}

namespace {

// The schedule: BMD's AnnealingLR keys, megatron-core's extras where mds wrote them. `max_lr` is
// the flags' --lr, kept when the checkpoint has none.
optim::LrScheduleState read_lr_schedule(const PyValue* lr, const std::string& where, double max_lr) {
    if (!lr || lr->type() != ckpt::PyType::Dict) throw Error(where + ": no lr_scheduler state");
    optim::LrScheduleState s;
    auto f = [&](const char* k, double& dst) {
        if (const auto* v = lr->find(k); v && (v->type() == ckpt::PyType::Float || v->type() == ckpt::PyType::Int)) dst = number(*v);
    };
    auto i = [&](const char* k, std::int64_t& dst) {
        if (const auto* v = lr->find(k); v && (v->type() == ckpt::PyType::Int || v->type() == ckpt::PyType::Float))
            dst = static_cast<std::int64_t>(number(*v));
    };
    s.params.max_lr = max_lr;
    f("max_lr", s.params.max_lr);
    f("min_lr", s.params.min_lr);
    f("warmup_steps", s.params.lr_warmup_steps);
    i("decay_steps", s.params.lr_decay_steps);
    i("num_steps", s.num_steps);
    i("num_tokens", s.num_tokens);
    i("warmup_tokens", s.warmup_tokens);
    f("init_lr", s.params.init_lr);
    s.has_wd_schedule = lr->find("start_wd") != nullptr;
    f("start_wd", s.params.start_wd);
    f("end_wd", s.params.end_wd);
    i("wd_incr_steps", s.params.wd_incr_steps);
    if (const auto* v = lr->find("decay_style"); v && v->type() == ckpt::PyType::Str)
        s.params.lr_decay_style = optim::parse_lr_decay_style(v->as_str());
    if (const auto* v = lr->find("wd_incr_style"); v && v->type() == ckpt::PyType::Str)
        s.params.wd_incr_style = optim::parse_wd_incr_style(v->as_str());
    if (const auto* v = lr->find("decay_tokens"); v && v->type() == ckpt::PyType::Int) s.params.lr_decay_tokens = v->as_int();
    return s;
}

}  // namespace

std::int64_t CheckpointLoader::hf_vocab_size() const {
    const auto* v = impl_->mp_rank->root().find("mds_hf_vocab_size");
    return v && v->type() == ckpt::PyType::Int && v->as_int() > 0 ? v->as_int() : 0;
}

TrainingProgress CheckpointLoader::progress() const {
    const auto& r = impl_->mp_rank->root();
    const std::string where = impl_->mp_rank->path();
    TrainingProgress p;
    p.iteration = iteration();
    if (const auto* a = r.find("args"); a && a->is_object("argparse", "Namespace")) {
        const auto& ns = a->namespace_attributes();
        auto get_int = [&](const char* k) {
            const auto* v = ns.find(k);
            return v && v->type() == ckpt::PyType::Int ? v->as_int() : 0;
        };
        p.consumed_train_samples = get_int("consumed_train_samples");
        p.consumed_valid_samples = get_int("consumed_valid_samples");
        p.consumed_train_tokens = get_int("consumed_train_tokens");
        if (const auto* g = ns.find("gigaflos_no_embeds"); g && (g->type() == ckpt::PyType::Float || g->type() == ckpt::PyType::Int))
            p.gigaflos_no_embeds = number(*g);
    }
    if (p.consumed_train_tokens == 0)
        if (const auto* t = r.find("tokens"); t && t->type() == ckpt::PyType::Int) p.consumed_train_tokens = t->as_int();
    if (const auto* s = r.find("skipped_steps"); s && s->type() == ckpt::PyType::Int) p.skipped_steps = s->as_int();
    if (const auto* m = r.find("mds_mlflow_run_id"); m && m->type() == ckpt::PyType::Str) p.mlflow_run_id = m->as_str();
    p.hf_vocab_size = hf_vocab_size();
    p.lr = read_lr_schedule(r.find("lr_scheduler"), where, impl_->args->optimizer.lr);
    return p;
}

}  // namespace mds::trainer
