// mds-ckpt-diff: two checkpoints (or a checkpoint and a Hugging Face folder) compared tensor by
// tensor. docs/mds-ckpt-diff.md has every flag and the exit statuses.
#include <cstdio>
#include <filesystem>
#include <string>

#include "mds/ckpt/diff.h"
#include "mds/util/cli.h"
#include "mds/util/error.h"
#include "mds/util/safe_paths.h"  // filesystem_error_message
#include "mds/util/tool.h"

namespace {

// Exit statuses: 0 equal within the tolerance, 1 different, 2 usage error or unreadable input.
constexpr int kExitDifferent = 1;
constexpr int kExitUnreadable = 2;

}  // namespace

int main(int argc, char** argv) {
    return mds::run_tool("mds-ckpt-diff", [&]() -> int {
        std::string a, b;
        mds::ckpt::DiffOptions opt;
        std::size_t top = 20;
        bool json = false, quiet = false, no_verify = false;
        CLI::App app{"Compare two models tensor by tensor: DeepSpeed pipeline checkpoints at any TP / PP / DP (merged as\n"
                     "mds-ckpt-to-hf merges them) or Hugging Face GPT2 / BLOOM folders. Reports the largest absolute and\n"
                     "relative differences, elements outside the tolerance, tensors on one side only, and tied embedding\n"
                     "copies that differ inside a checkpoint. Exit 0 equal, 1 different, 2 usage error or unreadable input.",
                     "mds-ckpt-diff"};
        mds::add_version_flag(app, "mds-ckpt-diff");
        app.add_option("A", a, "Checkpoint root (holding `latest`), global_step folder, or Hugging Face folder (config.json)")->required();
        app.add_option("B", b, "The same kinds as A")->required();
        app.add_option("--atol", opt.atol, "Absolute tolerance (default 0): equal when |a-b| <= atol + rtol*|b| elementwise")
            ->check(mds::non_negative_number());
        app.add_option("--rtol", opt.rtol, "Relative tolerance (default 0)")->check(mds::non_negative_number());
        app.add_flag("--optimizer", opt.optimizer, "Also compare the optimizer states (fp32 master, exp_avg, exp_avg_sq per parameter; BF16 or ZeRO stage 1/2 files) and the step");
        app.add_option("--top", top, "Differing tensors to list, largest relative difference first (default 20; 0: all)");
        app.add_flag("--no-verify", no_verify, "Skip the CRC-32 checks of the pickles and tensors read (faster; damage goes unnoticed)");
        mds::add_json_flag(app, json);
        mds::add_quiet_flag(app, quiet);
        app.get_option("--quiet")->description("Print nothing (no lines, no notes): the exit status tells; --json still prints");
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;
        opt.verify = !no_verify;

        mds::ckpt::DiffReport report;
        // Anything that keeps a side from being read exits 2: 1 means "the models differ".
        try {
            report = mds::ckpt::diff_models(a, b, opt);
        } catch (const mds::UsageError&) {
            throw;
        } catch (const mds::Error& e) {
            mds::print_error(e.what());
            return kExitUnreadable;
        } catch (const std::filesystem::filesystem_error& e) {
            mds::print_error(mds::filesystem_error_message(e));
            return kExitUnreadable;
        }
        if (!quiet)
            for (const auto& note : report.notes) mds::print_info(note);
        if (json) std::printf("%s\n", mds::ckpt::diff_report_json(report, top).c_str());
        else if (!quiet) std::fputs(mds::ckpt::describe_diff(report, top).c_str(), stdout);
        return report.equal() ? mds::kExitOk : kExitDifferent;
    });
}
