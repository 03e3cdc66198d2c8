// mds-ckpt-to-hf: DeepSpeed pipeline checkpoints to Hugging Face GPT2 / BLOOM folders.
// docs/mds-ckpt-to-hf.md has every flag.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mds/ckpt/ds_layout.h"
#include "mds/ckpt/to_hf.h"
#include "mds/util/cli.h"
#include "mds/util/error.h"
#include "mds/util/progress.h"
#include "mds/util/tool.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
    return mds::run_tool("mds-ckpt-to-hf", [&]() -> int {
        std::string src, dst, model_type = "auto", max_shard = "5GB";
        std::vector<std::string> tags;
        bool all = false, json = false;
        mds::ckpt::ToHfOptions opt;
        mds::ProgressFlags progress;
        CLI::App app{"Convert a DeepSpeed pipeline checkpoint (any TP / PP, as Megatron-DeepSpeed or mds-train saved it) to a\n"
                     "Hugging Face folder: GPT2LMHeadModel or BloomForCausalLM config.json, safetensors weights (sharded\n"
                     "with an index above --max-shard-size), tokenizer files. Tensors stream one at a time.",
                     "mds-ckpt-to-hf"};
        mds::add_version_flag(app, "mds-ckpt-to-hf");
        app.add_option("SRC", src, "Checkpoint root (holding `latest`) or a global_step folder")->required();
        app.add_option("DST", dst, "Output folder (with --all or several --tag: one subfolder per tag)")->required();
        app.add_option("--tag", tags, "Tag of SRC to convert, e.g. global_step1000 (repeatable; default: the one `latest` names)");
        app.add_flag("--all", all, "Convert every global_step* folder of SRC into DST/<tag>");
        app.add_option("--model-type", model_type, "auto (BLOOM for ALiBi + embedding LayerNorm, else GPT2), gpt2 or bloom")
            ->check(CLI::IsMember({"auto", "gpt2", "bloom"}));
        app.add_option("--max-shard-size", max_shard, "Largest safetensors file, e.g. 5GB, 500MB, 2GiB (default 5GB)");
        app.add_option("--vocab-file", opt.vocab_file, "GPT-2 vocab.json to include (default: args.vocab_file when it exists)");
        app.add_option("--merge-file", opt.merge_file, "GPT-2 merges.txt to include (default: args.merge_file when it exists)");
        app.add_option("--tokenizer-dir", opt.tokenizer_dir, "Copy the files of this tokenizer folder instead (e.g. tokenizer.json)");
        app.add_flag("--overwrite", opt.overwrite, "Replace an existing output folder");
        mds::add_progress_flags(app, progress);
        mds::add_json_flag(app, json);
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;

        opt.model_type = model_type == "gpt2" ? mds::ckpt::HfModelType::Gpt2
                         : model_type == "bloom" ? mds::ckpt::HfModelType::Bloom
                                                 : mds::ckpt::HfModelType::Auto;
        {
            std::size_t pos = 0;
            double v = 0;
            try {
                v = std::stod(max_shard, &pos);
            } catch (const std::exception&) {
                throw mds::UsageError("--max-shard-size " + max_shard + ": expected a size like 5GB or 500MB");
            }
            std::string unit = max_shard.substr(pos);
            std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
            const double mult = unit.empty() || unit == "B" ? 1 : unit == "KB" ? 1e3 : unit == "MB" ? 1e6 : unit == "GB" ? 1e9
                                : unit == "KIB" ? 1024.0 : unit == "MIB" ? 1048576.0 : unit == "GIB" ? 1073741824.0 : -1;
            if (mult < 0 || v <= 0) throw mds::UsageError("--max-shard-size " + max_shard + ": expected a size like 5GB or 500MB");
            opt.max_shard_bytes = static_cast<std::uint64_t>(v * mult);
        }
        if (all) {
            if (!tags.empty()) throw mds::UsageError("--all and --tag exclude each other");
            if (!fs::is_directory(src)) throw mds::Error(src + ": no such checkpoint folder");
            for (const auto& e : fs::directory_iterator(src))
                if (e.is_directory() && mds::ckpt::parse_ds_tag(e.path().filename().string())) tags.push_back(e.path().filename().string());
            std::sort(tags.begin(), tags.end(), [](const std::string& a, const std::string& b) {
                return *mds::ckpt::parse_ds_tag(a) < *mds::ckpt::parse_ds_tag(b);
            });
            if (tags.empty()) throw mds::Error(src + ": no global_step* folders");
        }
        const bool batch = tags.size() > 1 || all;
        if (tags.empty()) tags.push_back("");
        nlohmann::json report = nlohmann::json::array();
        for (const auto& tag : tags) {
            const std::string out = batch ? (fs::path(dst) / tag).string() : dst;
            mds::Progress bar(tag.empty() ? "tensors" : tag + " tensors", 0, progress.resolved(), progress.interval_s);
            opt.progress = [&](std::size_t done, std::size_t, std::uint64_t bytes) { bar.update(done, bytes, bytes); };
            const auto r = mds::ckpt::convert_to_hf(src, tag, out, opt);
            bar.finish();
            if (!progress.quiet)
                mds::print_info((tag.empty() ? std::string() : tag + ": ") + r.model_type + ", " + std::to_string(r.tensors) +
                                " tensors, " + std::to_string(r.bytes) + " bytes in " + std::to_string(r.shards) +
                                " safetensors file(s) -> " + out);
            report.push_back({{"tag", tag}, {"output", out}, {"model_type", r.model_type}, {"tensors", r.tensors},
                              {"shards", r.shards}, {"bytes", r.bytes}, {"files", r.files}});
        }
        if (json) std::printf("%s\n", report.dump().c_str());
        return 0;
    });
}
