#!/usr/bin/env python3
"""hub_server.py (the local Hugging Face Hub that mds-hub-sync's tests upload to) is faithful: the official
client, huggingface_hub, with Xet off (the LFS protocol the C++ tool speaks), works against it end to end:
  - create_repo: model and dataset, 409 when it exists, exist_ok; 401 for a wrong token, a private repo
    without one looks missing; the initial commit carries the Hub's default .gitattributes;
  - upload_file of a small text -> regular (inline base64, tree oid = git blob sha1);
  - upload_folder: text files and an empty file (regular), a small binary (regular), a binary above the
    binary threshold (LFS basic), a *tfevents* file (LFS by .gitattributes), a file above the multipart
    threshold (LFS multipart, several parts), ignore_patterns / allow_patterns; the second identical
    upload_folder is a no-op (no PUT, no commit);
  - list_repo_tree recursive over several pages, get_paths_info, hf_hub_download of every file (LFS through
    the CDN-like redirect), list_repo_commits, create_branch + upload to it, delete_file / delete_folder,
    parentCommit conflict (412);
  - faults through the client: 503 then success on preupload, 429 + Retry-After 1 (and RateLimit headers)
    on the LFS batch, a connection dropped in a part PUT, a commit whose response is lost (no duplicate);
    every file stored exactly once (the server's counters);
  - the data plane refuses unsigned URLs; the state survives a restart; the command line and admin API.
Exits 77 without huggingface_hub."""
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hub_server import HubServer, git_blob_sha1, lfs_pointer  # noqa: E402
from testkit import check, finish, huggingface_hub_for_local_hub  # noqa: E402

huggingface_hub = huggingface_hub_for_local_hub()
from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download  # noqa: E402
from huggingface_hub.errors import HfHubHTTPError, RemoteEntryNotFoundError, RepositoryNotFoundError  # noqa: E402
from huggingface_hub.utils.sha import git_hash  # noqa: E402

TOKEN = "hf_test_token"
KIB = 1024
CONFIG = dict(token=TOKEN, lfs_threshold=64 * KIB, binary_threshold=4 * KIB, multipart_threshold=256 * KIB,
              chunk_size=64 * KIB, tree_page_size=4, verify=True)



def raises(fn, exc):
    try:
        fn()
    except exc as err:
        return err
    except Exception as err:  # noqa: BLE001
        return f"wrong exception {type(err).__name__}: {err}"
    return None


def since(hub, mark):
    return hub.log()[mark:]


def local_files(folder, skip=()):
    out = {}
    for d, _, names in os.walk(folder):
        for n in names:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, folder).replace(os.sep, "/")
            if not any(rel.endswith(s) for s in skip):
                with open(p, "rb") as f:
                    out[rel] = f.read()
    return out


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def test_facts():
    check(git_blob_sha1(b"Hello, World!") == "b45ef6fec89518d314f546fd6c3025367b721684",
          "git blob sha1 of 'Hello, World!' (ops.md 2.3)")
    data = os.urandom(1000)
    check(git_blob_sha1(data) == git_hash(data), "git blob sha1 = huggingface_hub's git_hash")
    check(lfs_pointer("ab" * 32, 7) == b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"ab" * 32
          + b"\nsize 7\n", "LFS pointer text")


def test_repos(api, hub):
    url = api.create_repo("test-user/ckpt")
    check(url == f"{hub.url}/test-user/ckpt" and url.repo_type == "model", f"create_repo model: {url!r}")
    err = raises(lambda: api.create_repo("test-user/ckpt"), HfHubHTTPError)
    check(isinstance(err, HfHubHTTPError) and err.response.status_code == 409, f"an existing repo: 409: {err}")
    check(api.create_repo("test-user/ckpt", exist_ok=True) == url, "exist_ok=True")
    durl = api.create_repo("logs", repo_type="dataset")
    check(durl == f"{hub.url}/datasets/test-user/logs" and durl.repo_type == "dataset",
          f"create_repo dataset under the user's namespace: {durl!r}")
    info = api.repo_info("test-user/logs", repo_type="dataset")
    check(info.sha == hub.head("test-user/logs", repo_type="dataset") and len(info.sha) == 40,
          f"dataset_info: sha = head: {info.sha}")
    check([s.rfilename for s in info.siblings] == [".gitattributes"], "a new repo holds .gitattributes")
    check(api.model_info("test-user/ckpt", revision="main").sha == hub.head("test-user/ckpt"), "revision/main")

    bad = HfApi(endpoint=hub.url, token="hf_wrong")
    err = raises(lambda: bad.repo_info("test-user/ckpt"), HfHubHTTPError)
    check(isinstance(err, HfHubHTTPError) and not isinstance(err, RepositoryNotFoundError)
          and err.response.status_code == 401 and "Invalid credentials" in str(err), f"a wrong token: 401: {err}")
    api.create_repo("test-user/secret", private=True)
    anon = HfApi(endpoint=hub.url, token=False)
    err = raises(lambda: anon.repo_info("test-user/secret"), RepositoryNotFoundError)
    check(isinstance(err, RepositoryNotFoundError), f"a private repo without a token looks missing: {err}")
    check(anon.repo_info("test-user/ckpt").sha == hub.head("test-user/ckpt"), "public repos read without token")
    err = raises(lambda: anon.upload_file(path_or_fileobj=b"x", path_in_repo="x", repo_id="test-user/ckpt"),
                 HfHubHTTPError)
    check(isinstance(err, HfHubHTTPError) and err.response.status_code == 401, f"writes need the token: {err}")

    ci = api.upload_file(path_or_fileobj=b"Hello, World!", path_in_repo="hello.txt", repo_id="test-user/ckpt",
                         commit_message="hello")
    e = hub.entries("test-user/ckpt")["hello.txt"]
    check(ci.oid == hub.head("test-user/ckpt") and not e["lfs"]
          and e["oid"] == "b45ef6fec89518d314f546fd6c3025367b721684", f"upload_file: regular, git sha1: {e}")
    c = hub.commits("test-user/ckpt")[0]
    check(c["summary"] == "hello" and c["regular_files"] == 1 and c["lfs_files"] == 0, f"the commit: {c}")


def make_folder(tmp):
    d = os.path.join(tmp, "run")
    write(f"{d}/logs/main_log.txt", b"iteration 1\n" * 100)
    write(f"{d}/logs/b.txt", b"b\n")
    write(f"{d}/README.md", b"---\nlicense: apache-2.0\n---\n# run\n")  # the client validates its YAML first
    write(f"{d}/empty.txt", b"")
    write(f"{d}/small.dat", b"\0\1" * 1000)  # binary, 2000 B <= 4 KiB: regular
    write(f"{d}/weights.dat", b"\0" + os.urandom(8 * KIB))  # binary > 4 KiB: LFS basic
    write(f"{d}/tb/events.out.tfevents.1", b"tfevents text")  # *tfevents* in .gitattributes: LFS
    write(f"{d}/big/model.dat", os.urandom(300 * KIB))  # >= 256 KiB: multipart, 5 parts of 64 KiB
    write(f"{d}/scratch.tmp", b"not uploaded")
    return d


def test_folder(api, hub, tmp):
    repo = "test-user/ckpt"
    folder = make_folder(tmp)
    mark = len(hub.log())
    n_commits = len(hub.commits(repo))
    ci = api.upload_folder(repo_id=repo, folder_path=folder, ignore_patterns=["*.tmp"], commit_message="run")
    want = local_files(folder, skip=(".tmp",))
    got = hub.files(repo)
    check({p: got.get(p) for p in want} == want and "scratch.tmp" not in got,
          "upload_folder: every file, *.tmp ignored")
    ent = hub.entries(repo)
    lfs = sorted(p for p, e in ent.items() if e["lfs"])
    check(lfs == ["big/model.dat", "tb/events.out.tfevents.1", "weights.dat"], f"LFS files: {lfs}")
    for p in lfs:
        check(ent[p]["sha256"] == hashlib.sha256(want[p]).hexdigest() and ent[p]["size"] == len(want[p]),
              f"{p}: LFS sha256 and size")
    c = hub.commits(repo)
    check(len(c) == n_commits + 1 and c[0]["oid"] == ci.oid and c[0]["regular_files"] == 5 and c[0]["lfs_files"] == 3,
          f"one commit, 5 regular + 3 LFS lines: {c[0]}")
    log = since(hub, mark)
    puts = [r for r in log if r["method"] == "PUT"]
    parts = [r for r in puts if r["path"].startswith("/_storage/multipart/")]
    basic = [r for r in puts if r["path"].startswith("/_storage/objects/")]
    check(len(parts) == 5 and all(r["status"] == 200 for r in parts), f"multipart: 5 parts: {len(parts)}")
    check(len(basic) == 2, f"basic PUTs for the 2 small LFS files: {len(basic)}")
    check(sum(r["path"].startswith("/api/complete_multipart") for r in log) == 1, "one multipart completion")
    check(sum(r["path"].endswith("/objects/verify") for r in log) == 3, "verify called for the 3 LFS files")
    st = hub.stats()
    check(all(st["lfs_stored"].get(ent[p]["sha256"]) == 1 for p in lfs), f"each LFS object stored once: {st}")

    # The same folder again: the client sees the remote oids and skips everything.
    mark = len(hub.log())
    head = hub.head(repo)
    ci2 = api.upload_folder(repo_id=repo, folder_path=folder, ignore_patterns=["*.tmp"])
    log = since(hub, mark)
    check(ci2.oid == head and hub.head(repo) == head, "an identical upload_folder makes no commit")
    check(not [r for r in log if r["method"] == "PUT" or "/commit/" in r["path"]],
          f"... and no PUT, no commit request: {[r['path'] for r in log]}")

    # allow_patterns: only logs/, and only what changed there.
    write(f"{folder}/logs/main_log.txt", b"iteration 2\n" * 100)
    write(f"{folder}/weights.dat", b"\0" + os.urandom(8 * KIB))
    api.upload_folder(repo_id=repo, folder_path=folder, allow_patterns=["logs/*"])
    c = hub.commits(repo)[0]
    check(c["added"] == ["logs/main_log.txt"], f"allow_patterns: only the changed log: {c['added']}")
    check(hub.files(repo)["weights.dat"] == want["weights.dat"], "weights.dat outside allow_patterns kept")
    return folder


def test_read(api, hub, tmp):
    repo = "test-user/ckpt"
    mark = len(hub.log())
    tree = list(api.list_repo_tree(repo, recursive=True))
    pages = [r for r in since(hub, mark) if "/tree/" in r["path"]]
    ent = hub.entries(repo)
    dirs = {"big", "logs", "tb"}
    check({t.path for t in tree} == set(ent) | dirs, f"recursive tree: {sorted(t.path for t in tree)}")
    check(len(pages) == -(-(len(ent) + len(dirs)) // 4), f"tree paginated, 4 per page: {len(pages)} pages")
    for t in tree:
        if t.path in ent:
            e = ent[t.path]
            check(t.size == e["size"] and t.blob_id == e["oid"]
                  and (t.lfs.sha256 if t.lfs else None) == (e.get("sha256") if e["lfs"] else None),
                  f"tree entry {t.path}")
    top = {t.path: type(t).__name__ for t in api.list_repo_tree(repo)}
    check(top.get("big") == "RepoFolder" and "big/model.dat" not in top, f"non-recursive listing: {top}")
    sub = [t.path for t in api.list_repo_tree(repo, path_in_repo="logs")]
    check(sub == ["logs/b.txt", "logs/main_log.txt"], f"tree of a folder: {sub}")
    info = api.get_paths_info(repo, ["logs/b.txt", "big/model.dat", "big", "missing.txt"])
    check([i.path for i in info] == ["logs/b.txt", "big/model.dat", "big"]
          and info[1].lfs.sha256 == ent["big/model.dat"]["sha256"], f"paths-info: {info}")

    files = hub.files(repo)
    mark = len(hub.log())
    for p, data in files.items():
        local = hf_hub_download(repo, p, endpoint=hub.url, token=TOKEN, cache_dir=os.path.join(tmp, "cache"))
        with open(local, "rb") as f:
            check(f.read() == data, f"hf_hub_download {p}: identical bytes")
    cdn = [r for r in since(hub, mark) if r["path"].startswith("/_cdn/")]
    if hub.cdn_host:
        check(len(cdn) == 3, f"LFS files downloaded from the redirect target: {len(cdn)}")
    commits = api.list_repo_commits(repo)
    check([c.commit_id for c in commits] == [c["oid"] for c in hub.commits(repo)], "list_repo_commits")
    err = raises(lambda: hf_hub_download(repo, "nope.txt", endpoint=hub.url, token=TOKEN,
                                         cache_dir=os.path.join(tmp, "cache")), RemoteEntryNotFoundError)
    check(isinstance(err, RemoteEntryNotFoundError), f"a missing file: EntryNotFound: {err}")


def test_branch_delete_conflict(api, hub, tmp):
    repo = "test-user/ckpt"
    main = hub.head(repo)
    api.create_branch(repo, branch="dev")
    err = raises(lambda: api.create_branch(repo, branch="dev"), HfHubHTTPError)
    check(isinstance(err, HfHubHTTPError) and err.response.status_code == 409, f"branch exists: 409: {err}")
    api.create_branch(repo, branch="dev", exist_ok=True)
    api.upload_file(path_or_fileobj=b"dev only\n", path_in_repo="dev.txt", repo_id=repo, revision="dev")
    check(hub.head(repo) == main and "dev.txt" in hub.files(repo, "dev") and "dev.txt" not in hub.files(repo),
          "upload to a branch leaves main alone")
    refs = api.list_repo_refs(repo)
    check({b.name: b.target_commit for b in refs.branches} == {"main": main, "dev": hub.head(repo, "dev")},
          f"refs: {refs}")
    local = hf_hub_download(repo, "dev.txt", revision="dev", endpoint=hub.url, token=TOKEN,
                            cache_dir=os.path.join(tmp, "cache"))
    check(open(local, "rb").read() == b"dev only\n", "download from the branch")

    api.delete_file("logs/b.txt", repo_id=repo)
    check("logs/b.txt" not in hub.files(repo) and hub.commits(repo)[0]["deleted"] == ["logs/b.txt"], "delete_file")
    err = raises(lambda: api.delete_file("logs/b.txt", repo_id=repo), RemoteEntryNotFoundError)
    check(isinstance(err, RemoteEntryNotFoundError), f"deleting a missing file: EntryNotFound: {err}")
    api.delete_folder("tb", repo_id=repo)
    check(not [p for p in hub.files(repo) if p.startswith("tb/")] and hub.commits(repo)[0]["deleted_folders"] == 1,
          "delete_folder")

    parent = api.model_info(repo).sha
    api.upload_file(path_or_fileobj=b"moved\n", path_in_repo="moved.txt", repo_id=repo)
    ops = [CommitOperationAdd(path_in_repo="late.txt", path_or_fileobj=b"late\n")]
    n = len(hub.commits(repo))
    err = raises(lambda: api.create_commit(repo, ops, commit_message="late", parent_commit=parent), HfHubHTTPError)
    check(isinstance(err, HfHubHTTPError) and err.response.status_code == 412
          and "A commit has happened since" in str(err), f"stale parentCommit: 412: {err}")
    check(len(hub.commits(repo)) == n, "no commit on conflict")
    ops = [CommitOperationAdd(path_in_repo="late.txt", path_or_fileobj=b"late\n")]
    ci = api.create_commit(repo, ops, commit_message="late", parent_commit=hub.head(repo)[:7])
    check(ci.oid == hub.head(repo), "the current head (7-char prefix) as parentCommit: committed")


def test_faults(api, hub, tmp):
    repo = "test-user/faults"
    api.create_repo(repo)

    # 503 on preupload, then success: the client retries after 1 s.
    hub.add_fault(method="POST", path=r"/preupload/", status=503)
    mark = len(hub.log())
    api.upload_file(path_or_fileobj=b"after a 503\n", path_in_repo="a.txt", repo_id=repo)
    pre = [r["status"] for r in since(hub, mark) if "/preupload/" in r["path"]]
    check(pre == [503, 200], f"preupload 503 then 200: {pre}")
    check(hub.files(repo).get("a.txt") == b"after a 503\n" and len(hub.commits(repo)) == 2, "one commit after 503")

    # 429 with Retry-After: 1 on the LFS batch: the client waits Retry-After + 1 s.
    data = b"\0" + os.urandom(10 * KIB)
    oid = hashlib.sha256(data).hexdigest()
    hub.add_fault(method="POST", path=r"\.git/info/lfs/objects/batch$", status=429, retry_after=1)
    mark = len(hub.log())
    t0 = time.time()
    api.upload_file(path_or_fileobj=data, path_in_repo="w.dat", repo_id=repo)
    took = time.time() - t0
    batch = [r for r in since(hub, mark) if r["path"].endswith("/objects/batch")]
    check([r["status"] for r in batch] == [429, 200] and took >= 1.9, f"batch 429 then 200 after ~2 s: {took:.1f}s")
    st = hub.stats()
    check(st["lfs_stored"].get(oid) == 1 and st["lfs_puts"].get(oid) == 1, f"stored once: {st['lfs_puts'].get(oid)}")

    # RateLimit headers (r=0; t=1) instead of Retry-After.
    hub.add_fault(method="POST", path=r"/preupload/", status=429, ratelimit=(0, 1))
    t0 = time.time()
    api.upload_file(path_or_fileobj=b"rate limited\n", path_in_repo="r.txt", repo_id=repo)
    check(time.time() - t0 >= 1.9 and hub.files(repo).get("r.txt") == b"rate limited\n",
          "429 with RateLimit r=0;t=1: waited and uploaded")

    # A connection dropped 10000 bytes into part 2: the client re-sends that part only.
    big = os.urandom(300 * KIB)
    oid = hashlib.sha256(big).hexdigest()
    hub.add_fault(method="PUT", path=r"^/_storage/multipart/[0-9a-f]+/2\?", drop_after_read=10000)
    mark = len(hub.log())
    api.upload_file(path_or_fileobj=big, path_in_repo="ckpt/model.dat", repo_id=repo)
    part2 = [r["status"] for r in since(hub, mark) if r["method"] == "PUT" and "/2?" in r["path"]]
    st = hub.stats()
    check(part2 == [None, 200], f"part 2 dropped, then re-sent: {part2}")
    check(st["lfs_stored"].get(oid) == 1 and st["lfs_puts"].get(oid) == 6
          and st["lfs_bytes_received"].get(oid) == len(big) + 10000,
          f"5 parts + 1 retry, stored once: {st['lfs_puts'].get(oid)} puts, {st['lfs_bytes_received'].get(oid)} B")
    check(hub.files(repo)["ckpt/model.dat"] == big, "the multipart file is intact")

    # A commit applied whose response is lost: the client fails (commits are not retried); the server has
    # the commit once; re-running the upload is a no-op, not a duplicate.
    n = len(hub.commits(repo))
    hub.add_fault(method="POST", path=r"/commit/main$", lose_response=True)
    err = raises(lambda: api.upload_file(path_or_fileobj=b"lost\n", path_in_repo="lost.txt", repo_id=repo), Exception)
    check(err is not None and not isinstance(err, str), f"the client sees the lost response: {err!r}")
    check(len(hub.commits(repo)) == n + 1 and hub.files(repo).get("lost.txt") == b"lost\n", "... yet it was applied")
    api.upload_file(path_or_fileobj=b"lost\n", path_in_repo="lost.txt", repo_id=repo)
    check(len(hub.commits(repo)) == n + 1, "re-running it is a no-op (no duplicate commit)")
    check(all(r["times"] == 0 for r in hub.faults()), f"every fault fired: {hub.faults()}")

    # Delay: the response comes late but fine.
    hub.add_fault(method="GET", path=r"/api/models/test-user/faults$", delay=0.3)
    t0 = time.time()
    api.model_info(repo)
    check(time.time() - t0 >= 0.3, "delay")


def test_data_plane(hub):
    # The presigned URLs need their signature; the API needs the token.
    req = urllib.request.Request(f"{hub.url}/_storage/objects/{'0' * 64}?size=1&expires=9999999999&signature=x",
                                 data=b"x", method="PUT")
    try:
        urllib.request.urlopen(req)
        check(False, "an unsigned PUT is refused")
    except urllib.error.HTTPError as err:
        check(err.code == 403 and b"SignatureDoesNotMatch" in err.read(), f"unsigned PUT: 403: {err.code}")
    body = json.dumps({"operation": "upload", "objects": [{"oid": "0" * 64, "size": 1}]}).encode()
    req = urllib.request.Request(f"{hub.url}/test-user/ckpt.git/info/lfs/objects/batch", data=body, method="POST")
    try:
        urllib.request.urlopen(req)
        check(False, "an LFS batch without token is refused")
    except urllib.error.HTTPError as err:
        check(err.code == 401, f"LFS batch without token: 401: {err.code}")


def test_restart(tmp, before):
    with HubServer(os.path.join(tmp, "root"), **CONFIG) as hub:
        after = {r: (hub.head(r), hub.files(r)) for r in before}
        check(after == before, "a restarted server has the same repositories, heads and files")
        api = HfApi(endpoint=hub.url, token=TOKEN)
        check(api.model_info("test-user/ckpt").sha == before["test-user/ckpt"][0], "... and serves them")


def test_cli(tmp):
    script = os.path.join(HERE, "hub_server.py")
    r = subprocess.run([sys.executable, script, "--root", os.path.join(tmp, "cli"), "--host", "0.0.0.0"],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and "loopback only" in r.stderr, f"--host 0.0.0.0 refused: {r.returncode} {r.stderr}")
    p = subprocess.Popen([sys.executable, script, "--port", "0", "--root", os.path.join(tmp, "cli"),
                          "--token", "hf_cli"], stdout=subprocess.PIPE, text=True)
    try:
        url = p.stdout.readline().strip()
        check(url.startswith("http://127.0.0.1:"), f"prints its URL: {url}")
        req = urllib.request.Request(f"{url}/_admin/faults", method="POST",
                                     data=json.dumps({"method": "GET", "path": "whoami", "status": 500}).encode())
        check(json.load(urllib.request.urlopen(req))["ids"] == [1], "admin: add a fault")
        who = urllib.request.Request(f"{url}/api/whoami-v2", headers={"Authorization": "Bearer hf_cli"})
        try:
            urllib.request.urlopen(who)
            check(False, "the injected 500")
        except urllib.error.HTTPError as err:
            check(err.code == 500, f"the injected 500: {err.code}")
        check(json.load(urllib.request.urlopen(who))["name"] == "test-user", "whoami after the fault")
        log = json.load(urllib.request.urlopen(f"{url}/_admin/log"))
        check([x["status"] for x in log] == [500, 200] and log[0]["fault"] == "status", f"admin log: {log}")
        stats = json.load(urllib.request.urlopen(f"{url}/_admin/stats"))
        check(stats["faults_fired"] == 1 and stats["requests"] == 2, f"admin stats: {stats}")
    finally:
        p.terminate()
        p.wait(timeout=10)


def main():
    t0 = time.time()
    try:
        loopback_name = socket.gethostbyname("localhost") == "127.0.0.1"
    except OSError:
        loopback_name = False
    with tempfile.TemporaryDirectory() as tmp:
        test_facts()
        with HubServer(os.path.join(tmp, "root"), cdn_host="localhost" if loopback_name else None, **CONFIG) as hub:
            api = HfApi(endpoint=hub.url, token=TOKEN)
            steps = [lambda: test_repos(api, hub), lambda: test_folder(api, hub, tmp),
                     lambda: test_read(api, hub, tmp), lambda: test_branch_delete_conflict(api, hub, tmp),
                     lambda: test_faults(api, hub, tmp), lambda: test_data_plane(hub)]
            for step in steps:
                try:
                    step()
                except Exception as err:  # noqa: BLE001 - one broken step must not hide the others
                    import traceback
                    traceback.print_exc()
                    check(False, f"unexpected {type(err).__name__}: {err}")
                hub.clear_faults()  # a step that stopped early leaves none behind for the next
            before = {r: (hub.head(r), hub.files(r)) for r in ("test-user/ckpt", "test-user/faults")}
            n_requests = hub.stats()["requests"]
        test_restart(tmp, before)
        test_cli(tmp)
    print(f"hub server tests: huggingface_hub {huggingface_hub.__version__}, {n_requests} requests, "
          f"{time.time() - t0:.1f} s", file=sys.stderr)
    finish()


if __name__ == "__main__":
    main()
