#!/usr/bin/env python3
"""mds-hub-sync against hub_server.py (a local Hub checked against huggingface_hub by test_hub_server.py):
  - no token, a missing repository without --create-repo, plain http to a remote host: clear errors;
  - the first run (--create-repo) uploads tensorboard/, codecarbon/, logs/ and a checkpoint (LFS basic and
    multipart) so that the Hub holds exactly the local bytes (huggingface_hub downloads them identically);
  - a re-run uploads nothing and makes no commit; a grown log is the only file sent;
  - a file deleted locally stays on the Hub (reported as kept); --delete --dry-run lists it and changes
    nothing; --delete removes it;
  - 150 new files go in commits of at most 100 files;
  - faults (500s on preupload, 429 with Retry-After on the LFS batch, a dropped part, a slow answer, a lost
    commit answer): the run succeeds and every file is on the Hub once, with no duplicate commit;
  - files appended to during the run (a live log and events file) are sent as the snapshot that was hashed,
    a prefix of the grown file; the next run completes them;
  - killed with -9 mid-upload, then run again: finished, each object stored once, one commit; a second
    run while one holds the lock is refused;
  - the token is never printed, not even with --verbose; --include/--exclude/--path-in-repo.
Exits 77 without the binary or huggingface_hub."""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hub_server import HubServer  # noqa: E402
from testkit import binary, check, finish, huggingface_hub_for_local_hub  # noqa: E402

TOOL = binary("mds-hub-sync")
hf_hub_download = huggingface_hub_for_local_hub().hf_hub_download

TOKEN = "hf_sync_token_never_printed"
KB = 1024


def run(hub, local, repo, *args, token=TOKEN, expect_rc=0, home=None):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_HOME", "HF_TOKEN_PATH", "HF_ENDPOINT")}
    if token:
        env["HF_TOKEN"] = token
    if home:
        env["HOME"] = home
    argv = [TOOL, local, repo, "--json", "--progress", "off", *args]
    if hub and "--endpoint" not in args:
        argv += ["--endpoint", hub.url]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    check(TOKEN not in r.stdout + r.stderr, f"the token is printed: {r.stderr}")
    check(r.returncode == expect_rc, f"{args}: exit {r.returncode}, expected {expect_rc}: {r.stderr}")
    out = None
    if r.stdout.strip():
        try:
            out = json.loads(r.stdout)
        except ValueError:
            check(False, f"--json output is not JSON: {r.stdout}")
    return out, r.stderr


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def local_files(d, prefix=""):
    out = {}
    for root, dirs, names in os.walk(d):
        dirs[:] = [x for x in dirs if x != ".cache"]
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[prefix + os.path.relpath(p, d)] = f.read()
    return out


def remote_files(hub, repo):
    files = hub.files(repo)
    files.pop(".gitattributes", None)
    return files


def main():
    with tempfile.TemporaryDirectory() as tmp, HubServer(os.path.join(tmp, "hub"), token=TOKEN, lfs_threshold=256 * KB,
                                                         binary_threshold=16 * KB, multipart_threshold=200 * KB,
                                                         chunk_size=64 * KB, tree_page_size=50) as hub:
        run_dir = os.path.join(tmp, "tr11-176B-ml")
        write(os.path.join(run_dir, "logs", "main_log.txt"), b" iteration      10/  292968 | lm loss: 9.1 |\n" * 50)
        write(os.path.join(run_dir, "codecarbon", "emissions.csv"), b"timestamp,project_name,duration\n2026,tr11,3600\n")
        write(os.path.join(run_dir, "tensorboard", "events.out.tfevents.1700000000.jz1"), os.urandom(5 * KB))
        write(os.path.join(run_dir, "checkpoints", "global_step300", "layer_01-model_00-model_states.pt"), os.urandom(333 * KB))
        write(os.path.join(run_dir, "checkpoints", "global_step300", "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"),
              os.urandom(40 * KB))
        repo = "test-user/tr11-176B-ml-logs"

        _, err = run(hub, run_dir, repo, token=None, expect_rc=2, home=tmp)
        check("no Hugging Face token" in err, f"no token: {err}")
        _, err = run(hub, run_dir, repo, expect_rc=1)
        check("not found" in err and "--create-repo" in err, f"missing repository: {err}")
        _, err = run(None, run_dir, repo, "--endpoint", "http://example.org", expect_rc=2)
        check("plain http" in err, f"http to a remote host: {err}")
        _, err = run(hub, run_dir, repo, "--private", expect_rc=2)
        check("--create-repo" in err, f"--private alone: {err}")

        out, err = run(hub, run_dir, repo, "--create-repo", "-v")
        check(out and len(out["uploaded"]) == 5 and out["unchanged"] == 0 and not out["failed"] and len(out["commits"]) == 1,
              f"first run: 5 files in one commit: {out} {err}")
        check(remote_files(hub, repo) == local_files(run_dir), "the Hub holds exactly the local files")
        dl = os.path.join(tmp, "dl")
        for p, data in local_files(run_dir).items():
            with open(hf_hub_download(repo, p, endpoint=hub.url, token=TOKEN, local_dir=dl), "rb") as f:
                check(f.read() == data, f"{p}: huggingface_hub downloads the same bytes")
        n_commits = len(hub.commits(repo))

        out, _ = run(hub, run_dir, repo)
        check(out and out["uploaded"] == [] and out["commits"] == [] and out["unchanged"] == 5, f"re-run: nothing to send: {out}")
        check(len(hub.commits(repo)) == n_commits, "re-run: no commit")
        with open(os.path.join(run_dir, "logs", "main_log.txt"), "ab") as f:
            f.write(b" iteration      20/  292968 | lm loss: 8.8 |\n")
        out, _ = run(hub, run_dir, repo)
        check(out and out["uploaded"] == ["logs/main_log.txt"], f"a grown log is the only file sent: {out}")

        # Deleted locally is not deleted remotely.
        gone = "checkpoints/global_step300/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"
        os.remove(os.path.join(run_dir, gone))
        out, err = run(hub, run_dir, repo)
        check(out and out["remote_only"] == [gone] and out["deleted"] == [] and gone in remote_files(hub, repo),
              f"a file deleted locally stays on the Hub: {out}")
        check("were kept" in err, f"the summary says it was kept: {err}")
        out, _ = run(hub, run_dir, repo, "--delete", "--dry-run")
        check(out and out["deleted"] == [gone] and gone in remote_files(hub, repo), f"--delete --dry-run changes nothing: {out}")
        out, _ = run(hub, run_dir, repo, "--delete")
        check(out and out["deleted"] == [gone] and gone not in remote_files(hub, repo), f"--delete removes it: {out}")

        # Many files: commits of at most 100.
        for i in range(150):
            write(os.path.join(run_dir, "tensorboard", "many", f"f{i:03d}.txt"), f"{i}\n".encode())
        before = len(hub.commits(repo))
        out, _ = run(hub, run_dir, repo)
        new = hub.commits(repo)[: len(hub.commits(repo)) - before]
        sizes = sorted(c["regular_files"] + c["lfs_files"] for c in new)
        check(out and len(out["uploaded"]) == 150 and sizes == [50, 100], f"150 files in commits of 100 and 50: {sizes}")

        # --include / --exclude / --path-in-repo.
        out, _ = run(hub, run_dir, repo, "--include", "codecarbon/*", "--include", "logs/", "--exclude", "*.txt",
                     "--path-in-repo", "mirror")
        files = remote_files(hub, repo)
        check(out and out["uploaded"] == ["mirror/codecarbon/emissions.csv"] and "mirror/codecarbon/emissions.csv" in files,
              f"globs and --path-in-repo: {out}")

        # Faults: every file ends up on the Hub once, no duplicate commit.
        fault_dir = os.path.join(tmp, "faulty")
        write(os.path.join(fault_dir, "a.txt"), b"a" * 100)
        write(os.path.join(fault_dir, "big.pt"), os.urandom(500 * KB))
        write(os.path.join(fault_dir, "small.pt"), os.urandom(30 * KB))
        frepo = "test-user/faulty"
        hub.add_fault(method="POST", path="/preupload/", status=500, times=2)
        hub.add_fault(method="POST", path=r"\.git/info/lfs/objects/batch", status=429, retry_after=1)
        hub.add_fault(method="PUT", path="^/_storage/multipart/", skip=3, drop_after_read=10_000)
        hub.add_fault(method="GET", path="/tree/", delay=1)
        hub.add_fault(method="POST", path="/commit/", lose_response=True)
        out, err = run(hub, fault_dir, frepo, "--create-repo")
        check(out and sorted(out["uploaded"]) == ["a.txt", "big.pt", "small.pt"] and not out["failed"],
              f"through the faults: {out} {err}")
        check("retry" in err, f"retries are reported: {err}")
        check(remote_files(hub, frepo) == local_files(fault_dir), "faults: the Hub holds the local files")
        commits = hub.commits(frepo)
        check(len(commits) == 2, f"faults: one commit (+ the initial one), not two: {len(commits)}")
        st = hub.stats()
        for name in ("big.pt", "small.pt"):
            with open(os.path.join(fault_dir, name), "rb") as f:
                oid = hashlib.sha256(f.read()).hexdigest()
            check(st["lfs_stored"].get(oid) == 1, f"{name} stored once")
        fired = {f["path"]: f["fired"] for f in hub.faults()}
        check(fired == {"/preupload/": 2, r"\.git/info/lfs/objects/batch": 1, "^/_storage/multipart/": 1, "/tree/": 1,
                        "/commit/": 1}, f"every fault fired: {fired}")
        # Files appended to while the run reads them (a live main_log.txt and TensorBoard events): each is
        # sent as the snapshot taken when it was hashed, a prefix of what it becomes; the next run sends the rest.
        live = os.path.join(tmp, "live")
        write(os.path.join(live, "logs", "main_log.txt"), b" iteration       1/  292968 |\n" * 2000)
        write(os.path.join(live, "tensorboard", "events.out.tfevents.1"), os.urandom(300 * KB))
        stop = threading.Event()

        def append():
            i = 0
            while not stop.is_set():
                with open(os.path.join(live, "logs", "main_log.txt"), "ab") as f:
                    f.write(f" iteration {i:7d}/  292968 |\n".encode())
                with open(os.path.join(live, "tensorboard", "events.out.tfevents.1"), "ab") as f:
                    f.write(os.urandom(512))
                i += 1
                time.sleep(0.002)

        t = threading.Thread(target=append)
        hub.add_fault(method="PUT", path="^/_storage/", delay=0.3, times=100)  # let the files grow meanwhile
        t.start()
        try:
            out, err = run(hub, live, "test-user/live", "--create-repo")
        finally:
            stop.set()
            t.join()
        hub.clear_faults()
        check(out and sorted(out["uploaded"]) == ["logs/main_log.txt", "tensorboard/events.out.tfevents.1"] and
              not out["failed"], f"growing files are uploaded: {out} {err}")
        final = local_files(live)
        got = remote_files(hub, "test-user/live")
        for p in final:
            check(p in got and len(got[p]) < len(final[p]) and final[p].startswith(got[p]),
                  f"{p}: the Hub has a prefix of the grown file ({len(got.get(p, b''))} of {len(final[p])} bytes)")
        out, _ = run(hub, live, "test-user/live")
        check(remote_files(hub, "test-user/live") == local_files(live), "the next run sends the grown files whole")

        # Killed mid-upload (-9), then run again: finished, every object stored once, one commit.
        kill_dir = os.path.join(tmp, "killed")
        write(os.path.join(kill_dir, "ckpt.pt"), os.urandom(1024 * KB))
        write(os.path.join(kill_dir, "note.txt"), b"resumable\n")
        krepo = "test-user/killed"
        hub.add_fault(method="PUT", path="^/_storage/multipart/", delay=0.4, times=1000)
        env = dict(os.environ, HF_TOKEN=TOKEN)
        argv = [TOOL, kill_dir, krepo, "--endpoint", hub.url, "--create-repo", "--progress", "off"]
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with open(os.path.join(kill_dir, "ckpt.pt"), "rb") as f:
            oid = hashlib.sha256(f.read()).hexdigest()
        deadline = time.time() + 60
        while time.time() < deadline and hub.stats()["lfs_puts"].get(oid, 0) < 3:
            time.sleep(0.1)
        # A second run while the first holds the lock is refused.
        _, err = run(hub, kill_dir, krepo, expect_rc=1)
        check("another mds-hub-sync is running" in err, f"overlapping runs are refused: {err}")
        p.kill()
        p.wait()
        check(p.returncode == -9, f"the first run was killed mid-upload: {p.returncode}")
        check(not remote_files(hub, krepo), "nothing committed before the kill")
        hub.clear_faults()
        out, err = run(hub, kill_dir, krepo)
        check(out and sorted(out["uploaded"]) == ["ckpt.pt", "note.txt"] and not out["failed"], f"the re-run finishes: {out} {err}")
        check(remote_files(hub, krepo) == local_files(kill_dir), "after the kill: the Hub holds the local files")
        check(hub.stats()["lfs_stored"].get(oid) == 1 and len(hub.commits(krepo)) == 2, "stored once, one commit")
    finish()


if __name__ == "__main__":
    main()
