#include "mds/ckpt/shrink.h"

#include <sys/stat.h>  // lstat

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>

#include "mds/util/parallel.h"
#include "mds/ckpt/ds_checkpoint.h"  // list_ds_tags, ds_tag_before
#include "mds/ckpt/ds_layout.h"
#include "mds/ckpt/torch_file.h"
#include "mds/util/error.h"
#include "mds/util/files.h"
#include "mds/util/safe_paths.h"  // refuse_overlap, prepare_output_dir, temp_path_for, printable

namespace mds::ckpt {
namespace fs = std::filesystem;
namespace {

constexpr std::size_t kCopyPieceBytes = 8u << 20;  // progress granularity of a copy

bool is_optimizer_file(const std::string& name) { return name.ends_with("optim_states.pt"); }
bool is_mp_rank_file(const std::string& name) { return name.starts_with("mp_rank_") && name.ends_with("_model_states.pt"); }

// Reports the bytes copied so far to the caller's progress callback.
// Files are copied by several workers at once: they report one after the other.
struct Tally {
    const ShrinkOptions& options;
    std::uint64_t files = 0, bytes = 0, total = 0;
    std::mutex mutex;
    void add(std::uint64_t n) {
        const std::lock_guard<std::mutex> lock(mutex);
        bytes += n;
        if (options.progress) options.progress(files, bytes, total);
    }
    void file_done() {
        const std::lock_guard<std::mutex> lock(mutex);
        ++files;
        if (options.progress) options.progress(files, bytes, total);
    }
};

// Appends bytes [from, to) of `bytes` to `out`, in pieces.
void write_piece(std::span<const std::byte> bytes, std::size_t from, std::size_t to, AtomicOutput& out, Tally& tally) {
    for (std::size_t at = from; at < to; at += kCopyPieceBytes) {
        const std::size_t n = std::min(kCopyPieceBytes, to - at);
        out.write(bytes.data() + at, n);
        tally.add(n);
    }
}

// Writes `bytes` to a new file `to` (temporary name, renamed when complete), in pieces.
void write_copy(std::span<const std::byte> bytes, const std::string& to, Tally& tally) {
    AtomicOutput out(to);
    write_piece(bytes, 0, bytes.size(), out, tally);
    out.commit();
}

const char* const kNotCopied = "; it is not copied (restore it from a good copy, or pass --no-verify to copy it unchecked)";

// What a damaged zip entry held, from the (unverified) pickle: "data.pkl", "tensor 'x' (storage
// data/0)", or the entry's name when the file is no torch archive.
std::string damaged_part(const std::string& path, const ZipArchive& zip, const ZipEntry& e) {
    const std::string entry = "entry \"" + printable(e.name, 120) + "\"";
    std::string prefix;
    try {
        prefix = zip.prefix() + "/";
    } catch (const Error&) {
        return entry;
    }
    if (e.name == prefix + "data.pkl") return "data.pkl";
    const std::string storages = prefix + "data/";
    if (!e.name.starts_with(storages)) return entry;
    const std::string key = e.name.substr(storages.size());
    std::string names;
    try {
        const TorchFile f(path, false);
        const auto found = f.tensors_in_storage(key);
        for (std::size_t i = 0; i < found.size() && i < 3; ++i) {
            std::string n = found[i];
            if (!n.empty() && n[0] == '.') n.erase(0, 1);
            names += i ? ", '" : "'";
            names += printable(n, 120);
            names += '\'';
        }
    } catch (const Error&) {
        // The pickle is damaged too: the storage's name is all there is.
    }
    std::string part = names.empty() ? std::string() : "tensor " + names + " (";
    part += "storage data/";
    part += printable(key);
    if (!names.empty()) part += ')';
    return part;
}

// Copies a torch.save file, checking it whole: zip structure (ZipArchive) first, then the CRC-32
// of every entry, in file order, each entry's bytes written out once checked (the file is read
// once, while in the page cache). The copy is written from the very bytes that were checked (one
// mapping); a damaged entry stops the copy before its bytes are written, and the temporary goes.
void copy_verified(const std::string& from, const std::string& to, Tally& tally) {
    std::optional<ZipArchive> zip;
    try {
        zip.emplace(from);
        for (const auto& e : zip->entries()) (void)zip->data(e);  // stored entries only
    } catch (const Error& e) {
        throw Error(std::string(e.what()) + kNotCopied);
    }
    std::vector<const ZipEntry*> order;
    for (const auto& e : zip->entries()) order.push_back(&e);
    std::sort(order.begin(), order.end(), [](const ZipEntry* a, const ZipEntry* b) { return a->data_offset < b->data_offset; });
    const auto bytes = zip->file_bytes();
    AtomicOutput out(to);
    std::size_t written = 0;
    for (const ZipEntry* e : order) {
        const std::uint32_t got = crc32(zip->data(*e));
        if (got != e->crc32) {
            char crcs[80];
            std::snprintf(crcs, sizeof crcs, " (CRC-32 0x%08x, the zip records 0x%08x)", got, e->crc32);
            throw Error(printable(from, 200) + ": " + damaged_part(from, *zip, *e) + " is damaged" + crcs + kNotCopied);
        }
        const std::size_t end = static_cast<std::size_t>(e->data_offset + e->compressed_size);
        if (end > written) {
            write_piece(bytes, written, end, out, tally);
            written = end;
        }
    }
    write_piece(bytes, written, bytes.size(), out, tally);  // the central directory and end records
    out.commit();
}

void copy_plain(const std::string& from, const std::string& to, Tally& tally) {
    const MappedFile in(from);
    write_copy(in.bytes(), to, tally);
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

void note_to(const ShrinkOptions& options, const std::string& m) {
    if (options.note) options.note(m);
}

// The tags to copy, in step order without repeats, and the tag `latest` names (empty when there is
// none, or it is unusable and tags were named explicitly).
struct TagChoice {
    std::vector<std::string> tags;
    std::string latest;
};

TagChoice choose_tags(const std::string& src, const ShrinkOptions& options) {
    // `latest` decides the default tag; with tags named explicitly a damaged one only stays behind.
    const bool explicit_tags = options.all_tags || !options.tags.empty();
    TagChoice c;
    try {
        c.latest = read_latest_tag(src).value_or("");
    } catch (const Error& e) {
        if (!explicit_tags) throw;
        note_to(options, std::string("warning: ") + e.what() + "; `latest` is not copied");
    }
    c.tags = options.tags;
    if (options.all_tags) c.tags = list_ds_tags(src, [&](const std::string& why) { note_to(options, "warning: skipping " + why); });
    if (c.tags.empty()) {
        if (options.all_tags) throw Error(printable(src, 200) + ": no global_step* folders");
        if (c.latest.empty()) throw Error(printable(src, 200) + ": no `latest` file; name the tags to copy (--tag) or use --all");
        c.tags.push_back(c.latest);
    }
    std::sort(c.tags.begin(), c.tags.end(), ds_tag_before);
    c.tags.erase(std::unique(c.tags.begin(), c.tags.end()), c.tags.end());
    return c;
}

// One tag to copy: its source folder and the files in it, sorted.
struct TagPlan {
    std::string tag;
    fs::path from, to;
    std::vector<fs::path> files;
};

bool is_dropped(const std::string& name) { return is_optimizer_file(name) || name == "zero_to_fp32.py"; }

// Checks one tag before anything is written (its name, overlaps, an existing destination) and
// lists its files; `kept_bytes` grows by the bytes of the files that will be kept.
TagPlan plan_tag(const std::string& src, const std::string& dst, const std::string& tag, const std::string& latest,
                 const ShrinkOptions& options, std::uint64_t& kept_bytes) {
    TagPlan p;
    p.tag = tag;
    const std::string source = tag == latest && options.tags.empty() && !options.all_tags
                                   ? printable((fs::path(src) / "latest").string(), 200)
                                   : std::string(options.all_tags ? "--all" : "--tag");
    p.from = checked_tag_dir(src, tag, source);
    // A tag folder may be a symbolic link: where it really lives must not be the destination.
    refuse_overlap(p.from.string(), "source tag", dst, "destination");
    p.to = fs::path(dst) / tag;
    struct stat st {};
    if (::lstat(p.to.c_str(), &st) == 0 && !options.dry_run) {
        if (!S_ISDIR(st.st_mode)) throw Error(in_quotes(p.to.string()) + " exists and is not a folder; refusing to replace it");
        if (!options.overwrite) throw Error(in_quotes(p.to.string()) + " exists; pass --overwrite to replace it");
    }
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(p.from)) {
        if (e.is_regular_file(ec)) p.files.push_back(e.path());
        else note_to(options, "warning: " + printable(tag) + "/" + printable(e.path().filename().string()) + " is not a regular file; not copied");
    }
    std::sort(p.files.begin(), p.files.end());
    for (const auto& f : p.files)
        if (!is_dropped(f.filename().string())) kept_bytes += file_size(f.string());
    return p;
}

// Handles one file of a tag: dropped, copied (verified unless --no-verify) or, for an mp_rank file
// carrying optimizer state, rewritten without it into `out`. A dry run decides and writes nothing.
ShrinkFile shrink_file(const fs::path& f, const std::string& out, const ShrinkOptions& options, Tally& tally) {
    const std::string name = f.filename().string();
    ShrinkFile sf{name, file_size(f.string()), ShrinkFile::Action::Copied};
    if (is_dropped(name)) {
        sf.action = ShrinkFile::Action::Dropped;
    } else if (is_mp_rank_file(name)) {
        TorchFile in(f.string(), options.verify);
        const auto* opt = in.root().type() == PyType::Dict ? in.root().find("optimizer") : nullptr;
        if (opt && !opt->is_none()) {
            sf.action = ShrinkFile::Action::Rewritten;
            if (!options.dry_run) {
                rewrite_without_optimizer(in, out);
                tally.add(sf.bytes);
            }
        } else if (!options.dry_run) {
            if (options.verify) copy_verified(f.string(), out, tally);
            else copy_plain(f.string(), out, tally);
        }
    } else if (!options.dry_run) {
        if (options.verify && name.ends_with(".pt")) copy_verified(f.string(), out, tally);
        else copy_plain(f.string(), out, tally);
    }
    return sf;
}

// Copies one tag into a temporary folder renamed into place when complete (removed on error).
ShrinkTag shrink_tag(const TagPlan& p, const std::string& dst, const ShrinkOptions& options, Tally& tally) {
    const fs::path tmp = temp_path_for(p.to.string());
    if (!options.dry_run) fs::create_directories(tmp);
    ShrinkTag t{p.tag, {}, 0, 0};
    try {
        // The files are spread over the workers; the log keeps the files' order (a file's line
        // comes once it and every file before it are done).
        std::vector<std::optional<ShrinkFile>> done(p.files.size());
        std::size_t logged = 0;
        std::mutex log_mutex;
        parallel_for(p.files.size(), workers_or_cores(options.workers), [&](std::size_t i) {
            const fs::path& f = p.files[i];
            const std::string out = (tmp / f.filename()).string();
            ShrinkFile sf = shrink_file(f, out, options, tally);
            const std::uint64_t bytes_out = sf.action == ShrinkFile::Action::Dropped                         ? 0
                                            : options.dry_run || sf.action == ShrinkFile::Action::Copied ? sf.bytes
                                                                                                          : file_size(out);
            if (sf.action != ShrinkFile::Action::Dropped && !options.dry_run) tally.file_done();
            const std::lock_guard<std::mutex> lock(log_mutex);
            t.bytes_in += sf.bytes;
            t.bytes_out += bytes_out;
            done[i] = std::move(sf);
            for (; logged < done.size() && done[logged]; ++logged)
                if (options.log) options.log(printable(p.tag) + "/" + printable(done[logged]->name) + ": " + shrink_action_name(done[logged]->action));
        });
        for (auto& sf : done) t.files.push_back(std::move(*sf));
        if (!options.dry_run) {
            sync_directory(tmp.string());
            remove_tree(p.to.string());
            fs::rename(tmp, p.to);
            sync_directory(dst);
        }
    } catch (...) {
        try {
            if (!options.dry_run) remove_tree(tmp.string());
        } catch (const Error&) {
            // The copy's own error is the one to report.
        }
        throw;
    }
    return t;
}

// `latest`, and Megatron's tracker file beside it when the source has one.
void write_latest(const std::string& src, const std::string& dst, const std::string& latest) {
    write_latest_tag(dst, latest);
    const auto tracker = fs::path(src) / "latest_checkpointed_iteration.txt";
    struct stat st {};
    if (::stat(tracker.c_str(), &st) == 0 && S_ISREG(st.st_mode))
        write_file_atomic((fs::path(dst) / tracker.filename()).string(), read_file(tracker.string(), 4096, "Megatron tracker file"));
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
    std::error_code ec;
    if (!fs::is_directory(src, ec)) throw Error(printable(src, 200) + ": not a checkpoint folder");
    refuse_overlap(src, "source", dst, "destination");
    const TagChoice choice = choose_tags(src, options);

    // Everything is checked before anything is written: tags, overlaps, existing destinations.
    std::vector<TagPlan> plans;
    std::uint64_t total = 0;
    for (const auto& tag : choice.tags) plans.push_back(plan_tag(src, dst, tag, choice.latest, options, total));
    if (options.dry_run) {
        check_output_dir(dst, "destination");
    } else {
        for (const auto& removed : prepare_output_dir(dst, "destination"))
            note_to(options, "removed " + printable(removed) + ", the unfinished output of an interrupted earlier run");
    }

    ShrinkReport report;
    Tally tally{options, 0, 0, total, {}};
    for (const auto& p : plans) report.tags.push_back(shrink_tag(p, dst, options, tally));
    // `latest` moves last, and only to a tag that was copied.
    const auto& tags = choice.tags;
    if (!choice.latest.empty() && std::find(tags.begin(), tags.end(), choice.latest) != tags.end()) {
        if (!options.dry_run) write_latest(src, dst, choice.latest);
        report.latest_written = true;
    }
    return report;
}

}  // namespace mds::ckpt
