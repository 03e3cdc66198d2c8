// mds-hub-sync: upload new and changed files of a folder to a Hugging Face Hub repository, never
// deleting remote files unless asked (docs/mds-hub-sync.md).
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mds/hub/sync.h"
#include "mds/util/cli.h"
#include "mds/util/error.h"
#include "mds/util/tool.h"

int main(int argc, char** argv) {
    return mds::run_tool("mds-hub-sync", [&]() -> int {
        mds::hub::SyncOptions o;
        std::string endpoint;
        mds::ProgressFlags progress;
        bool json = false, verbose = false;
        CLI::App app{"Upload the new and changed files of LOCAL_DIR to the Hugging Face Hub repository REPO_ID over the\n"
                     "Hub's HTTP API (regular files inline, large or binary ones through Git LFS, multipart when the Hub\n"
                     "asks), in commits of at most 100 files. Files the Hub already has are skipped, so a re-run (also\n"
                     "after a kill) sends only what is missing. Remote files missing locally are never deleted, unless\n"
                     "--delete. The token comes from HF_TOKEN or the Hugging Face token file and is never printed.",
                     "mds-hub-sync"};
        mds::add_version_flag(app, "mds-hub-sync");
        app.add_option("LOCAL_DIR", o.local_dir, "The folder to upload (tensorboard/, codecarbon/, logs/, a checkpoint)")->required();
        app.add_option("REPO_ID", o.repo.id, "The repository: user/name or org/name")->required();
        app.add_option("--repo-type", o.repo.type, "model, dataset or space")
            ->capture_default_str()
            ->check(CLI::IsMember({"model", "dataset", "space"}));
        app.add_option("--revision", o.repo.revision, "The branch to commit to")->capture_default_str();
        app.add_option("--include", o.include, "Only files matching this glob (relative to LOCAL_DIR; repeatable)");
        app.add_option("--exclude", o.exclude, "Skip files matching this glob (repeatable)");
        app.add_option("--path-in-repo", o.path_in_repo, "Folder in the repository to upload into (default: its root)");
        app.add_flag("--create-repo", o.create_repo, "Create the repository when it does not exist");
        app.add_flag("--private", o.private_repo, "With --create-repo: make it private");
        app.add_flag("--dry-run", o.dry_run, "Say what would be uploaded (and deleted); change nothing");
        app.add_flag("--delete", o.delete_remote,
                     "Also delete remote files (under --path-in-repo, matching the globs) that are missing locally");
        app.add_option("--endpoint", endpoint, "The Hub (default: $HF_ENDPOINT, else https://huggingface.co); http only on loopback");
        app.add_option("--jobs", o.jobs, "LFS files uploaded at once")->capture_default_str()->check(CLI::Range(1, 64));
        app.add_option("--message", o.commit_message, "Commit message (default: mds-hub-sync: N file(s))");
        app.add_option("--state-file", o.state_file,
                       "Digest cache and lock (default: LOCAL_DIR/.cache/mds-hub-sync/<repo>.json)");
        app.add_flag("-v,--verbose", verbose, "One line per file and commit on stderr (the token is never printed)");
        mds::add_progress_flags(app, progress);
        mds::add_json_flag(app, json);
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;

        if (o.private_repo && !o.create_repo) throw mds::UsageError("--private needs --create-repo");
        if (endpoint.empty()) {
            const char* env = std::getenv("HF_ENDPOINT");
            endpoint = env && *env ? env : "https://huggingface.co";
        }
        mds::hub::check_url_allowed(endpoint);
        o.http.token = mds::hub::find_token();
        if (o.http.token.empty())
            throw mds::UsageError("no Hugging Face token: set HF_TOKEN, or log in so that ~/.cache/huggingface/token exists");
        o.http.user_agent = std::string("mds-hub-sync/") + mds::mds_version();
        o.progress = progress.resolved();
        o.progress_interval_s = progress.interval_s;
        if (verbose && !progress.quiet) o.log = [](const std::string& m) { mds::print_info(m); };
        o.warn = [](const std::string& m) { mds::print_warning(m); };
        o.http.on_retry = [&](int n, double s, const std::string& why) {
            if (!progress.quiet) mds::print_warning("retry " + std::to_string(n) + " in " + std::to_string(static_cast<int>(s + 0.5)) + " s: " + why);
        };

        const auto r = mds::hub::sync_folder(endpoint, o);
        if (!progress.quiet) {
            std::string line = std::string(r.dry_run ? "would upload " : "uploaded ") + std::to_string(r.uploaded.size()) +
                               " file(s) (" + mds::format_bytes(static_cast<double>(r.uploaded_bytes)) + ")";
            if (!r.dry_run) line += " in " + std::to_string(r.commits.size()) + " commit(s)";
            line += ", " + std::to_string(r.unchanged) + " unchanged, " + std::to_string(r.failed.size()) + " failed";
            if (!r.remote_only.empty())
                line += o.delete_remote ? "; " + std::string(r.dry_run ? "would delete " : "deleted ") + std::to_string(r.deleted.size()) +
                                              " remote file(s) missing locally"
                                        : "; " + std::to_string(r.remote_only.size()) +
                                              " remote file(s) missing locally were kept (--delete removes them)";
            mds::print_info(line);
            for (const auto& [path, why] : r.failed) mds::print_warning("not uploaded: " + path + ": " + why);
        }
        if (json) {
            nlohmann::json failed = nlohmann::json::array();
            for (const auto& [path, why] : r.failed) failed.push_back({{"path", path}, {"error", why}});
            const nlohmann::json j = {{"dry_run", r.dry_run},      {"uploaded", r.uploaded}, {"uploaded_bytes", r.uploaded_bytes},
                                      {"unchanged", r.unchanged},  {"failed", failed},       {"commits", r.commits},
                                      {"remote_only", r.remote_only}, {"deleted", r.deleted}};
            std::printf("%s\n", j.dump().c_str());
        }
        return r.failed.empty() ? 0 : 1;
    });
}
