// mds-ckpt-reshape: a DeepSpeed pipeline checkpoint rewritten for other TP / PP / DP degrees.
// docs/mds-ckpt-reshape.md has every flag.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "mds/ckpt/reshape.h"
#include "mds/util/cli.h"
#include "mds/util/parallel.h"  // workers_or_cores
#include "mds/util/error.h"
#include "mds/util/progress.h"
#include "mds/util/safe_paths.h"  // checked_entry_name, printable
#include "mds/util/tool.h"

int main(int argc, char** argv) {
    return mds::run_tool("mds-ckpt-reshape", [&]() -> int {
        std::string src, dst, algorithm = "dp";
        mds::ckpt::ReshapeOptions opt;
        mds::ProgressFlags progress;
        bool json = false;
        CLI::App app{"Rewrite a DeepSpeed pipeline checkpoint (Megatron-DeepSpeed / mds-train layout) for another tensor-, pipeline-\n"
                     "and data-parallel layout: layer files merged over TP and split again (vocabulary re-padded, QKV on head\n"
                     "boundaries), mp_rank files for the new ranks and stages, and with --with-optimizer the BF16 optimizer\n"
                     "states resharded through the universal per-parameter layout. DST/<tag> appears only when complete;\n"
                     "DST/latest moves last.",
                     "mds-ckpt-reshape"};
        mds::add_version_flag(app, "mds-ckpt-reshape");
        app.add_option("SRC", src, "Checkpoint root (holding `latest`) or a global_step folder")->required();
        app.add_option("DST", dst, "Destination checkpoint root (created); gets DST/<tag> and DST/latest")->required();
        // Degrees are whole numbers of at least 1: 0 or a negative is refused with the flag named, never
        // taken as "the source's" or as 1.
        app.add_option("--target-tp", opt.target_tp, "Tensor-parallel degree of the result (1 to 1024)")
            ->required()
            ->check(mds::number_in(1, 1024));
        app.add_option("--target-pp", opt.target_pp, "Pipeline-parallel degree of the result (1 to 1024)")
            ->required()
            ->check(mds::number_in(1, 1024));
        app.add_option("--target-dp", opt.target_dp, "Data-parallel degree of the result, 1 to 65536 (default: the source's)")
            ->check(mds::number_in(1, 65536));
        app.add_option("--tag", opt.tag, "Tag of SRC to reshape, e.g. global_step1000 (default: the one `latest` names)");
        app.add_flag("--with-optimizer", opt.with_optimizer,
                     "Reshard the BF16 optimizer states (fp32 masters, Adam moments); default: weights only");
        app.add_flag("--universal", opt.write_universal,
                     "Also write DST/<tag>_universal (DeepSpeed's universal checkpoint) and DST/latest_universal; implies --with-optimizer");
        app.add_option("--partition-method", opt.partition_method,
                       "DeepSpeed partition_method for the stages: type:<regex>, parameters or uniform "
                       "(default: args.pp_partition_method, else type:transformer)");
        app.add_option("--partition-algorithm", algorithm,
                       "Whose partition_balanced cuts the stages: dp (DeepSpeed since Dec 2023, default) or bisect (v0.6.5, BLOOM era)")
            ->check(CLI::IsMember({"dp", "bisect"}));
        app.add_option("--original-vocab-size", opt.original_vocab_size,
                       "Tokenizer vocabulary size (at least 1), for checkpoints without checkpoint_info when the padded size changes")
            ->check(mds::number_in(1, 1e9));
        app.add_flag("--overwrite", opt.overwrite, "Replace DST/<tag> if it exists");
        app.add_flag("--dry-run", opt.dry_run, "Print the target layout (stages, layers, files); write nothing");
        opt.workers = mds::workers_or_cores(0);  // the cores
        app.add_option("--workers", opt.workers,
                       "Threads reading, splitting and writing layer and optimizer files side by side (1 to 1024; default: the cores)")
            ->check(mds::number_in(1, 1024));
        bool no_verify = false;
        app.add_flag("--no-verify", no_verify, "Skip the CRC-32 checks of the pickles and tensors read (faster; damage goes unnoticed)");
        mds::add_progress_flags(app, progress);
        mds::add_json_flag(app, json);
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;

        try {
            if (!opt.tag.empty()) mds::checked_entry_name(opt.tag, "--tag");
        } catch (const mds::Error& e) {
            throw mds::UsageError(e.what());
        }
        opt.verify = !no_verify;
        if (opt.write_universal) opt.with_optimizer = true;
        opt.partition_algorithm = *mds::ckpt::parse_partition_algorithm(algorithm);
        if (!progress.quiet) opt.note = [](const std::string& m) { mds::print_info(m); };
        std::unique_ptr<mds::Progress> bar;  // made at the first tensor, when the total is known
        opt.progress = [&](std::uint64_t tensors, std::uint64_t done, std::uint64_t total) {
            if (!bar) bar = std::make_unique<mds::Progress>("tensors", total, progress.resolved(), progress.interval_s);
            bar->update(tensors, done, done);
        };
        const auto report = mds::ckpt::reshape_checkpoint(src, dst, opt);
        if (bar) bar->finish();
        if (json) {
            std::printf("%s\n", mds::ckpt::reshape_report_json(report).c_str());
        } else if (opt.dry_run) {
            std::printf("%s", mds::ckpt::describe_reshape(report).c_str());
        }
        if (!progress.quiet && !opt.dry_run)
            mds::print_info(mds::printable(report.tag) + ": tp " + std::to_string(report.source_tp) + " pp " + std::to_string(report.source_pp) + " -> tp " +
                            std::to_string(report.target_tp) + " pp " + std::to_string(report.target_pp) + " dp " + std::to_string(report.target_dp) +
                            ", " + std::to_string(report.files.size()) + " files, " + std::to_string(report.bytes) + " bytes -> " + mds::printable(report.output, 200));
        return 0;
    });
}
