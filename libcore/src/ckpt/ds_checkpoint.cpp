#include "mds/ckpt/ds_checkpoint.h"

#include <algorithm>
#include <cstring>  // memcpy
#include <filesystem>
#include <optional>

#include "mds/ckpt/ds_layout.h"
#include "mds/ckpt/tp_reshard.h"  // qkv_rows_to_v2
#include "mds/util/error.h"
#include "mds/util/safe_paths.h"  // checked_entry_name, printable

namespace mds::ckpt {
namespace fs = std::filesystem;
namespace {

// The step number of a tag: the run of digits right after "global_step", leading zeros dropped,
// so that a longer run is a larger number whatever its length; nullopt when there is no digit.
std::optional<std::string_view> tag_step(std::string_view name) {
    constexpr std::string_view kPrefix = "global_step";
    if (!name.starts_with(kPrefix)) return std::nullopt;
    std::size_t end = kPrefix.size();
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end == kPrefix.size()) return std::nullopt;
    std::string_view digits = name.substr(kPrefix.size(), end - kPrefix.size());
    while (digits.size() > 1 && digits.front() == '0') digits.remove_prefix(1);
    return digits;
}

}  // namespace

bool ds_tag_before(std::string_view a, std::string_view b) {
    const auto sa = tag_step(a), sb = tag_step(b);
    if (sa && sb && *sa != *sb) return sa->size() != sb->size() ? sa->size() < sb->size() : *sa < *sb;
    if (sa.has_value() != sb.has_value()) return sa.has_value();
    return a < b;
}

std::vector<std::string> list_ds_tags(const std::string& root, const std::function<void(const std::string&)>& skipped) {
    std::vector<std::string> tags;
    for (const auto& e : fs::directory_iterator(root)) {
        const std::string name = e.path().filename().string();
        std::error_code ec;
        if (!name.starts_with("global_step") || !e.is_directory(ec)) continue;
        try {
            tags.push_back(checked_entry_name(name, "--all"));
        } catch (const Error& err) {
            if (skipped) skipped(err.what());
        }
    }
    std::sort(tags.begin(), tags.end(), ds_tag_before);
    return tags;
}

TpRule tp_rule(const std::string& name) {
    if (name == "word_embeddings.weight" || name.find("query_key_value.") != std::string::npos ||
        name.find("dense_h_to_4h.") != std::string::npos)
        return TpRule::ColumnParallel;
    if (name.ends_with("self_attention.dense.weight") || name.ends_with("mlp.dense_4h_to_h.weight")) return TpRule::RowParallel;
    return TpRule::Replicated;
}

DsCheckpoint::DsCheckpoint(const std::string& path, const std::string& tag, bool verify) : verify_(verify) {
    std::error_code ec;
    if (!fs::is_directory(path, ec)) throw Error(printable(path, 200) + ": no such checkpoint folder");
    const fs::path base = plain_folder_path(path);
    fs::path dir = base;
    if (!tag.empty()) {
        dir = checked_tag_dir(base.string(), tag, "--tag");
    } else if (const auto latest = read_latest_tag(base.string())) {
        dir = checked_tag_dir(base.string(), *latest, printable((base / "latest").string(), 200));
    } else if (!parse_ds_tag(dir.filename().string()) && !fs::exists(dir / ds_mp_rank_file(0), ec)) {
        throw Error(printable(path, 200) + ": neither a checkpoint root with a `latest` file nor a global_step folder");
    }
    dir_ = dir.string();
    if (!fs::is_directory(dir, ec)) throw Error(printable(dir_, 200) + ": no such checkpoint tag folder");
    std::vector<std::pair<int, int>> files;
    int mp_files = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
        const auto name = e.path().filename().string();
        if (const auto l = parse_ds_layer_file(name)) files.emplace_back(l->layer, l->tp_rank);
        else if (parse_ds_mp_rank_file(name)) ++mp_files;
    }
    if (files.empty()) throw Error(dir_ + ": no layer_*-model_*-model_states.pt files (not a DeepSpeed pipeline checkpoint?)");
    std::sort(files.begin(), files.end());
    for (const auto& [layer, rank] : files)
        if (layers_.empty() || layers_.back() != layer) layers_.push_back(layer);
    tp_ = static_cast<int>(std::count_if(files.begin(), files.end(), [&](const auto& f) { return f.first == layers_.front(); }));
    for (int layer : layers_)
        for (int r = 0; r < tp_; ++r)
            if (!std::binary_search(files.begin(), files.end(), std::make_pair(layer, r)))
                throw Error(dir_ + ": " + ds_layer_file(layer, r) + " is missing (" + std::to_string(tp_) +
                            " tensor-parallel shards per layer)");
    if (files.size() != layers_.size() * static_cast<std::size_t>(tp_))
        throw Error(dir_ + ": layers have different numbers of tensor-parallel shards");
    if (layers_.size() < 3) throw Error(dir_ + ": " + std::to_string(layers_.size()) + " layer indices; expected embedding, blocks and final norm");
    if (mp_files == 0 || mp_files % tp_ != 0)
        throw Error(dir_ + ": " + std::to_string(mp_files) + " mp_rank_*_model_states.pt files for " + std::to_string(tp_) +
                    " tensor-parallel shards");
    pp_ = mp_files / tp_;
    mp_rank_ = std::make_unique<TorchFile>((dir / ds_mp_rank_file(0)).string(), verify_);
    const auto& root = mp_rank_->root();
    if (root.type() != PyType::Dict) throw Error(mp_rank_->path() + ": expected a dict at the top");
    const auto* a = root.find("args");
    if (!a || !a->is_object("argparse", "Namespace")) throw Error(mp_rank_->path() + ": no Megatron args (argparse.Namespace)");
    const auto* v = root.find("checkpoint_version");
    checkpoint_version_ = !v ? 0.0 : v->type() == PyType::Float ? v->as_float() : static_cast<double>(v->as_int());
}

const PyDict& DsCheckpoint::args() const { return mp_rank_->root().get("args").namespace_attributes(); }

std::int64_t DsCheckpoint::int_arg(const std::string& name) const {
    const auto* v = arg(name);
    if (!v || v->type() != PyType::Int) throw Error(mp_rank_->path() + ": args." + name + " is missing or not an int");
    return v->as_int();
}

std::string DsCheckpoint::layer_file(int layer, int tp_rank) const { return (fs::path(dir_) / ds_layer_file(layer, tp_rank)).string(); }

DsCheckpoint::Layer DsCheckpoint::open_layer(int layer) const {
    Layer l;
    l.version_ = checkpoint_version_;
    l.heads_ = int_arg("num_attention_heads");
    for (int r = 0; r < tp_; ++r) {
        l.shards_.push_back(std::make_unique<TorchFile>(layer_file(layer, r), verify_));
        const auto& items = l.shards_.back()->root().ordered_dict_items();
        std::vector<std::string> names;
        for (const auto& [k, v] : items.items()) names.push_back(k.as_str());
        if (r == 0) l.names_ = names;
        else if (names != l.names_)
            throw Error(l.shards_.back()->path() + ": other tensor names than " + l.shards_[0]->path());
    }
    return l;
}

TorchTensor DsCheckpoint::Layer::shard(std::size_t r, const std::string& name) const {
    const auto* v = shards_[r]->root().ordered_dict_items().find(name);
    if (!v) throw Error(shards_[r]->path() + ": no tensor " + name);
    return shards_[r]->tensor(*v, name);
}

DType DsCheckpoint::Layer::dtype(const std::string& name) const { return shard(0, name).dtype; }

std::vector<std::int64_t> DsCheckpoint::Layer::shape(const std::string& name) const {
    auto s = shard(0, name).shape;
    const auto rule = tp_rule(name);
    if (rule == TpRule::Replicated) return s;
    const std::size_t dim = rule == TpRule::ColumnParallel ? 0 : 1;
    if (s.size() <= dim) throw Error(shards_[0]->path() + ": " + name + " has too few dimensions to be split over TP");
    s[dim] = 0;
    for (std::size_t r = 0; r < shards_.size(); ++r) s[dim] += shard(r, name).shape[dim];
    return s;
}

std::vector<TorchTensor> DsCheckpoint::Layer::tp_shards(const std::string& name) const {
    std::vector<TorchTensor> shards;
    for (std::size_t r = 0; r < shards_.size(); ++r) shards.push_back(shard(r, name));
    const auto rule = tp_rule(name);
    const auto global = shape(name);
    for (std::size_t r = 0; r < shards.size(); ++r) {
        const auto& s = shards[r];
        if (s.dtype != shards[0].dtype) throw Error(shards_[r]->path() + ": " + name + " has another dtype than in shard 0");
        if (rule == TpRule::Replicated) {
            if (s.shape != global) throw Error(shards_[r]->path() + ": " + name + " has another shape than in shard 0");
            continue;
        }
        const std::size_t dim = rule == TpRule::ColumnParallel ? 0 : 1;
        bool same = s.shape.size() == global.size();
        for (std::size_t k = 0; same && k < s.shape.size(); ++k) same = k == dim || s.shape[k] == global[k];
        if (!same)
            throw Error(shards_[r]->path() + ": " + name + " does not fit shard 0's shape (TP shards differ beyond dimension " +
                        std::to_string(dim) + ")");
    }
    return shards;
}

GlobalTensor DsCheckpoint::Layer::merge(const std::string& name) const {
    GlobalTensor g;
    const auto shards = tp_shards(name);
    const auto& first = shards[0];
    g.dtype = first.dtype;
    g.shape = shape(name);
    const std::size_t esize = dtype_size(g.dtype);
    const auto rule = tp_rule(name);
    const std::size_t t = shards.size();
    std::int64_t numel = 1;
    for (auto d : g.shape) numel *= d;
    g.data.resize(static_cast<std::size_t>(numel) * esize);
    if (rule == TpRule::Replicated) {
        if (t == 1) {
            if (first.contiguous()) g.data.assign(first.bytes().begin(), first.bytes().end());
            else g.data = first.gather();
            return g;
        }
        if (g.dtype != DType::F32 && g.dtype != DType::F16 && g.dtype != DType::BF16)
            throw Error(shards_[0]->path() + ": " + name + ": averaging replicated shards needs a float dtype");
        std::vector<float> sum(static_cast<std::size_t>(numel), 0.0f);
        for (std::size_t r = 0; r < t; ++r) {
            const auto bytes = shards[r].gather();
            for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += load_float(g.dtype, bytes.data() + i * esize);
        }
        for (std::size_t i = 0; i < sum.size(); ++i) store_float(g.dtype, sum[i] / static_cast<float>(t), g.data.data() + i * esize);
        return g;
    }
    // Concatenation: dim 0 appends whole row blocks; dim 1 interleaves each row's pieces.
    const bool qkv = name.find("query_key_value.") != std::string::npos;
    std::int64_t rows = g.shape[0], row_bytes = static_cast<std::int64_t>(esize);
    for (std::size_t d = 1; d < g.shape.size(); ++d) row_bytes *= g.shape[d];
    std::int64_t offset0 = 0, offset1 = 0;
    for (std::size_t r = 0; r < t; ++r) {
        const auto& s = shards[r];
        // Contiguous shards (all that DeepSpeed saves) are read straight from the mapped file.
        std::vector<std::byte> copy;
        std::span<const std::byte> bytes;
        if (s.contiguous() && !(qkv && version_ < 2.0)) {
            bytes = s.bytes();
        } else {
            copy = s.gather();
            if (qkv) qkv_rows_to_v2(copy, heads_ / static_cast<std::int64_t>(t), static_cast<std::size_t>(row_bytes), version_);
            bytes = copy;
        }
        if (rule == TpRule::ColumnParallel) {
            std::memcpy(g.data.data() + offset0, bytes.data(), bytes.size());
            offset0 += static_cast<std::int64_t>(bytes.size());
        } else {
            std::int64_t inner = static_cast<std::int64_t>(esize);
            for (std::size_t d = 2; d < s.shape.size(); ++d) inner *= s.shape[d];
            const std::int64_t piece = s.shape[1] * inner;
            for (std::int64_t i = 0; i < rows; ++i)
                std::memcpy(g.data.data() + i * row_bytes + offset1, bytes.data() + i * piece, static_cast<std::size_t>(piece));
            offset1 += piece;
        }
    }
    return g;
}

}  // namespace mds::ckpt
