// Drives mds::hub::HubApi for test_hub_api.py:
//   hub_api_probe ENDPOINT REPO TYPE REVISION upload DIR [PARENT]   every file of DIR in one commit
//   hub_api_probe ENDPOINT REPO TYPE REVISION tree                  the tree as JSON lines
//   hub_api_probe ENDPOINT REPO TYPE REVISION head
//   hub_api_probe ENDPOINT REPO TYPE REVISION create
// The token comes from HF_TOKEN. Prints JSON on stdout; an mds::Error exits 1 with its message.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mds/hub/api.h"
#include "mds/hub/hash.h"
#include "mds/util/files.h"

namespace fs = std::filesystem;
using namespace mds::hub;

int main(int argc, char** argv) {
    if (argc < 6) {
        std::fprintf(stderr, "usage: hub_api_probe ENDPOINT REPO TYPE REVISION create|head|tree|upload DIR [PARENT]\n");
        return 2;
    }
    try {
        HttpOptions opt;
        if (const char* t = std::getenv("HF_TOKEN")) opt.token = t;
        opt.retry.base_seconds = 0.05;
        HttpClient http(opt);
        HubApi api(http, argv[1]);
        RepoRef repo{argv[2], argv[3], argv[4]};
        const std::string cmd = argv[5];
        nlohmann::json out;
        if (cmd == "create") {
            out["created"] = api.create_repo(repo, false);
        } else if (cmd == "head") {
            const auto h = api.head(repo);
            out["head"] = h ? nlohmann::json(*h) : nlohmann::json(nullptr);
        } else if (cmd == "tree") {
            out = nlohmann::json::array();
            for (const auto& e : api.list_tree(repo))
                out.push_back({{"path", e.path}, {"dir", e.directory}, {"size", e.size}, {"oid", e.oid},
                               {"lfs", e.lfs_sha256 ? nlohmann::json(*e.lfs_sha256) : nlohmann::json(nullptr)}});
        } else if (cmd == "upload" && argc >= 7) {
            const std::string dir = argv[6];
            std::vector<std::string> rel;
            for (const auto& e : fs::recursive_directory_iterator(dir))
                if (e.is_regular_file()) rel.push_back(fs::relative(e.path(), dir).string());
            std::sort(rel.begin(), rel.end());
            std::vector<PreuploadFile> pre;
            std::vector<FileDigests> digests;
            for (const auto& r : rel) {
                const std::string p = dir + "/" + r;
                digests.push_back(digest_file(p));
                std::string content = mds::read_file(p);
                pre.push_back({r, digests.back().size, content.substr(0, 512)});
            }
            const auto modes = api.preupload(repo, pre);
            std::vector<std::pair<std::string, std::uint64_t>> objects;
            std::vector<CommitFile> files;
            int lfs = 0, regular = 0, skipped = 0;
            for (std::size_t i = 0; i < rel.size(); ++i) {
                const auto& m = modes.at(i);
                const std::string local_oid = m.lfs ? digests[i].sha256 : digests[i].git_sha1;
                if (m.ignore || (m.remote_oid && *m.remote_oid == local_oid)) {
                    ++skipped;
                    continue;
                }
                if (m.lfs) {
                    objects.emplace_back(digests[i].sha256, digests[i].size);
                    files.push_back({CommitFile::Kind::lfs, rel[i], "", digests[i].sha256, digests[i].size});
                    ++lfs;
                } else {
                    files.push_back({CommitFile::Kind::regular, rel[i], dir + "/" + rel[i], "", digests[i].size});
                    ++regular;
                }
            }
            std::vector<std::string> transfers;
            for (const auto& t : api.lfs_batch(repo, objects)) {
                const auto it = std::find_if(files.begin(), files.end(), [&](const CommitFile& f) { return f.sha256 == t.oid; });
                api.upload_lfs(t, dir + "/" + it->path);
                transfers.push_back(!t.needed ? "present" : t.upload_header.empty() ? "basic" : "multipart");
            }
            out = {{"lfs", lfs}, {"regular", regular}, {"skipped", skipped}, {"transfers", transfers}};
            if (!files.empty()) {
                std::optional<std::string> parent;
                if (argc >= 8) parent = argv[7];
                out["commit"] = api.commit(repo, "upload", files, parent);
            }
        } else {
            std::fprintf(stderr, "unknown command %s\n", cmd.c_str());
            return 2;
        }
        std::printf("%s\n", out.dump().c_str());
    } catch (const mds::hub::CommitUncertain& e) {
        std::fprintf(stderr, "uncertain: %s\n", e.what());
        return 3;
    } catch (const mds::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
