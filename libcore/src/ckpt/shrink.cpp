#include "mds/ckpt/shrink.h"

#include <algorithm>
#include <filesystem>
#include <unistd.h>

#include "mds/ckpt/ds_layout.h"
#include "mds/ckpt/torch_file.h"
#include "mds/util/error.h"
#include "mds/util/files.h"

namespace mds::ckpt {
namespace fs = std::filesystem;
namespace {

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& e) {
    return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

bool is_optimizer_file(const std::string& name) { return ends_with(name, "optim_states.pt"); }
bool is_mp_rank_file(const std::string& name) { return starts_with(name, "mp_rank_") && ends_with(name, "_model_states.pt"); }

// Copies `from` to `to` in 1 MiB pieces through an atomic output.
void copy_file_atomic(const std::string& from, const std::string& to) {
    AtomicOutput out(to);
    out.append_file(from);
    out.commit();
}

// Rewrites an mp_rank file with `optimizer` = None; every other key and tensor is kept.
void rewrite_without_optimizer(const TorchFile& in, const std::string& to) {
    const auto& root = in.root();
    auto out_root = PyValue::dict();
    TorchSaveWriter writer(to, "cpu");
    std::vector<std::vector<std::byte>> keep;
    // Tensors (RNG states) are copied into their own storages; other values are shared as read.
    const TensorMapper copy = [&](const PyValue& v, const std::string& what) {
        const auto t = in.tensor(v, what);
        keep.push_back(t.gather());
        return writer.add_tensor(t.dtype, t.shape, std::span<const std::byte>(keep.back()));
    };
    if (root.type() != PyType::Dict) throw Error(in.path() + ": expected a dict at the top, got " + py_type_name(root.type()));
    for (const auto& [k, v] : root.as_dict().items()) {
        const bool drop = k.type() == PyType::Str && k.as_str() == "optimizer";
        out_root.as_dict().set(k, drop ? PyValue::none() : map_tensors(v, copy, k.repr(60)));
    }
    writer.finish(out_root);
}

std::vector<std::string> list_tags(const std::string& src) {
    std::vector<std::string> tags;
    for (const auto& e : fs::directory_iterator(src))
        if (e.is_directory() && starts_with(e.path().filename().string(), "global_step")) tags.push_back(e.path().filename().string());
    std::sort(tags.begin(), tags.end());
    return tags;
}

}  // namespace

const char* shrink_action_name(ShrinkFile::Action a) {
    switch (a) {
    case ShrinkFile::Action::Rewritten: return "rewritten";
    case ShrinkFile::Action::Dropped: return "dropped";
    case ShrinkFile::Action::Copied: break;
    }
    return "copied";
}

ShrinkReport shrink_checkpoint(const std::string& src, const std::string& dst, const ShrinkOptions& options) {
    if (!fs::is_directory(src)) throw Error(src + ": not a checkpoint folder");
    const std::string latest = read_latest_tag(src).value_or("");
    std::vector<std::string> tags = options.tags;
    if (options.all_tags) tags = list_tags(src);
    if (tags.empty()) {
        if (latest.empty()) throw Error(src + ": no `latest` file; name the tags to copy (--tag) or use --all");
        tags.push_back(latest);
    }
    ShrinkReport report;
    if (!options.dry_run) fs::create_directories(dst);
    for (const auto& tag : tags) {
        const fs::path from = fs::path(src) / tag;
        if (!fs::is_directory(from)) throw Error(from.string() + ": no such checkpoint tag");
        const fs::path to = fs::path(dst) / tag;
        if (fs::exists(to) && !options.overwrite && !options.dry_run)
            throw Error(to.string() + " exists; pass --overwrite to replace it");
        const fs::path tmp = fs::path(dst) / ("." + tag + ".tmp-" + std::to_string(::getpid()));
        if (!options.dry_run) {
            remove_tree(tmp.string());
            fs::create_directories(tmp);
        }
        ShrinkTag t{tag, {}, 0, 0};
        std::vector<fs::path> files;
        for (const auto& e : fs::directory_iterator(from))
            if (e.is_regular_file()) files.push_back(e.path());
        std::sort(files.begin(), files.end());
        try {
            for (const auto& f : files) {
                const std::string name = f.filename().string();
                ShrinkFile sf{name, file_size(f.string()), ShrinkFile::Action::Copied};
                t.bytes_in += sf.bytes;
                if (is_optimizer_file(name) || name == "zero_to_fp32.py") {
                    sf.action = ShrinkFile::Action::Dropped;
                } else if (is_mp_rank_file(name)) {
                    TorchFile in(f.string());
                    const auto* opt = in.root().type() == PyType::Dict ? in.root().find("optimizer") : nullptr;
                    if (opt && !opt->is_none()) {
                        sf.action = ShrinkFile::Action::Rewritten;
                        if (!options.dry_run) rewrite_without_optimizer(in, (tmp / name).string());
                    } else if (!options.dry_run) {
                        copy_file_atomic(f.string(), (tmp / name).string());
                    }
                } else if (!options.dry_run) {
                    copy_file_atomic(f.string(), (tmp / name).string());
                }
                if (sf.action != ShrinkFile::Action::Dropped)
                    t.bytes_out += options.dry_run || sf.action == ShrinkFile::Action::Copied ? sf.bytes : file_size((tmp / name).string());
                if (options.log) options.log(tag + "/" + name + ": " + shrink_action_name(sf.action));
                t.files.push_back(sf);
            }
            if (!options.dry_run) {
                sync_directory(tmp.string());
                remove_tree(to.string());
                fs::rename(tmp, to);
                sync_directory(dst);
            }
        } catch (...) {
            try {
                remove_tree(tmp.string());
            } catch (const Error&) {
                // The copy's own error is the one to report.
            }
            throw;
        }
        report.tags.push_back(std::move(t));
    }
    // `latest` moves last, and only to a tag that was copied.
    if (!latest.empty() && std::find(tags.begin(), tags.end(), latest) != tags.end()) {
        if (!options.dry_run) {
            write_latest_tag(dst, latest);
            const auto tracker = fs::path(src) / "latest_checkpointed_iteration.txt";
            if (fs::exists(tracker)) write_file_atomic((fs::path(dst) / tracker.filename()).string(), read_file(tracker.string()));
        }
        report.latest_written = true;
    }
    return report;
}

}  // namespace mds::ckpt
