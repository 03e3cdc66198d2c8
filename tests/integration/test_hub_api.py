#!/usr/bin/env python3
"""mds::hub::HubApi (the Hub calls of mds-hub-sync) against hub_server.py, through hub_api_probe, with the
result read back by huggingface_hub (an independent client):
  - create_repo (created, then exists), head, model and dataset repositories;
  - one commit of a folder: small text files inline, an empty file, a binary above the binary
    threshold (LFS, basic PUT), a tfevents file (LFS through .gitattributes), a checkpoint above the
    multipart threshold (LFS, several parts + completion, with verify); the Hub then holds exactly the
    local bytes, which huggingface_hub downloads identically; our tree listing (paginated) equals
    huggingface_hub's list_repo_tree;
  - the same folder again: every file recognised as present (remote oid = local sha256 / git sha1),
    no commit; an appended log: only it is sent;
  - a 503 on preupload and a dropped part are retried; a stale parentCommit is refused (412); a
    commit whose answer is lost is reported as uncertain (exit 3), applied once by the Hub.
Exits 77 without the probe or without huggingface_hub."""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hub_server import HubServer  # noqa: E402
from testkit import binary, check, finish, huggingface_hub_for_local_hub  # noqa: E402

PROBE = binary("hub_api_probe")
_hf = huggingface_hub_for_local_hub()
HfApi, hf_hub_download = _hf.HfApi, _hf.hf_hub_download

TOKEN = "hf_api_test_token"
KB = 1024


def probe(hub, repo, *args, rtype="model", revision="main", expect_rc=0):
    r = subprocess.run([PROBE, hub.url, repo, rtype, revision, *args], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, HF_TOKEN=TOKEN))
    check(TOKEN not in r.stdout + r.stderr, "the token is in the probe's output")
    check(r.returncode == expect_rc, f"probe {args[0]}: exit {r.returncode}, expected {expect_rc}: {r.stderr}")
    return (json.loads(r.stdout) if r.returncode == 0 else None), r.stderr


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def local_files(d):
    out = {}
    for root, _, names in os.walk(d):
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d)] = f.read()
    return out


def main():
    with tempfile.TemporaryDirectory() as tmp, HubServer(os.path.join(tmp, "hub"), token=TOKEN, lfs_threshold=256 * KB,
                                                         binary_threshold=16 * KB, multipart_threshold=200 * KB,
                                                         chunk_size=64 * KB, tree_page_size=3, verify=True) as hub:
        repo = "test-user/tr11-176B-ml-logs"
        out, _ = probe(hub, repo, "head")
        check(out["head"] is None, f"no repository yet: no head: {out}")
        out, _ = probe(hub, repo, "create")
        check(out["created"] is True, f"created: {out}")
        out, _ = probe(hub, repo, "create")
        check(out["created"] is False, f"exists: not an error: {out}")
        head0 = probe(hub, repo, "head")[0]["head"]
        check(isinstance(head0, str) and len(head0) == 40, f"a head commit: {head0}")

        src = os.path.join(tmp, "run")
        write(os.path.join(src, "logs", "main_log.txt"), b" iteration      10/  292968 | lm loss: 9.1 |\n" * 40)
        write(os.path.join(src, "codecarbon", "emissions.csv"), b"timestamp,project_name,duration\n")
        write(os.path.join(src, "empty.txt"), b"")
        write(os.path.join(src, "tensorboard", "events.out.tfevents.1700000000.jz"), os.urandom(3 * KB))
        write(os.path.join(src, "bin", "rng.dat"), b"\0" + os.urandom(40 * KB))
        write(os.path.join(src, "checkpoints", "global_step300", "mp_rank_00_model_states.pt"), os.urandom(300 * KB + 17))
        hub.add_fault(method="POST", path="/preupload/", status=503)
        hub.add_fault(method="PUT", path="^/_storage/multipart/", skip=2, drop_after_read=5000)
        out, err = probe(hub, repo, "upload", src)
        check(out and out["lfs"] == 3 and out["regular"] == 3 and out["skipped"] == 0, f"3 LFS + 3 regular: {out} {err}")
        check(out and sorted(out["transfers"]) == ["basic", "basic", "multipart"], f"two basic PUTs and one multipart: {out}")
        files = hub.files(repo)
        files.pop(".gitattributes", None)
        check(files == local_files(src), f"the Hub holds exactly the local files: {sorted(files)}")
        commits = hub.commits(repo)
        check(len(commits) == 2, f"one commit over the initial one: {len(commits)}")
        st = hub.stats()
        ckpt = local_files(src)["checkpoints/global_step300/mp_rank_00_model_states.pt"]
        oid = hashlib.sha256(ckpt).hexdigest()
        check(st["lfs_stored"].get(oid) == 1 and st["lfs_puts"].get(oid) == 6,
              f"5 parts + 1 retried part, stored once: {st['lfs_puts'].get(oid)}")

        # huggingface_hub reads back what mds wrote.
        api = HfApi(endpoint=hub.url, token=TOKEN)
        theirs = {e.path: e for e in api.list_repo_tree(repo, recursive=True) if hasattr(e, "size")}
        ours = {e["path"]: e for e in probe(hub, repo, "tree")[0] if not e["dir"]}
        check(sorted(theirs) == sorted(ours), f"the same tree: {sorted(theirs)} vs {sorted(ours)}")
        for p, e in ours.items():
            t = theirs.get(p)
            if not t:
                continue
            check(e["size"] == t.size and e["oid"] == t.blob_id, f"{p}: size and oid agree")
            check(e["lfs"] == (t.lfs.sha256 if t.lfs else None), f"{p}: LFS sha256 agrees")
        dl = os.path.join(tmp, "dl")
        for p, data in local_files(src).items():
            got = hf_hub_download(repo, p, endpoint=hub.url, token=TOKEN, local_dir=dl)
            with open(got, "rb") as f:
                check(f.read() == data, f"{p}: huggingface_hub downloads the same bytes")

        # Again: nothing to send. Then an appended log: only it.
        out, _ = probe(hub, repo, "upload", src)
        check(out["skipped"] == 6 and "commit" not in out, f"a second run sends nothing: {out}")
        check(len(hub.commits(repo)) == 2, "no new commit")
        with open(os.path.join(src, "logs", "main_log.txt"), "ab") as f:
            f.write(b" iteration      20/  292968 | lm loss: 8.7 |\n")
        out, _ = probe(hub, repo, "upload", src)
        check(out["regular"] == 1 and out["skipped"] == 5 and out["lfs"] == 0, f"only the log: {out}")

        # A stale parent is refused; a lost commit answer is 'uncertain', and applied once.
        with open(os.path.join(src, "logs", "main_log.txt"), "ab") as f:
            f.write(b" iteration      30/  292968 | lm loss: 8.2 |\n")
        _, err = probe(hub, repo, "upload", src, head0, expect_rc=1)
        check("412" in err, f"stale parentCommit: 412: {err}")
        n = len(hub.commits(repo))
        hub.add_fault(method="POST", path="/commit/", lose_response=True)
        _, err = probe(hub, repo, "upload", src, expect_rc=3)
        check("may have applied it" in err, f"a lost commit answer is uncertain: {err}")
        check(len(hub.commits(repo)) == n + 1, "the Hub applied it once")
        out, _ = probe(hub, repo, "upload", src)
        check(out["skipped"] == 6 and "commit" not in out, f"after checking, nothing is left to send: {out}")

        # A dataset repository.
        probe(hub, "test-user/oscar-shards", "create", rtype="dataset")
        out, _ = probe(hub, "test-user/oscar-shards", "upload", os.path.join(src, "logs"), rtype="dataset")
        check(out["regular"] == 1 and hub.files("test-user/oscar-shards", repo_type="dataset").get("main_log.txt"),
              f"dataset repositories: {out}")
    finish()


if __name__ == "__main__":
    main()
