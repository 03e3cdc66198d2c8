// mds-hf-to-ckpt: a Hugging Face GPT2 / BLOOM folder to a DeepSpeed pipeline checkpoint at any TP / PP.
// docs/mds-hf-to-ckpt.md has every flag.
#include <cstdio>
#include <memory>
#include <string>

#include "mds/ckpt/hf_to_ckpt.h"
#include "mds/util/cli.h"
#include "mds/util/error.h"
#include "mds/util/parallel.h"  // workers_or_cores
#include "mds/util/progress.h"
#include "mds/util/safe_paths.h"  // printable
#include "mds/util/tool.h"

int main(int argc, char** argv) {
    return mds::run_tool("mds-hf-to-ckpt", [&]() -> int {
        std::string src, dst, dtype = "auto", algorithm = "dp";
        bool json = false, no_tokenizer = false, no_verify = false;
        mds::ckpt::HfToCkptOptions opt;
        mds::ProgressFlags progress;
        CLI::App app{"Convert a Hugging Face GPT2 (GPT2LMHeadModel) or BLOOM (BloomForCausalLM) folder (config.json and\n"
                     "safetensors or pytorch_model.bin weights, sharded or not) to a DeepSpeed pipeline checkpoint at any TP / PP,\n"
                     "as mds-ckpt-reshape lays one out: DST/latest, DST/global_step0 (weights only, iteration 0) and the\n"
                     "tokenizer files in DST/hf_tokenizer. Load it with mds-train --load DST --finetune.",
                     "mds-hf-to-ckpt"};
        mds::add_version_flag(app, "mds-hf-to-ckpt");
        app.add_option("SRC", src, "Hugging Face model folder (config.json + weights)")->required();
        app.add_option("DST", dst, "Checkpoint root to write (DST/latest, DST/global_step0, DST/hf_tokenizer)")->required();
        app.add_option("--target-tp", opt.target_tp, "Tensor-parallel degree of the checkpoint (1 to 1024; must divide the heads; default 1)")
            ->check(mds::number_in(1, 1024));
        app.add_option("--target-pp", opt.target_pp, "Pipeline-parallel degree of the checkpoint (1 to 1024; default 1)")
            ->check(mds::number_in(1, 1024));
        app.add_option("--make-vocab-size-divisible-by", opt.make_vocab_size_divisible_by,
                       "Pad the vocabulary to a multiple of this times --target-tp, as Megatron does (default 128)")
            ->check(mds::number_in(1, 1e9));
        app.add_option("--dtype", dtype, "Weights' dtype in the checkpoint: auto (the source's, default), fp32, bf16 or fp16")
            ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp16"}));
        app.add_option("--seq-length", opt.seq_length,
                       "args.seq_length of the checkpoint (default: GPT2's n_positions; 2048 for BLOOM)")
            ->check(mds::number_in(1, 1e9));
        app.add_option("--partition-method", opt.partition_method,
                       "DeepSpeed partition_method for the stages: type:<regex>, parameters or uniform (default type:transformer)");
        app.add_option("--partition-algorithm", algorithm,
                       "Whose partition_balanced cuts the stages: dp (DeepSpeed since Dec 2023, default) or bisect (v0.6.5, BLOOM era)")
            ->check(CLI::IsMember({"dp", "bisect"}));
        app.add_flag("--no-tokenizer", no_tokenizer, "Copy no tokenizer files into DST/hf_tokenizer");
        app.add_flag("--overwrite", opt.overwrite, "Replace an earlier checkpoint at DST (a folder holding `latest`, or an empty folder)");
        app.add_flag("--no-verify", no_verify, "Skip the CRC-32 checks of the pytorch_model.bin pickles and tensors read");
        opt.workers = mds::workers_or_cores(0);  // the cores
        app.add_option("--workers", opt.workers, "Threads converting and writing layer files side by side (1 to 1024; default: the cores)")
            ->check(mds::number_in(1, 1024));
        mds::add_progress_flags(app, progress);
        mds::add_json_flag(app, json);
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;

        if (dtype != "auto") opt.dtype = dtype == "fp32" ? mds::ckpt::DType::F32 : dtype == "bf16" ? mds::ckpt::DType::BF16 : mds::ckpt::DType::F16;
        opt.partition_algorithm = *mds::ckpt::parse_partition_algorithm(algorithm);
        opt.copy_tokenizer = !no_tokenizer;
        opt.verify = !no_verify;
        if (!progress.quiet) opt.note = [](const std::string& m) { mds::print_info(m); };
        std::unique_ptr<mds::Progress> bar;  // made at the first tensor, when the total is known
        opt.progress = [&](std::size_t done, std::size_t, std::uint64_t bytes, std::uint64_t total) {
            if (!bar) bar = std::make_unique<mds::Progress>("tensors", total, progress.resolved(), progress.interval_s);
            bar->update(done, bytes, bytes);
        };
        const auto r = mds::ckpt::convert_hf_to_ckpt(src, dst, opt);
        if (bar) bar->finish();
        if (json) std::printf("%s\n", mds::ckpt::hf_to_ckpt_report_json(r).c_str());
        if (!progress.quiet) {
            std::string flags;
            for (const auto& f : r.train_flags) flags += " " + f;
            mds::print_info(r.model_type + ", " + std::to_string(r.tensors) + " tensors (" + r.dtype + ", vocabulary " + std::to_string(r.vocab_size) +
                            " padded to " + std::to_string(r.padded_vocab_size) + "), tp " + std::to_string(r.tp) + " pp " + std::to_string(r.pp) +
                            ", " + std::to_string(r.files.size()) + " files, " + std::to_string(r.bytes) + " bytes -> " + mds::printable(r.output, 200));
            mds::print_info("load with: mds-train" + flags);
        }
        return 0;
    });
}
