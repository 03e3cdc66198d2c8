// mds-ckpt-to-hf: DeepSpeed pipeline checkpoints to Hugging Face GPT2 / BLOOM folders.
// docs/mds-ckpt-to-hf.md has every flag.
#include <algorithm>  // std::max
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mds/ckpt/ds_checkpoint.h"  // list_ds_tags
#include "mds/ckpt/ds_layout.h"     // parse_ds_tag
#include "mds/ckpt/to_hf.h"
#include "mds/flags/flag_table.h"  // add_table_flags: --vocab-file, --merge-file
#include "mds/util/cli.h"
#include "mds/util/parallel.h"  // workers_or_cores
#include "mds/util/error.h"
#include "mds/util/progress.h"
#include "mds/util/safe_paths.h"  // checked_entry_name, refuse_overlap, printable
#include "mds/util/text.h"        // to_upper
#include "mds/util/tool.h"

namespace fs = std::filesystem;

namespace {

// "5GB", "500MB", "2GiB", "123" (bytes) -> bytes; a usage error for anything else (nan, inf,
// negative, zero, past 2^62).
std::uint64_t parse_shard_size(const std::string& text) {
    const auto bad = [&] {
        return mds::UsageError("--max-shard-size " + mds::printable(text) + ": expected a size like 5GB, 500MB or 2GiB");
    };
    std::size_t pos = 0;
    double v = 0;
    try {
        v = std::stod(text, &pos);
    } catch (const std::exception&) {
        throw bad();
    }
    const std::string unit = mds::to_upper(text.substr(pos));
    const double mult = unit.empty() || unit == "B" ? 1 : unit == "KB" ? 1e3 : unit == "MB" ? 1e6 : unit == "GB" ? 1e9 : unit == "TB" ? 1e12
                        : unit == "KIB" ? 1024.0 : unit == "MIB" ? 1048576.0 : unit == "GIB" ? 1073741824.0 : unit == "TIB" ? 1099511627776.0
                                                                                                              : -1;
    const double bytes = v * mult;
    if (mult < 0 || !std::isfinite(bytes) || bytes < 1 || bytes > 4.6e18) throw bad();
    return static_cast<std::uint64_t>(bytes);
}

// A flag value that names a tag: a plain folder name (mds::checked_entry_name), as a usage error.
std::string checked_tag_flag(const std::string& tag) {
    try {
        return mds::checked_entry_name(tag, "--tag");
    } catch (const mds::Error& e) {
        throw mds::UsageError(e.what());
    }
}

}  // namespace

int main(int argc, char** argv) {
    return mds::run_tool("mds-ckpt-to-hf", [&]() -> int {
        std::string src, dst, model_type = "auto", max_shard = "5GB";
        std::vector<std::string> tags;
        bool all = false, json = false, no_verify = false;
        mds::ckpt::ToHfOptions opt;
        mds::ProgressFlags progress;
        CLI::App app{"Convert a DeepSpeed pipeline checkpoint (any TP / PP, as Megatron-DeepSpeed or mds-train saved it) to a\n"
                     "Hugging Face folder: GPT2LMHeadModel or BloomForCausalLM config.json, safetensors weights (sharded\n"
                     "with an index above --max-shard-size), tokenizer files. Tensors are converted by --workers threads\n"
                     "and streamed to disk in order.",
                     "mds-ckpt-to-hf"};
        mds::add_version_flag(app, "mds-ckpt-to-hf");
        app.add_option("SRC", src, "Checkpoint root (holding `latest`) or a global_step folder")->required();
        app.add_option("DST", dst, "Output folder (with --all or several --tag: one subfolder per tag)")->required();
        app.add_option("--tag", tags, "Tag of SRC to convert, e.g. global_step1000 (repeatable; default: the one `latest` names)");
        app.add_flag("--all", all, "Convert every global_step* folder of SRC into DST/<tag>");
        app.add_option("--model-type", model_type, "auto (BLOOM for ALiBi, else GPT2; with an embedding LayerNorm, GPT2 with an untied lm_head), gpt2 or bloom")
            ->check(CLI::IsMember({"auto", "gpt2", "bloom"}));
        app.add_option("--max-shard-size", max_shard, "Largest safetensors file, e.g. 5GB, 500MB, 2GiB (default 5GB)");
        // Megatron's --vocab-file / --merge-file, declared by mds-train's flag table; the help says what they mean here.
        mds::flags::TrainArgs megatron;
        mds::flags::add_table_flags(app, megatron, mds::flags::kToolCkptToHf);
        app.get_option("--vocab-file")->description("GPT-2 vocab.json to include (default: args.vocab_file, looked for from here and "
                                                    "from the checkpoint's folders up)")->group("");
        app.get_option("--merge-file")->description("GPT-2 merges.txt to include (default: args.merge_file, looked for from here and "
                                                    "from the checkpoint's folders up)")->group("");
        app.add_option("--vocab-size", opt.vocab_size,
                       "Rows of the word embedding to export, config.json's vocab_size (default: the Hugging Face size mds-hf-to-ckpt "
                       "recorded, else the padded vocabulary)")
            ->check(mds::number_in(1, 1e12));
        app.add_option("--tokenizer-dir", opt.tokenizer_dir, "Copy the files of this tokenizer folder instead (e.g. tokenizer.json)");
        app.add_flag("--no-tokenizer", opt.no_tokenizer, "Write no tokenizer files (weights and config.json only), without a warning");
        app.add_flag("--overwrite", opt.overwrite, "Replace an earlier export (a folder holding config.json)");
        app.add_flag("--no-verify", no_verify, "Skip the CRC-32 checks of the pickles and tensors read (faster; damage goes unnoticed)");
        opt.workers = mds::workers_or_cores(0);  // the cores
        app.add_option("--workers", opt.workers,
                       "Threads reading, merging and transposing tensors while the main thread writes (1 to 1024; default: the cores)")
            ->check(mds::number_in(1, 1024));
        mds::add_progress_flags(app, progress);
        mds::add_json_flag(app, json);
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;

        opt.model_type = model_type == "gpt2" ? mds::ckpt::HfModelType::Gpt2
                         : model_type == "bloom" ? mds::ckpt::HfModelType::Bloom
                                                 : mds::ckpt::HfModelType::Auto;
        opt.max_shard_bytes = parse_shard_size(max_shard);
        opt.verify = !no_verify;
        opt.vocab_file = megatron.data.vocab_file;
        opt.merge_file = megatron.data.merge_file;
        if (opt.no_tokenizer && (!opt.tokenizer_dir.empty() || !opt.vocab_file.empty() || !opt.merge_file.empty()))
            throw mds::UsageError("--no-tokenizer and --tokenizer-dir / --vocab-file / --merge-file exclude each other");
        if (!progress.quiet) opt.note = [](const std::string& m) { mds::print_info(m); };
        for (auto& tag : tags) tag = checked_tag_flag(tag);
        mds::refuse_overlap(src, "source", dst, "destination");
        if (all) {
            if (!tags.empty()) throw mds::UsageError("--all and --tag exclude each other");
            std::error_code ec;
            if (!fs::is_directory(src, ec)) throw mds::Error(mds::printable(src, 200) + ": no such checkpoint folder");
            // DeepSpeed's own tags only (global_step<N>), in step order.
            for (auto& tag : mds::ckpt::list_ds_tags(src))
                if (mds::ckpt::parse_ds_tag(tag)) tags.push_back(std::move(tag));
            if (tags.empty()) throw mds::Error(mds::printable(src, 200) + ": no global_step* folders");
        }
        const bool batch = tags.size() > 1 || all;
        if (tags.empty()) tags.push_back("");
        nlohmann::json report = nlohmann::json::array();
        for (const auto& tag : tags) {
            const std::string out = batch ? (fs::path(dst) / tag).string() : dst;
            std::unique_ptr<mds::Progress> bar;  // made at the first tensor, when the total is known
            opt.progress = [&](std::size_t done, std::size_t, std::uint64_t bytes, std::uint64_t total) {
                if (!bar) bar = std::make_unique<mds::Progress>(tag.empty() ? "tensors" : tag + " tensors", total, progress.resolved(),
                                                                progress.interval_s);
                bar->update(done, bytes, bytes);
            };
            const auto r = mds::ckpt::convert_to_hf(src, tag, out, opt);
            if (bar) bar->finish();
            if (!progress.quiet)
                mds::print_info((tag.empty() ? std::string() : tag + ": ") + r.model_type + ", " + std::to_string(r.tensors) +
                                " tensors, " + std::to_string(r.bytes) + " bytes in " + std::to_string(r.shards) +
                                " safetensors file(s) -> " + mds::printable(out, 200));
            report.push_back({{"tag", tag}, {"output", out}, {"model_type", r.model_type}, {"tensors", r.tensors},
                              {"shards", r.shards}, {"bytes", r.bytes}, {"files", r.files}});
        }
        if (json) std::printf("%s\n", report.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        return 0;
    });
}
