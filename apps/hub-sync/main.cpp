// mds-hub-sync: upload new and changed files of a folder to a Hugging Face Hub repository or an S3
// bucket, never deleting remote files unless asked (docs/mds-hub-sync.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mds/hub/sync.h"
#include "mds/util/cli.h"
#include "mds/util/error.h"
#include "mds/util/tool.h"

namespace {

mds::hub::SyncReport sync_hub(mds::hub::SyncOptions& o, std::string endpoint) {
    if (o.private_repo && !o.create_repo) throw mds::UsageError("--private needs --create-repo");
    if (endpoint.empty()) {
        const char* env = std::getenv("HF_ENDPOINT");
        endpoint = env && *env ? env : "https://huggingface.co";
    }
    mds::hub::check_url_allowed(endpoint);
    o.http.token = mds::hub::find_token();
    if (o.http.token.empty())
        throw mds::UsageError("no Hugging Face token: set HF_TOKEN, or log in so that ~/.cache/huggingface/token exists");
    return mds::hub::sync_folder(endpoint, o);
}

void print_report(const mds::hub::SyncReport& r, const mds::hub::SyncOptions& o, bool s3, bool quiet, bool json) {
    if (!quiet) {
        std::string line = std::string(r.dry_run ? "would upload " : "uploaded ") + std::to_string(r.uploaded.size()) +
                           " file(s) (" + mds::format_bytes(static_cast<double>(r.uploaded_bytes)) + ")";
        if (!r.dry_run && !s3) line += " in " + std::to_string(r.commits.size()) + " commit(s)";
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
}

}  // namespace

int main(int argc, char** argv) {
    return mds::run_tool("mds-hub-sync", [&]() -> int {
        mds::hub::SyncOptions o;
        std::string endpoint, region;
        std::uint64_t part_size_mib = 64;
        int timeout_s = 300, retries = 5;
        mds::ProgressFlags progress;
        bool json = false, verbose = false;
        CLI::App app{"Upload the new and changed files of LOCAL_DIR to the Hugging Face Hub repository REPO_ID over the\n"
                     "Hub's HTTP API (regular files inline, large or binary ones through Git LFS, multipart when the Hub\n"
                     "asks), in commits of at most 100 files -- or, when REPO_ID is s3://BUCKET[/PREFIX], to an S3 or\n"
                     "S3-compatible bucket (SigV4, multipart over --part-size-mib). Files the destination already has are\n"
                     "skipped, so a re-run (also after a kill) sends only what is missing. Remote files missing locally\n"
                     "are never deleted, unless --delete. The Hub token comes from HF_TOKEN or the Hugging Face token\n"
                     "file, S3 keys from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or ~/.aws/credentials; neither is\n"
                     "ever printed.",
                     "mds-hub-sync"};
        mds::add_version_flag(app, "mds-hub-sync");
        app.add_option("LOCAL_DIR", o.local_dir, "The folder to upload (tensorboard/, codecarbon/, logs/, a checkpoint)")->required();
        app.add_option("REPO_ID", o.repo.id, "The repository (user/name or org/name), or s3://BUCKET[/PREFIX]")->required();
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
        app.add_option("--endpoint", endpoint,
                       "The Hub (default: $HF_ENDPOINT, else https://huggingface.co), or the S3 endpoint (default:\n"
                       "$AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS's; https://storage.googleapis.com for GCS);\n"
                       "http only on loopback");
        app.add_option("--region", region, "S3: the region signed for (default: $AWS_REGION, $AWS_DEFAULT_REGION, ~/.aws/config, us-east-1)");
        app.add_option("--part-size-mib", part_size_mib, "S3: files larger than this go up in parts of this size (MiB)")
            ->capture_default_str()
            ->check(mds::number_in(5, 5120));
        app.add_option("--jobs", o.jobs, "LFS files (S3: files or parts) uploaded at once")->capture_default_str()->check(mds::number_in(1, 64));
        app.add_option("--message", o.commit_message, "Commit message (default: mds-hub-sync: N file(s))");
        app.add_option("--timeout", timeout_s,
                       "Seconds an answer may take to arrive whole after its request was sent, and an upload may stall")
            ->capture_default_str()
            ->check(mds::number_in(1, 86400));
        app.add_option("--retries", retries, "Tries after the first of a request that failed for a passing reason (5xx, 429, timeout)")
            ->capture_default_str()
            ->check(mds::number_in(0, 100));
        app.add_option("--state-file", o.state_file,
                       "Digest cache and lock (default: LOCAL_DIR/.cache/mds-hub-sync/<repo>.json)");
        app.add_flag("-v,--verbose", verbose, "One line per file and commit on stderr (the token is never printed)");
        mds::add_progress_flags(app, progress);
        mds::add_json_flag(app, json);
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;

        o.progress = progress.resolved();
        o.progress_interval_s = progress.interval_s;
        if (verbose && !progress.quiet) o.log = [](const std::string& m) { mds::print_info(m); };
        o.warn = [](const std::string& m) { mds::print_warning(m); };
        o.http.on_retry = [&](int n, double s, const std::string& why) {
            if (!progress.quiet) mds::print_warning("retry " + std::to_string(n) + " in " + std::to_string(static_cast<int>(s + 0.5)) + " s: " + why);
        };
        o.http.user_agent = std::string("mds-hub-sync/") + mds::mds_version();
        o.http.answer_timeout = o.http.stall_timeout = std::chrono::seconds(timeout_s);
        o.http.connect_timeout = std::chrono::seconds(std::min(timeout_s, 30));
        o.http.retry.max_retries = retries;
        const bool s3 = mds::hub::is_s3_url(o.repo.id);
        if (s3) {
            for (const char* hub_only : {"--repo-type", "--revision", "--path-in-repo", "--private", "--message"})
                if (app.count(hub_only) > 0)
                    throw mds::UsageError(std::string(hub_only) + " is for Hub repositories, not s3:// destinations" +
                                          (std::string(hub_only) == "--path-in-repo" ? " (put the prefix in the URL)" : ""));
            o.part_size = part_size_mib << 20;
        } else {
            for (const char* s3_only : {"--region", "--part-size-mib"})
                if (app.count(s3_only) > 0) throw mds::UsageError(std::string(s3_only) + " is for s3:// destinations");
        }
        const mds::hub::SyncReport r = [&] {
            if (s3) {
                const mds::hub::S3Url dest = mds::hub::parse_s3_url(o.repo.id);
                return mds::hub::sync_folder_s3(mds::hub::find_s3_settings(endpoint, region), dest, o);
            }
            return sync_hub(o, endpoint);
        }();
        print_report(r, o, s3, progress.quiet, json);
        return r.failed.empty() ? 0 : 1;
    });
}