// hf_cache.h: the Hugging Face cache folder from the environment with huggingface_hub's precedence
// and Python's ~ / $VAR expansion, repository ids as huggingface_hub validates them, and a name
// resolved to a local file, a local folder or the snapshot refs/main names (with what is missing).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "mds/util/hf_cache.h"
#include "test_support.h"

namespace fs = std::filesystem;
using mds::hf_cache::EnvLookup;
using Kind = mds::hf_cache::Resolved::Kind;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
    return [vars](const char* name) -> std::optional<std::string> {
        const auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
}

void write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
}

}  // namespace

TEST_CASE("hub cache folder: huggingface_hub's precedence of variables") {
    using mds::hf_cache::hub_cache_dir;
    CHECK(hub_cache_dir(env_of({{"HOME", "/home/u"}})).path == "/home/u/.cache/huggingface/hub");
    CHECK(hub_cache_dir(env_of({{"HOME", "/home/u/"}})).path == "/home/u/.cache/huggingface/hub");
    CHECK(hub_cache_dir(env_of({{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "/xdg"}})).path == "/xdg/huggingface/hub");
    CHECK(hub_cache_dir(env_of({{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "/xdg"}, {"HF_HOME", "/hf"}})).path == "/hf/hub");
    CHECK(hub_cache_dir(env_of({{"HF_HOME", "/hf"}, {"HUGGINGFACE_HUB_CACHE", "/legacy"}})).path == "/legacy");
    const auto c = hub_cache_dir(env_of({{"HF_HOME", "/hf"}, {"HUGGINGFACE_HUB_CACHE", "/legacy"}, {"HF_HUB_CACHE", "/new"}}));
    CHECK(c.path == "/new");
    CHECK(c.from == "HF_HUB_CACHE");
    // TRANSFORMERS_CACHE is not read by huggingface_hub (nor by transformers 5).
    CHECK(hub_cache_dir(env_of({{"HOME", "/h"}, {"TRANSFORMERS_CACHE", "/tc"}})).path == "/h/.cache/huggingface/hub");
    // ~ and $VARS expanded as os.path.expanduser / expandvars; unknown variables stay.
    CHECK(hub_cache_dir(env_of({{"HOME", "/h"}, {"HF_HOME", "~/hf"}})).path == "/h/hf/hub");
    CHECK(hub_cache_dir(env_of({{"SCRATCH", "/s"}, {"HF_HUB_CACHE", "$SCRATCH/hub"}})).path == "/s/hub");
    CHECK(hub_cache_dir(env_of({{"SCRATCH", "/s"}, {"HF_HUB_CACHE", "${SCRATCH}x/$NOPE/${}"}})).path == "/sx/$NOPE/${}");
    // An empty variable counts as set, as os.getenv returns "": the cache is relative.
    CHECK(hub_cache_dir(env_of({{"HOME", "/h"}, {"HF_HOME", ""}})).path == "hub");
}

TEST_CASE("expand_path follows Python's expanduser then expandvars") {
    const auto env = env_of({{"HOME", "/home/u"}, {"A", "x"}});
    CHECK(mds::hf_cache::expand_path("~", env) == "/home/u");
    CHECK(mds::hf_cache::expand_path("~/a/$A", env) == "/home/u/a/x");
    CHECK(mds::hf_cache::expand_path("a~/$A.b", env) == "a~/x.b");
    CHECK(mds::hf_cache::expand_path("~no-such-user-mds/x", env) == "~no-such-user-mds/x");
    CHECK(mds::hf_cache::expand_path("$", env) == "$");
    CHECK(mds::hf_cache::expand_path("${A", env) == "${A");
    CHECK(mds::hf_cache::expand_path("~", env_of({{"HOME", "/"}})) == "/");
}

TEST_CASE("repository ids as huggingface_hub validates them") {
    using mds::hf_cache::is_repo_id;
    CHECK(is_repo_id("gpt2"));
    CHECK(is_repo_id("bigscience/bloom"));
    CHECK(is_repo_id("bigscience-catalogue-data-dev/byte-level-bpe-tokenizer-no-norm-250k-whitespace-and-eos-regex-alt-v2-pre_nfkc"));
    CHECK(is_repo_id("a_b/c.d-e"));
    CHECK_FALSE(is_repo_id(""));
    CHECK_FALSE(is_repo_id("a/b/c"));
    CHECK_FALSE(is_repo_id("/abs/path"));
    CHECK_FALSE(is_repo_id("./tok"));
    CHECK_FALSE(is_repo_id("org/-name"));
    CHECK_FALSE(is_repo_id("org/name."));
    CHECK_FALSE(is_repo_id("org--x/name"));
    CHECK_FALSE(is_repo_id("org/a..b"));
    CHECK_FALSE(is_repo_id("org/name.git"));
    CHECK_FALSE(is_repo_id("org/caf\xc3\xa9"));
    CHECK_FALSE(is_repo_id("org/" + std::string(97, 'a')));
    CHECK(is_repo_id("org/" + std::string(96, 'a')));
    CHECK(mds::hf_cache::repo_folder_name("bigscience/bloom") == "models--bigscience--bloom");
    CHECK(mds::hf_cache::repo_folder_name("gpt2") == "models--gpt2");
}

TEST_CASE("a name resolves to a local path first, else the snapshot refs/main names") {
    const fs::path dir = mds::test::scratch_dir("hf-cache");
    const fs::path cache = dir / "hub";
    const auto env = env_of({{"HF_HUB_CACHE", cache.string()}});
    const fs::path repo = cache / "models--org--tok";
    const std::string hash = "0123456789abcdef0123456789abcdef01234567";

    SUBCASE("no repository folder: every place searched is named") {
        const auto r = mds::hf_cache::resolve_name("org/tok", env);
        CHECK(r.kind == Kind::NotFound);
        CHECK(r.searched.find(fs::absolute("org/tok").string()) != std::string::npos);
        CHECK(r.searched.find(repo.string()) != std::string::npos);
        CHECK(r.searched.find("HF_HUB_CACHE") != std::string::npos);
    }
    SUBCASE("not a repository id: the cache is not searched") {
        const auto r = mds::hf_cache::resolve_name("./no/such/dir", env);
        CHECK(r.kind == Kind::NotFound);
        CHECK(r.searched.find("not a Hugging Face repository id") != std::string::npos);
    }
    SUBCASE("refs/main names the snapshot") {
        write(repo / "refs" / "main", hash);
        write(repo / "snapshots" / hash / "tokenizer.json", "{}");
        const auto r = mds::hf_cache::resolve_name("org/tok", env);
        REQUIRE(r.kind == Kind::CacheSnapshot);
        CHECK(r.path == (repo / "snapshots" / hash).string());
        CHECK(r.snapshot.commit == hash);
        CHECK_FALSE(mds::hf_cache::known_missing(r.snapshot, "tokenizer.json"));
        write(repo / ".no_exist" / hash / "vocab.json", "");
        CHECK(mds::hf_cache::known_missing(r.snapshot, "vocab.json"));
    }
    SUBCASE("a trailing newline in refs/main is tolerated") {
        write(repo / "refs" / "main", hash + "\n");
        fs::create_directories(repo / "snapshots" / hash);
        CHECK(mds::hf_cache::resolve_name("org/tok", env).kind == Kind::CacheSnapshot);
    }
    SUBCASE("no refs/main: not found, and the snapshots present are listed") {
        fs::create_directories(repo / "snapshots" / hash);
        const auto r = mds::hf_cache::resolve_name("org/tok", env);
        CHECK(r.kind == Kind::NotFound);
        CHECK(r.searched.find("refs/main") != std::string::npos);
        CHECK(r.searched.find(hash) != std::string::npos);
    }
    SUBCASE("refs/main names a snapshot that is missing") {
        write(repo / "refs" / "main", hash);
        fs::create_directories(repo / "snapshots");
        const auto r = mds::hf_cache::resolve_name("org/tok", env);
        CHECK(r.kind == Kind::NotFound);
        CHECK(r.searched.find("names commit") != std::string::npos);
    }
    SUBCASE("a local folder or file of the same name wins") {
        write(repo / "refs" / "main", hash);
        fs::create_directories(repo / "snapshots" / hash);
        const fs::path cwd = fs::current_path();
        fs::current_path(dir);
        fs::create_directories(dir / "org" / "tok");
        const auto r = mds::hf_cache::resolve_name("org/tok", env);
        CHECK(r.kind == Kind::Folder);
        CHECK(r.path == "org/tok");
        write(dir / "tok.json", "{}");
        CHECK(mds::hf_cache::resolve_name("tok.json", env).kind == Kind::File);
        fs::current_path(cwd);
    }
    fs::remove_all(dir);
}
