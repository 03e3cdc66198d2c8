// mds-ckpt-shrink: weights-only copy of DeepSpeed pipeline checkpoints (drops optimizer shards).
// docs/mds-ckpt-shrink.md has every flag.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mds/ckpt/shrink.h"
#include "mds/util/cli.h"
#include "mds/util/tool.h"

int main(int argc, char** argv) {
    return mds::run_tool("mds-ckpt-shrink", [&]() -> int {
        std::string src, dst;
        mds::ckpt::ShrinkOptions opt;
        bool quiet = false, json = false, verbose = false;
        CLI::App app{"Copy the weights of DeepSpeed pipeline checkpoints (layer files, mp_rank files, `latest`) from\n"
                     "SRC to DST, dropping the optimizer shards (*_optim_states.pt): BigScience's weights-only backup,\n"
                     "about 1/7 of a bf16 checkpoint. Each tag appears in DST only when complete; `latest` moves last.",
                     "mds-ckpt-shrink"};
        mds::add_version_flag(app, "mds-ckpt-shrink");
        app.add_option("SRC", src, "Checkpoint folder (the --save folder holding `latest` and global_step*)")->required();
        app.add_option("DST", dst, "Destination checkpoint folder (created)")->required();
        app.add_option("--tag", opt.tags, "Tag to copy, e.g. global_step1000 (repeatable; default: the one `latest` names)");
        app.add_flag("--all", opt.all_tags, "Copy every global_step* folder of SRC");
        app.add_flag("--overwrite", opt.overwrite, "Replace tags that already exist in DST");
        app.add_flag("--dry-run", opt.dry_run, "Print what would be kept and dropped; write nothing");
        app.add_flag("-v,--verbose", verbose, "One line per file on stderr");
        mds::add_quiet_flag(app, quiet);
        mds::add_json_flag(app, json);
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;
        if (verbose && !quiet) opt.log = [](const std::string& m) { mds::print_info(m); };

        const auto report = mds::ckpt::shrink_checkpoint(src, dst, opt);
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
                mds::print_info(t.tag + ": kept " + std::to_string(kept) + " files, dropped " + std::to_string(dropped) + "; " +
                                std::to_string(t.bytes_in) + " -> " + std::to_string(t.bytes_out) + " bytes" +
                                (opt.dry_run ? " (dry run)" : ""));
        }
        if (json) std::printf("%s\n", j.dump().c_str());
        return 0;
    });
}
