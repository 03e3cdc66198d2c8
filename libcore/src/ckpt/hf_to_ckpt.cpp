#include "mds/ckpt/hf_to_ckpt.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "ckpt/hf_to_ckpt_plan.h"
#include "ckpt/transpose_rows.h"
#include "mds/ckpt/ds_layout.h"
#include "mds/ckpt/torch_file.h"           // TorchSaveWriter
#include "mds/ckpt/torch_stream_writer.h"
#include "mds/util/error.h"
#include "mds/util/files.h"
#include "mds/util/parallel.h"    // parallel_for, workers_or_cores
#include "mds/util/safe_paths.h"  // refuse_overlap, check_replaceable_output, write_output_folder

namespace mds::ckpt {
namespace fs = std::filesystem;
using namespace hf2ck_detail;

std::int64_t megatron_padded_vocab(std::int64_t vocab_size, std::int64_t divisible_by, int tp) {
    if (divisible_by < 1) throw UsageError("--make-vocab-size-divisible-by " + std::to_string(divisible_by) + ": expected at least 1");
    if (tp < 1) throw UsageError("--target-tp " + std::to_string(tp) + ": expected at least 1");
    if (vocab_size < 1) throw Error("vocabulary size " + std::to_string(vocab_size) + ": expected at least 1");
    return padded_vocab_size(vocab_size, divisible_by, tp, 0);
}

namespace {

// One parameter's global tensor in Megatron's layout and the output dtype: a view into the mapped
// Hugging Face file when nothing changes, else built in `owned`.
struct GlobalTensorBytes {
    std::vector<std::byte> owned, scratch;
    std::span<const std::byte> bytes;
};

// Elements of `src` (dtype `from`) as dtype `to`, rounded to nearest even; a finite value that
// does not fit the narrower type is an error, not an inf in the checkpoint.
std::vector<std::byte> convert_dtype(std::span<const std::byte> src, DType from, DType to, const std::string& where) {
    const std::size_t fs_ = dtype_size(from), ts = dtype_size(to), n = src.size() / fs_;
    std::vector<std::byte> out(n * ts);
    for (std::size_t i = 0; i < n; ++i) {
        const float v = load_float(from, src.data() + i * fs_);
        store_float(to, v, out.data() + i * ts);
        if (std::isfinite(v) && !std::isfinite(load_float(to, out.data() + i * ts)))
            throw Error(where + ": element " + std::to_string(i) + " (" + std::to_string(v) + ") does not fit " + dtype_name(to) +
                        " (choose another --dtype)");
    }
    return out;
}

// Rows [rows, cols] with elements of `esize` bytes transposed to [cols, rows].
std::vector<std::byte> transposed(std::span<const std::byte> src, std::int64_t rows, std::int64_t cols, std::size_t esize) {
    std::vector<const std::byte*> row(static_cast<std::size_t>(rows));
    for (std::int64_t i = 0; i < rows; ++i) row[static_cast<std::size_t>(i)] = src.data() + static_cast<std::size_t>(i * cols) * esize;
    std::vector<std::byte> out(src.size());
    transpose_rows(row.data(), out.data(), rows, cols, esize);
    return out;
}

// GPT2's fused QKV rows [3, heads, d] in Megatron's order [heads, 3, d] (rows of `row_bytes`).
std::vector<std::byte> qkv_reordered(std::span<const std::byte> src, std::int64_t heads, std::int64_t head_dim, std::size_t row_bytes) {
    std::vector<std::byte> out(src.size());
    const std::int64_t rows = 3 * heads * head_dim;
    for (std::int64_t r = 0; r < rows; ++r)
        std::memcpy(out.data() + static_cast<std::size_t>(r) * row_bytes,
                    src.data() + static_cast<std::size_t>(hf_qkv_row(r, heads, head_dim)) * row_bytes, row_bytes);
    return out;
}

void global_tensor(const Plan& plan, const Param& p, GlobalTensorBytes& g) {
    const HfFolder& folder = *plan.folder;
    const std::string where = folder.where(*p.source);
    std::span<const std::byte> src = folder.bytes(*p.source, g.scratch);
    if (p.source->dtype != plan.dtype) {
        g.owned = convert_dtype(src, p.source->dtype, plan.dtype, where);
        src = g.owned;
    }
    const std::size_t esize = dtype_size(plan.dtype);
    const HfLayout layout = p.place.layout;
    if (layout == HfLayout::Transpose || layout == HfLayout::QkvTranspose) {
        // Stored [in, out] (Conv1D): Megatron's [out, in] is its transpose.
        auto t = transposed(src, p.source->shape[0], p.source->shape[1], esize);
        g.owned = std::move(t);
        src = g.owned;
    }
    if (layout == HfLayout::Qkv || layout == HfLayout::QkvTranspose) {
        const std::size_t row_bytes = p.shape.size() == 2 ? static_cast<std::size_t>(p.shape[1]) * esize : esize;
        auto q = qkv_reordered(src, plan.sizes.heads, plan.sizes.hidden / plan.sizes.heads, row_bytes);
        g.owned = std::move(q);
        src = g.owned;
    }
    if (p.vocab && p.shape[0] != p.source->shape[0]) {
        // Megatron's padding rows: zeros past the Hugging Face vocabulary.
        if (g.owned.empty()) g.owned.assign(src.begin(), src.end());
        g.owned.resize(static_cast<std::size_t>(p.shape[0] * p.shape[1]) * esize, std::byte{0});
        src = g.owned;
    }
    g.bytes = src;
}

// The T layer files of layer index `layer`: every parameter's global tensor built once and its
// TP shards written into all of them (the layout mds-ckpt-reshape's write_layer gives).
void write_layer(const Plan& plan, int layer, const fs::path& dir, const std::function<void(std::uint64_t)>& step) {
    const int T = plan.tp;
    std::vector<const Param*> params;
    for (const auto& p : plan.params)
        if (p.layer == layer) params.push_back(&p);
    std::vector<std::unique_ptr<TorchStreamWriter>> writers;
    std::vector<PyValue> roots;
    for (int r = 0; r < T; ++r) {
        writers.push_back(std::make_unique<TorchStreamWriter>((dir / ds_layer_file(layer, r)).string(), "cpu"));
        roots.push_back(PyValue::object("collections", "OrderedDict", PyValue::tuple({})));
        for (const Param* p : params)
            roots.back().as_object().dict_items.set(p->place.name, writers.back()->declare(plan.dtype, p->shard));
    }
    for (int r = 0; r < T; ++r) writers[static_cast<std::size_t>(r)]->begin(roots[static_cast<std::size_t>(r)]);
    const std::size_t esize = dtype_size(plan.dtype);
    for (const Param* p : params) {
        GlobalTensorBytes g;
        global_tensor(plan, *p, g);
        const std::size_t shard_bytes = static_cast<std::size_t>(p->shard_bytes(plan.dtype));
        for (int r = 0; r < T; ++r) {
            auto& w = *writers[static_cast<std::size_t>(r)];
            if (p->layout.rule == TpRule::Replicated) w.write(g.bytes);
            else if (p->layout.rule == TpRule::ColumnParallel) w.write(g.bytes.subspan(static_cast<std::size_t>(r) * shard_bytes, shard_bytes));
            else w.write(tp_shard(p->layout, g.bytes, p->shape, esize, T, r));
        }
        if (step) step(static_cast<std::uint64_t>(shard_bytes) * static_cast<std::uint64_t>(T));
    }
    for (auto& w : writers) w->finish();
}

void write_mp_rank_files(const Plan& plan, const fs::path& dir) {
    for (int s = 0; s < plan.pp; ++s) {
        const PyValue root = mp_rank_root(plan, s);
        for (int r = 0; r < plan.tp; ++r) {
            TorchSaveWriter w((dir / ds_mp_rank_file(s * plan.tp + r)).string(), "cpu");
            w.finish(root);
        }
    }
}

void copy_tokenizer(const Plan& plan, const fs::path& out) {
    if (plan.tokenizer.files.empty()) return;
    fs::create_directories(out);
    for (const auto& f : plan.tokenizer.files) {
        AtomicOutput o((out / f).string());
        o.append_file((fs::path(plan.folder->directory()) / f).string());
        o.commit();
    }
    sync_directory(out.string());
}

// Nothing, or with --overwrite an earlier checkpoint root (`latest`) or an empty folder, stands at the output's place.
void check_destination(const fs::path& dir, bool overwrite) {
    check_replaceable_output(dir, overwrite, "latest", "`latest`", "checkpoint");
}

// Flag values no model can take: usage errors, before any file is read.
void check_options(const HfToCkptOptions& o) {
    if (o.target_tp < 1) throw UsageError("--target-tp " + std::to_string(o.target_tp) + ": expected at least 1");
    if (o.target_pp < 1) throw UsageError("--target-pp " + std::to_string(o.target_pp) + ": expected at least 1");
    if (o.make_vocab_size_divisible_by < 1)
        throw UsageError("--make-vocab-size-divisible-by " + std::to_string(o.make_vocab_size_divisible_by) + ": expected at least 1");
    if (o.seq_length < 0) throw UsageError("--seq-length " + std::to_string(o.seq_length) + ": expected at least 1");
    if (o.dtype && *o.dtype != DType::F32 && *o.dtype != DType::BF16 && *o.dtype != DType::F16)
        throw UsageError(std::string("--dtype ") + dtype_name(*o.dtype) + ": expected fp32, bf16 or fp16");
}

std::uint64_t total_bytes(const Plan& plan) {
    std::uint64_t n = 0;
    for (const auto& p : plan.params) n += p.shard_bytes(plan.dtype) * static_cast<std::uint64_t>(plan.tp);
    return n;
}

// Every file into `tmp`: one job per layer index (its T files) and one for the mp_rank files, on
// options.workers threads; each file is written whole by one thread, so its bytes do not depend on
// the number of workers.
void write_checkpoint(const Plan& plan, const HfToCkptOptions& o, const fs::path& tmp) {
    const fs::path tag_dir = tmp / kHfToCkptTag;
    fs::create_directories(tag_dir);
    const std::uint64_t total = total_bytes(plan);
    std::uint64_t done = 0;
    std::size_t tensors = 0;
    std::mutex progress_mutex;
    const std::function<void(std::uint64_t)> step = [&](std::uint64_t n) {
        const std::lock_guard<std::mutex> lock(progress_mutex);
        done += n;
        ++tensors;
        if (o.progress) o.progress(tensors, plan.params.size(), done, total);
    };
    std::vector<std::function<void()>> jobs;
    for (int layer : plan.layers) jobs.emplace_back([&, layer] { write_layer(plan, layer, tag_dir, step); });
    jobs.emplace_back([&] { write_mp_rank_files(plan, tag_dir); });
    jobs.emplace_back([&] { copy_tokenizer(plan, tmp / kHfTokenizerFolder); });
    parallel_for(jobs.size(), workers_or_cores(o.workers), [&](std::size_t i) { jobs[i](); });
    sync_directory(tag_dir.string());
    write_latest_tag(tmp.string(), kHfToCkptTag);
}

}  // namespace

HfToCkptReport convert_hf_to_ckpt(const std::string& hf_dir, const std::string& out, const HfToCkptOptions& o) {
    // "ckpt/", "." and "run/.." name the folder itself, never a part of it or its parent.
    const fs::path final_dir = plain_folder_path(out);
    if (final_dir.filename().empty()) throw UsageError("destination " + in_quotes(out) + ": not a folder that can be written and renamed");
    refuse_overlap(hf_dir, "source", final_dir.string(), "destination");
    check_options(o);
    check_destination(final_dir, o.overwrite);

    // Everything is read and checked before anything is written.
    const HfFolder folder(hf_dir, o.verify);
    const Plan plan = make_plan(folder, o);
    if (o.note)
        for (const auto& n : plan.notes) o.note(n);

    write_output_folder(
        final_dir, [&](const fs::path& tmp) { write_checkpoint(plan, o, tmp); },
        [&] { check_destination(final_dir, o.overwrite); }, o.note);

    HfToCkptReport rep;
    rep.output = final_dir.string();
    rep.tag = kHfToCkptTag;
    rep.model_type = hf_architecture_name(plan.arch);
    rep.tp = plan.tp;
    rep.pp = plan.pp;
    rep.vocab_size = plan.sizes.vocab;
    rep.padded_vocab_size = plan.padded_vocab;
    rep.dtype = dtype_name(plan.dtype);
    for (const auto& st : plan.stages) rep.stages.push_back(st.layers);
    rep.tensors = plan.params.size();
    rep.bytes = total_bytes(plan);
    for (const auto& e : fs::directory_iterator(final_dir / kHfToCkptTag)) rep.files.push_back(e.path().filename().string());
    std::sort(rep.files.begin(), rep.files.end());
    rep.tokenizer_files = plan.tokenizer.files;
    rep.train_flags = train_flags(plan, final_dir.string());
    return rep;
}

std::string hf_to_ckpt_report_json(const HfToCkptReport& r) {
    const nlohmann::json j = {{"output", r.output},
                              {"tag", r.tag},
                              {"model_type", r.model_type},
                              {"tp", r.tp},
                              {"pp", r.pp},
                              {"vocab_size", r.vocab_size},
                              {"padded_vocab_size", r.padded_vocab_size},
                              {"dtype", r.dtype},
                              {"stages", r.stages},
                              {"tensors", r.tensors},
                              {"bytes", r.bytes},
                              {"files", r.files},
                              {"tokenizer_files", r.tokenizer_files},
                              {"train_flags", r.train_flags}};
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace mds::ckpt
