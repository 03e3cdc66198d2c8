// mds-ckpt-shrink: weights-only copy of DeepSpeed pipeline checkpoints (drops optimizer shards).
// docs/mds-ckpt-shrink.md has every flag.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mds/ckpt/shrink.h"
#include "mds/util/cli.h"
#include "mds/util/parallel.h"  // workers_or_cores
#include "mds/util/error.h"
#include "mds/util/progress.h"
#include "mds/util/safe_paths.h"  // checked_entry_name, printable
#include "mds/util/tool.h"

int main(int argc, char** argv) {
    return mds::run_tool("mds-ckpt-shrink", [&]() -> int {
        std::string src, dst;
        mds::ckpt::ShrinkOptions opt;
        mds::ProgressFlags progress;
        bool json = false, verbose = false, no_verify = false;
        CLI::App app{"Copy the weights of DeepSpeed pipeline checkpoints (layer files, mp_rank files, `latest`) from\n"
                     "SRC to DST, dropping the optimizer shards (*_optim_states.pt): BigScience's weights-only backup,\n"
                     "about 1/7 of a bf16 checkpoint. Every copied file is verified (zip structure, CRC-32s) first. Each tag\n"
                     "appears in DST only when complete; `latest` moves last.",
                     "mds-ckpt-shrink"};
        mds::add_version_flag(app, "mds-ckpt-shrink");
        app.add_option("SRC", src, "Checkpoint folder (the --save folder holding `latest` and global_step*)")->required();
        app.add_option("DST", dst, "Destination checkpoint folder (created)")->required();
        app.add_option("--tag", opt.tags, "Tag to copy, e.g. global_step1000 (repeatable; default: the one `latest` names)");
        app.add_flag("--all", opt.all_tags, "Copy every global_step* folder of SRC");
        app.add_flag("--overwrite", opt.overwrite, "Replace tags that already exist in DST");
        app.add_flag("--dry-run", opt.dry_run, "Print what would be kept and dropped; write nothing");
        app.add_flag("--no-verify", no_verify,
                     "Copy files without checking their zip structure and CRC-32s (faster; a damaged file is copied as is)");
        opt.workers = mds::workers_or_cores(0);  // the cores
        app.add_option("--workers", opt.workers, "Files checked and copied side by side (1 to 1024; default: the cores)")
            ->check(mds::number_in(1, 1024));
        app.add_flag("-v,--verbose", verbose, "One line per file on stderr");
        mds::add_progress_flags(app, progress);
        mds::add_json_flag(app, json);
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;
        const bool quiet = progress.quiet;
        opt.verify = !no_verify;
        for (const auto& tag : opt.tags) {
            try {
                mds::checked_entry_name(tag, "--tag");
            } catch (const mds::Error& e) {
                throw mds::UsageError(e.what());
            }
        }
        if (verbose && !quiet) opt.log = [](const std::string& m) { mds::print_info(m); };
        if (!quiet) opt.note = [](const std::string& m) { mds::print_info(m); };
        std::unique_ptr<mds::Progress> bar;  // made at the first piece, when the total is known
        opt.progress = [&](std::uint64_t files, std::uint64_t done, std::uint64_t total) {
            if (!bar) bar = std::make_unique<mds::Progress>("files", total, progress.resolved(), progress.interval_s);
            bar->update(files, done, done);
        };

        const auto report = mds::ckpt::shrink_checkpoint(src, dst, opt);
        if (bar) bar->finish();
        nlohmann::json j = {{"source", src}, {"destination", dst}, {"dry_run", opt.dry_run}, {"latest_written", report.latest_written}};
        for (const auto& t : report.tags) {
            nlohmann::json files = nlohmann::json::array();
            int kept = 0, dropped = 0;
            for (const auto& f : t.files) {
                files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"action", mds::ckpt::shrink_action_name(f.action)}});
                (f.action == mds::ckpt::ShrinkFile::Action::Dropped ? dropped : kept)++;
            }
            j["tags"].push_back({{"tag", t.tag}, {"bytes_in", t.bytes_in}, {"bytes_out", t.bytes_out}, {"files", files}});
            if (!quiet)
                mds::print_info(mds::printable(t.tag) + ": kept " + std::to_string(kept) + " files, dropped " + std::to_string(dropped) + "; " +
                                std::to_string(t.bytes_in) + " -> " + std::to_string(t.bytes_out) + " bytes" +
                                (opt.dry_run ? " (dry run)" : ""));
        }
        if (json) std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        return 0;
    });
}
