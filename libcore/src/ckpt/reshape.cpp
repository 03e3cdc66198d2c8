#include "mds/ckpt/reshape.h"

#include <algorithm>
#include <deque>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <sys/stat.h>  // lstat

#include "mds/util/parallel.h"
#include "ckpt/reshape_plan.h"
#include "mds/ckpt/ds_layout.h"
#include "mds/ckpt/torch_stream_writer.h"
#include "mds/util/error.h"
#include "mds/util/files.h"
#include "mds/util/safe_paths.h"  // refuse_overlap, prepare_output_dir, temp_path_for, printable

namespace mds::ckpt {
namespace fs = std::filesystem;
using namespace reshape_detail;

namespace {

std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

PyValue ordered_dict() { return PyValue::object("collections", "OrderedDict", PyValue::tuple({})); }

// Shape and TP layout of one tensor of a layer file in the target.
struct TargetTensor {
    DType dtype;
    std::vector<std::int64_t> shape, shard;
    TpLayout layout;
    bool vocab;
};

TargetTensor target_tensor(const Plan& plan, const DsCheckpoint::Layer& l, int layer, const std::string& name) {
    TargetTensor t{l.dtype(name), l.shape(name), {}, tp_layout(name, plan.glu), false};
    t.vocab = layer == plan.source->layers().front() && name == "word_embeddings.weight";
    if (t.vocab) t.shape[0] = plan.target_vocab;
    t.shard = tp_shard_shape(t.layout, t.shape, plan.tp, plan.source->layer_file(layer, 0) + ": " + name);
    return t;
}

std::uint64_t layer_bytes(const Plan& plan) {
    std::uint64_t total = 0;
    for (const auto& p : plan.params)
        total += static_cast<std::uint64_t>(p.shard_numel() * plan.tp) * dtype_size(p.dtype);
    return total;
}

// The source shards of one tensor, read in place from the mapped files, when the target shards
// can be streamed from them without building the global tensor: contiguous shards of one dtype,
// no fused-QKV row reorder (checkpoint_version < 2), no GLU sub-parameters, no vocabulary re-pad,
// and either a TP split (concatenation along dim 0 or 1) or one replicated source shard.
// Otherwise (empty result) the tensor goes through DsCheckpoint::Layer::merge.
struct SourceShards {
    std::vector<std::span<const std::byte>> bytes;  // one per source TP rank, CRC-32 checked
    std::vector<std::size_t> piece_bytes;           // per rank: bytes of one row's slice (dim 1) or the whole shard (dim 0)
    std::size_t rows = 0;                           // global dim 0 (row-parallel only)
};

std::optional<SourceShards> direct_shards(const Plan& plan, const std::vector<std::unique_ptr<TorchFile>>& files, const std::string& name,
                                          const TargetTensor& t, const std::vector<std::int64_t>& global_shape) {
    if (t.layout.sub_params != 1 || (t.vocab && plan.vocab_changes())) return std::nullopt;
    if (name.find("query_key_value.") != std::string::npos && plan.source->checkpoint_version() < 2.0) return std::nullopt;
    if (t.layout.rule == TpRule::Replicated && files.size() != 1) return std::nullopt;  // averaged by merge()
    const std::size_t dim = static_cast<std::size_t>(t.layout.dim());
    if (t.layout.rule != TpRule::Replicated && global_shape.size() <= dim) return std::nullopt;
    SourceShards out;
    std::int64_t split = 0;
    for (const auto& f : files) {
        const auto* v = f->root().ordered_dict_items().find(name);
        if (!v) return std::nullopt;  // merge() names what is missing
        const TorchTensor s = f->tensor(*v, name);
        if (s.dtype != t.dtype || !s.contiguous() || s.shape.size() != global_shape.size()) return std::nullopt;
        for (std::size_t k = 0; k < s.shape.size(); ++k)
            if (k != dim || t.layout.rule == TpRule::Replicated)
                if (s.shape[k] != global_shape[k]) return std::nullopt;
        split += t.layout.rule == TpRule::Replicated ? 0 : s.shape[dim];
        out.bytes.push_back(s.bytes());
        std::size_t piece = out.bytes.back().size();
        if (t.layout.rule == TpRule::RowParallel) piece = global_shape[0] == 0 ? 0 : piece / static_cast<std::size_t>(global_shape[0]);
        out.piece_bytes.push_back(piece);
    }
    if (t.layout.rule != TpRule::Replicated && split != global_shape[dim]) return std::nullopt;
    out.rows = global_shape.empty() ? 1 : static_cast<std::size_t>(global_shape[0]);
    return out;
}

// Writes bytes [from, from + n) of the virtual concatenation of `pieces` (piece k of `sizes[k]`
// bytes at pieces[k] + offset) to `w`: the slices of one row, or the shards of a dim-0 split.
void write_range(TorchStreamWriter& w, const std::vector<std::span<const std::byte>>& pieces, const std::vector<std::size_t>& sizes,
                 std::size_t offset, std::size_t from, std::size_t n) {
    std::size_t at = 0;  // start of piece k in the concatenation
    for (std::size_t k = 0; k < pieces.size() && n > 0; at += sizes[k], ++k) {
        if (from >= at + sizes[k]) continue;
        const std::size_t skip = from - at, take = std::min(n, sizes[k] - skip);
        w.write(pieces[k].subspan(offset + skip, take));
        from += take;
        n -= take;
    }
}

// Target shard `rank` of `T` of a tensor whose source shards are read in place (direct_shards).
void write_direct_shard(TorchStreamWriter& w, const SourceShards& src, TpRule rule, int T, int rank) {
    if (rule == TpRule::Replicated) {
        w.write(src.bytes[0]);
        return;
    }
    std::size_t whole = 0;
    for (auto b : src.piece_bytes) whole += b;
    const std::size_t part = whole / static_cast<std::size_t>(T);  // tp_shard_shape checked divisibility
    if (rule == TpRule::ColumnParallel) {
        write_range(w, src.bytes, src.piece_bytes, 0, part * static_cast<std::size_t>(rank), part);
        return;
    }
    // Row-parallel: every row's columns [rank * part, (rank + 1) * part), gathered from the source
    // slices of that row; the row's slice in shard k starts at row * piece_bytes[k].
    for (std::size_t row = 0; row < src.rows; ++row) {
        std::size_t at = 0;
        std::size_t from = part * static_cast<std::size_t>(rank), n = part;
        for (std::size_t k = 0; k < src.bytes.size() && n > 0; at += src.piece_bytes[k], ++k) {
            if (from >= at + src.piece_bytes[k]) continue;
            const std::size_t skip = from - at, take = std::min(n, src.piece_bytes[k] - skip);
            w.write(src.bytes[k].subspan(row * src.piece_bytes[k] + skip, take));
            from += take;
            n -= take;
        }
    }
}

// The layer files of one layer index for the target TP degree: each tensor's target shards
// streamed into all T files, read in place from the source shards where a plain split allows
// (direct_shards), else from the tensor merged once over the source shards and re-padded.
void write_layer(const Plan& plan, int layer, const fs::path& dir, const std::function<void(std::uint64_t)>& progress) {
    const auto l = plan.source->open_layer(layer);
    const int T = plan.tp;
    std::vector<std::unique_ptr<TorchFile>> source_files;  // the same shards, for reading tensors in place
    for (int r = 0; r < plan.source->tp(); ++r)
        source_files.push_back(std::make_unique<TorchFile>(plan.source->layer_file(layer, r), plan.verify));
    std::vector<std::unique_ptr<TorchStreamWriter>> writers;
    std::vector<PyValue> roots;
    std::vector<TargetTensor> targets;
    for (int r = 0; r < T; ++r) {
        writers.push_back(std::make_unique<TorchStreamWriter>((dir / ds_layer_file(layer, r)).string(), "cpu"));
        roots.push_back(ordered_dict());
    }
    for (const auto& name : l.names()) {
        targets.push_back(target_tensor(plan, l, layer, name));
        for (int r = 0; r < T; ++r)
            roots[static_cast<std::size_t>(r)].as_object().dict_items.set(name, writers[static_cast<std::size_t>(r)]->declare(targets.back().dtype, targets.back().shard));
    }
    for (int r = 0; r < T; ++r) writers[static_cast<std::size_t>(r)]->begin(roots[static_cast<std::size_t>(r)]);
    for (std::size_t i = 0; i < l.names().size(); ++i) {
        const auto& t = targets[i];
        const std::size_t esize = dtype_size(t.dtype);
        const std::size_t shard_bytes = static_cast<std::size_t>(numel_of(t.shard)) * esize;
        if (const auto direct = direct_shards(plan, source_files, l.names()[i], t, l.shape(l.names()[i]))) {
            for (int r = 0; r < T; ++r) write_direct_shard(*writers[static_cast<std::size_t>(r)], *direct, t.layout.rule, T, r);
            if (progress) progress(shard_bytes * static_cast<std::uint64_t>(T));
            continue;
        }
        GlobalTensor g = l.merge(l.names()[i]);
        const std::size_t row_bytes = static_cast<std::size_t>(numel_of(g.shape) / std::max<std::int64_t>(1, g.shape.empty() ? 1 : g.shape[0])) * esize;
        if (t.layout.sub_params == 2) glu_rows_to_global(g.data, g.shape[0], row_bytes, plan.source->tp());
        if (t.vocab && plan.vocab_changes()) repad_vocab_rows(g.data, g.shape, row_bytes, plan.original_vocab, plan.target_vocab);
        for (int r = 0; r < T; ++r) {
            auto& w = *writers[static_cast<std::size_t>(r)];
            if (t.layout.rule == TpRule::Replicated) {
                w.write(g.data);
            } else if (t.layout.rule == TpRule::ColumnParallel && t.layout.sub_params == 1) {
                w.write(std::span<const std::byte>(g.data.data() + static_cast<std::size_t>(r) * shard_bytes, shard_bytes));
            } else {
                w.write(tp_shard(t.layout, g.data, g.shape, esize, T, r));
            }
        }
        if (progress) progress(shard_bytes * static_cast<std::uint64_t>(T));
    }
    for (auto& w : writers) w->finish();
}

// A copy of the source's argparse.Namespace with the new parallel sizes and vocabulary.
PyValue target_args(const Plan& plan, const PyValue& args) {
    auto out = PyValue::object(args.as_object().cls.module, args.as_object().cls.name, args.as_object().args, args.as_object().newobj);
    out.as_object() = args.as_object();
    auto attrs = PyValue::dict();
    const auto& src = args.namespace_attributes();
    for (const auto& [k, v] : src.items()) attrs.as_dict().set(k, v);
    attrs.as_dict().set("tensor_model_parallel_size", PyValue::integer(plan.tp));
    attrs.as_dict().set("pipeline_model_parallel_size", PyValue::integer(plan.pp));
    attrs.as_dict().set("padded_vocab_size", PyValue::integer(plan.target_vocab));
    if (src.find("model_parallel_size")) attrs.as_dict().set("model_parallel_size", PyValue::integer(plan.tp));  // checkpoint_version < 3 naming
    if (src.find("data_parallel_size")) attrs.as_dict().set("data_parallel_size", PyValue::integer(plan.dp));
    if (src.find("world_size")) attrs.as_dict().set("world_size", PyValue::integer(static_cast<std::int64_t>(plan.tp) * plan.pp * plan.dp));
    out.as_object().has_state = true;
    out.as_object().state = attrs;
    return out;
}

// mp_rank_{pp*T+tp} files: the source's rank-0 engine file with the new world sizes, args,
// vocabulary, parameter shapes and buffer names of each stage (§3, §6.6 step 4).
void write_mp_rank_files(const Plan& plan, const fs::path& dir) {
    const TorchFile& src = *plan.mp_rank0;
    const PyValue& root = src.root();
    const PyValue args = target_args(plan, root.get("args"));
    for (int s = 0; s < plan.pp; ++s) {
        const Stage& st = plan.stages[static_cast<std::size_t>(s)];
        for (int r = 0; r < plan.tp; ++r) {
            TorchSaveWriter w((dir / ds_mp_rank_file(s * plan.tp + r)).string(), "cpu");
            std::deque<std::vector<std::byte>> keep;
            const TensorMapper copy = [&](const PyValue& v, const std::string& what) {
                const auto t = src.tensor(v, what);
                keep.push_back(t.gather());
                return w.add_tensor(t.dtype, t.shape, std::span<const std::byte>(keep.back()));
            };
            auto out = PyValue::dict();
            bool has_info = false, has_version = false;
            for (const auto& [k, v] : root.as_dict().items()) {
                const std::string key = k.type() == PyType::Str ? k.as_str() : "";
                if (key == "mp_world_size") {
                    out.as_dict().set(k, PyValue::integer(plan.pp * plan.tp));
                } else if (key == "dp_world_size") {
                    out.as_dict().set(k, PyValue::integer(plan.dp));
                } else if (key == "args") {
                    out.as_dict().set(k, args);
                } else if (key == "checkpoint_version") {
                    has_version = true;
                    out.as_dict().set(k, PyValue::floating(3.0));  // QKV rows are in the [n, 3, d] order now (§4.4)
                } else if (key == "checkpoint_info" && v.type() == PyType::Dict) {
                    has_info = true;
                    auto info = PyValue::dict();
                    for (const auto& [ik, iv] : v.as_dict().items()) info.as_dict().set(ik, iv);
                    info.as_dict().set("padded_vocab_size", PyValue::integer(plan.target_vocab));
                    if (plan.original_vocab > 0) info.as_dict().set("original_vocab_size", PyValue::integer(plan.original_vocab));
                    out.as_dict().set(k, info);
                } else if (key == "param_shapes") {
                    if (v.is_none()) {
                        out.as_dict().set(k, v);
                        continue;
                    }
                    out.as_dict().set(k, stage_param_shapes(plan, s));
                } else if (key == "buffer_names") {
                    std::vector<PyValue> names;
                    for (const auto& b : st.buffer_names) names.push_back(PyValue::str(b));
                    out.as_dict().set(k, PyValue::list(std::move(names)));
                } else if (key == "optimizer") {
                    out.as_dict().set(k, PyValue::none());  // a per-rank optimizer state cannot follow a reshape
                } else {
                    out.as_dict().set(k, map_tensors(v, copy, k.repr(60)));
                }
            }
            if (!has_version) out.as_dict().set("checkpoint_version", PyValue::floating(3.0));
            if (!has_info && plan.original_vocab > 0) {
                auto info = PyValue::dict();
                info.as_dict().set("padded_vocab_size", PyValue::integer(plan.target_vocab));
                info.as_dict().set("original_vocab_size", PyValue::integer(plan.original_vocab));
                out.as_dict().set("checkpoint_info", info);
            }
            w.finish(out);
        }
    }
}

std::vector<std::string> output_files(const Plan& plan) {
    std::vector<std::string> files;
    for (int layer : plan.source->layers())
        for (int r = 0; r < plan.tp; ++r) files.push_back(ds_layer_file(layer, r));
    for (int i = 0; i < plan.pp * plan.tp; ++i) files.push_back(ds_mp_rank_file(i));
    if (plan.optimizer)
        for (int d = 0; d < plan.dp; ++d)
            for (int i = 0; i < plan.pp * plan.tp; ++i) files.push_back(ds_optim_file(true, d, i));
    std::sort(files.begin(), files.end());
    return files;
}

// The source root's `latest` tag, or nothing when it is absent or unusable (then no tracker file is copied).
std::optional<std::string> source_latest(const std::string& root) {
    try {
        return read_latest_tag(root);
    } catch (const Error&) {
        return std::nullopt;
    }
}

void sync_tree(const fs::path& dir) {
    for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_directory()) sync_directory(e.path().string());
    sync_directory(dir.string());
}

// The report of `plan`: what the reshape reads and writes, and where.
ReshapeReport plan_report(const Plan& plan, const ReshapeOptions& options, const fs::path& root) {
    ReshapeReport rep;
    rep.source = plan.source->directory();
    rep.tag = plan.tag;
    rep.source_tp = plan.source->tp();
    rep.source_pp = plan.source->pp();
    rep.source_dp = plan.source_dp;
    rep.target_tp = plan.tp;
    rep.target_pp = plan.pp;
    rep.target_dp = plan.dp;
    rep.layers = plan.source->layers();
    rep.source_padded_vocab = plan.source_vocab;
    rep.target_padded_vocab = plan.target_vocab;
    rep.original_vocab = plan.original_vocab;
    rep.partition_method = plan.partition_method;
    rep.partition_algorithm = options.partition_algorithm;
    for (const auto& st : plan.stages) rep.stages.push_back(st.info);
    rep.optimizer_groups = plan.groups;
    rep.optimizer = plan.optimizer != nullptr;
    rep.files = output_files(plan);
    rep.output = (root / plan.tag).string();
    if (options.write_universal) rep.universal_output = (root / (plan.tag + "_universal")).string();
    return rep;
}

// Existing output folders are replaced only with --overwrite, and only when they are folders.
void check_replaceable(const fs::path& final_dir, const fs::path& universal_dir, const ReshapeOptions& options) {
    for (const auto& d : {final_dir, universal_dir}) {
        if (d != final_dir && !options.write_universal) continue;
        struct stat st {};
        if (::lstat(d.c_str(), &st) != 0) continue;
        if (!S_ISDIR(st.st_mode))
            throw Error("'" + printable(d.string(), 200) + "' exists and is not a folder; refusing to replace it");
        if (!options.overwrite) throw Error(printable(d.string(), 200) + " exists; pass --overwrite to replace it");
    }
}

// Every target file into `tmp` (and the universal folder into `utmp`), with progress: one job per
// layer index (its T files), one for the mp_rank files and one per stage's optimizer files, run
// by options.workers threads (util/parallel.h). Each file is written whole by one thread, so its bytes
// do not depend on the number of workers.
void write_target(const Plan& plan, const ReshapeOptions& options, const fs::path& tmp, const fs::path& utmp) {
    const std::uint64_t total = layer_bytes(plan) + (plan.optimizer ? optimizer_bytes(plan) : 0);
    std::uint64_t done = 0, tensors = 0;
    std::mutex progress_mutex;  // workers report one after the other, in no fixed order
    const std::function<void(std::uint64_t)> step = [&](std::uint64_t n) {
        const std::lock_guard<std::mutex> lock(progress_mutex);
        done += n;
        if (options.progress) options.progress(++tensors, done, total);
    };
    std::vector<std::function<void()>> jobs;
    for (int layer : plan.source->layers()) jobs.emplace_back([&, layer] { write_layer(plan, layer, tmp, step); });
    jobs.emplace_back([&] { write_mp_rank_files(plan, tmp); });
    std::set<std::string> written;  // universal parameter states written (the tied embedding's by one stage only)
    std::mutex written_mutex;
    const std::string zero = options.write_universal ? (utmp / "zero").string() : std::string();
    if (!zero.empty()) fs::create_directories(zero);
    if (plan.optimizer)
        for (int s = 0; s < plan.pp; ++s)
            jobs.emplace_back([&, s] { write_stage_optimizer(plan, s, tmp.string(), zero, written, written_mutex, step); });
    parallel_for(jobs.size(), workers_or_cores(options.workers), [&](std::size_t i) { jobs[i](); });
    if (plan.optimizer && options.write_universal) write_universal_common(plan, utmp.string());
}

// The durable finished folders move into place; `latest` (and Megatron's tracker file) last.
void publish(const Plan& plan, const ReshapeOptions& options, const fs::path& root, const fs::path& tmp, const fs::path& utmp) {
    const fs::path final_dir = root / plan.tag;
    const fs::path universal_dir = root / (plan.tag + "_universal");
    sync_directory(tmp.string());
    remove_tree(final_dir.string());
    fs::rename(tmp, final_dir);
    sync_directory(root.string());
    if (options.write_universal) {
        sync_tree(utmp);
        remove_tree(universal_dir.string());
        fs::rename(utmp, universal_dir);
        sync_directory(root.string());
        write_file_atomic((root / "latest_universal").string(), universal_dir.filename().string());
        sync_directory(root.string());
    }
    // `latest` moves last, once the tag is durable (§1.1).
    write_latest_tag(root.string(), plan.tag);
    // Megatron's tracker file says the same, when the source has one for this tag.
    const fs::path tracker = fs::path(plan.source_root) / "latest_checkpointed_iteration.txt";
    struct stat st {};
    if (::stat(tracker.c_str(), &st) == 0 && S_ISREG(st.st_mode) && source_latest(plan.source_root) == plan.tag)
        write_file_atomic((root / tracker.filename()).string(), read_file(tracker.string(), 4096, "Megatron tracker file"));
}

}  // namespace

ReshapeReport reshape_checkpoint(const std::string& src, const std::string& dst, const ReshapeOptions& options) {
    refuse_overlap(src, "source", dst, "destination");
    Plan plan = make_plan(src, options);
    // The tag folder may be a symbolic link: where it really lives must not be the destination.
    refuse_overlap(plan.source->directory(), "source tag", dst, "destination");
    const fs::path root = dst;
    ReshapeReport rep = plan_report(plan, options, root);
    if (options.dry_run) {
        check_output_dir(dst, "destination");
        return rep;
    }

    const fs::path final_dir = root / plan.tag;
    const fs::path universal_dir = root / (plan.tag + "_universal");
    check_replaceable(final_dir, universal_dir, options);
    for (const auto& removed : prepare_output_dir(root.string(), "destination"))
        if (options.note) options.note("removed " + printable(removed) + ", the unfinished output of an interrupted earlier run");
    const fs::path tmp = temp_path_for(final_dir.string()), utmp = temp_path_for(universal_dir.string());
    try {
        remove_tree(tmp.string());
        remove_tree(utmp.string());
        fs::create_directories(tmp);
        write_target(plan, options, tmp, utmp);
        for (const auto& f : fs::directory_iterator(tmp)) rep.bytes += file_size(f.path().string());
        publish(plan, options, root, tmp, utmp);
    } catch (...) {
        try {
            remove_tree(tmp.string());
            remove_tree(utmp.string());
        } catch (const Error&) {
            // The reshape's own error is the one to report.
        }
        throw;
    }
    return rep;
}

namespace {

std::string join(const std::vector<int>& v) {
    std::string out;
    for (int x : v) {
        if (!out.empty()) out += ' ';
        out += std::to_string(x);
    }
    return out;
}

}  // namespace

std::string describe_reshape(const ReshapeReport& r) {
    std::ostringstream o;
    o << "source: " << r.source << " (tp " << r.source_tp << ", pp " << r.source_pp << ", dp " << r.source_dp << "; layer files "
      << join(r.layers) << "; padded vocabulary " << r.source_padded_vocab << ")\n";
    o << "target: " << r.output << " (tp " << r.target_tp << ", pp " << r.target_pp << ", dp " << r.target_dp << "; padded vocabulary "
      << r.target_padded_vocab;
    if (r.original_vocab > 0) o << " for " << r.original_vocab << " tokens";
    o << ")\n";
    o << "partition: '" << r.partition_method << "' with DeepSpeed's " << partition_algorithm_name(r.partition_algorithm)
      << " partition_balanced\n";
    for (std::size_t s = 0; s < r.stages.size(); ++s) {
        const auto& st = r.stages[s];
        o << "  stage " << s << ": spec entries " << st.first_spec << ".." << st.end_spec - 1 << ", layers " << join(st.layers)
          << (st.tied_embedding ? " + tied embedding" : "") << ", " << st.parameters << " parameters per TP rank\n";
    }
    o << "optimizer: " << (r.optimizer ? "resharded (" + std::to_string(r.optimizer_groups) + " groups)" : std::string("not carried over"))
      << "\n";
    if (!r.universal_output.empty()) o << "universal: " << r.universal_output << "\n";
    o << "files (" << r.files.size() << "):\n";
    for (const auto& f : r.files) o << "  " << f << "\n";
    return o.str();
}

std::string reshape_report_json(const ReshapeReport& r) {
    nlohmann::json stages = nlohmann::json::array();
    for (const auto& st : r.stages)
        stages.push_back({{"first_spec", st.first_spec}, {"end_spec", st.end_spec}, {"layers", st.layers},
                          {"tied_embedding", st.tied_embedding}, {"parameters", st.parameters}});
    nlohmann::json j = {
        {"source", {{"path", r.source}, {"tag", r.tag}, {"tp", r.source_tp}, {"pp", r.source_pp}, {"dp", r.source_dp},
                    {"layers", r.layers}, {"padded_vocab_size", r.source_padded_vocab}}},
        {"target", {{"path", r.output}, {"tp", r.target_tp}, {"pp", r.target_pp}, {"dp", r.target_dp},
                    {"padded_vocab_size", r.target_padded_vocab}, {"stages", stages}, {"files", r.files}}},
        {"original_vocab_size", r.original_vocab > 0 ? nlohmann::json(r.original_vocab) : nlohmann::json()},
        {"partition_method", r.partition_method},
        {"partition_algorithm", partition_algorithm_name(r.partition_algorithm)},
        {"optimizer", r.optimizer},
        {"optimizer_groups", r.optimizer_groups},
        {"universal", r.universal_output.empty() ? nlohmann::json() : nlohmann::json(r.universal_output)},
        {"bytes", r.bytes}};
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace mds::ckpt
