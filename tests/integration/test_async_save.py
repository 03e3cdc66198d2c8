#!/usr/bin/env python3
"""mds-train's asynchronous checkpoint saves (--async-save, the default; docs/mds-train.md#asynchronous-saves), on a
model whose checkpoint (~110 MB, fp32 with Adam states) takes a noticeable time to write:
  - bit-exact: a run to N with a save at k and a resume from k to N give the same final losses and checkpoint
    tensors with async and with --no-async-save, and the async tag k / tag N files equal the synchronous ones byte
    for byte (no field differs); the log has the "saving" line, the "successfully saved ... training blocked" line
    and the "save-checkpoint | save-checkpoint-blocked" timers line; --no-async-save keeps the old lines;
  - kill -9 at random moments after a "saving checkpoint" line (some land during the background write: the
    temporary folder exists or `latest` is still the previous tag): `latest` names a complete tag whose files
    load with torch.load, the previous tag is intact, and a resume from it trains and saves;
  - SIGTERM during a background write: the write completes, `latest` names the last tag started, exit status 0.
Exits 77 without mds-train (no LibTorch) or without torch in the venv."""
import glob
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "crosscheck"))
import testkit  # noqa: E402
from testkit import check  # noqa: E402
import bmd_checkpoint  # noqa: E402,F401  (stand-in megatron.enums, so torch.load resolves the args Namespace)
import tiny_dataset  # noqa: E402

TRAIN = testkit.binary("mds-train")
BIN = os.path.dirname(TRAIN)
try:
    import torch
except Exception as e:  # noqa: BLE001
    testkit.skip(f"torch not importable: {e}")

LOSS = re.compile(r"^ iteration +(\d+)/.*?lm loss: ([0-9.E+-]+)", re.M)
SAVING = re.compile(r"saving checkpoint at iteration (\d+) to ")
SAVED_ASYNC = re.compile(r"successfully saved checkpoint at iteration (\d+) to \S+ \(([0-9.]+) MB in ([0-9.]+) s, "
                         r"training blocked ([0-9.]+) s\)")
SAVED_SYNC = re.compile(r"successfully saved checkpoint at iteration (\d+) to \S+ \(([0-9.]+) MB in ([0-9.]+) s\)$", re.M)
TIMERS_ASYNC = re.compile(r"time \(ms\) \| save-checkpoint: ([0-9.]+) \| save-checkpoint-blocked: ([0-9.]+)")
TIMERS_SYNC = re.compile(r"time \(ms\) \| save-checkpoint: ([0-9.]+)$", re.M)
FILES = 8  # 4 layers: layer_01, layer_03..06, layer_08, mp_rank_00, zero_pp_rank_0


def model_flags(data, iters, extra=()):
    return [*data, "--num-layers", "4", "--hidden-size", "384", "--num-attention-heads", "8", "--seq-length", "32",
            "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "4",
            "--train-iters", str(iters), "--lr", "1e-3", "--lr-warmup-iters", "2", "--log-interval", "1",
            "--eval-interval", "100000", "--eval-iters", "1", "--seed", "11", "--threads", "2", "--device", "cpu",
            "--hidden-dropout", "0.1", *extra]


def run(args):
    return subprocess.run([TRAIN, *args], capture_output=True, text=True, timeout=300)


def losses(out):
    return {int(i): l for i, l in LOSS.findall(out)}


def tag_files(tag_dir):
    return sorted(os.listdir(tag_dir)) if os.path.isdir(tag_dir) else []


def same_bytes(a, b, what):
    fa, fb = tag_files(a), tag_files(b)
    if not check(fa == fb and len(fa) == FILES, f"{what}: files differ: {fa} vs {fb}"):
        return False
    for f in fa:
        with open(os.path.join(a, f), "rb") as x, open(os.path.join(b, f), "rb") as y:
            if not check(x.read() == y.read(), f"{what}: {f} differs byte for byte"):
                return False
    return True


def same_tensors(a, b, what):
    """Every tensor of every file of tag folder a equals b's bitwise (their args may differ: --load, --save)."""
    def tensors(v, at, out):
        if isinstance(v, torch.Tensor):
            out[at] = v
        elif isinstance(v, dict):
            for k, x in v.items():
                tensors(x, f"{at}.{k}", out)
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                tensors(x, f"{at}[{i}]", out)
        return out
    for f in tag_files(a):
        ta = tensors(torch.load(os.path.join(a, f), map_location="cpu", weights_only=False), "", {})
        tb = tensors(torch.load(os.path.join(b, f), map_location="cpu", weights_only=False), "", {})
        check(ta.keys() == tb.keys(), f"{what}: {f}: tensor keys differ")
        bad = [k for k in ta if k in tb and not torch.equal(ta[k], tb[k])]
        check(not bad, f"{what}: {f}: tensors differ: {bad[:5]}")


def bit_exact(tmp, data):
    n, k = 4, 2
    out = {}
    for mode, flag in (("async", []), ("sync", ["--no-async-save"])):
        # The same --save path for both modes (args.save is in the mp_rank file), moved aside afterwards.
        straight, where = os.path.join(tmp, f"{mode}-straight"), os.path.join(tmp, "straight")
        r = run(model_flags(data, n, ["--save", where, "--save-interval", str(k), *flag]))
        os.rename(where, straight)
        if not check(r.returncode == 0, f"{mode} straight run failed: {r.stderr[-800:]}"):
            return
        log = r.stdout + r.stderr
        if mode == "async":
            saved = SAVED_ASYNC.findall(log)
            timers = TIMERS_ASYNC.findall(log)
            check([s[0] for s in saved] == [str(k), str(n)], f"async: saved lines {saved}")
            check(len(timers) == 2, f"async: timers lines {timers}")
            check(not SAVED_SYNC.search(log), "async: a synchronous 'successfully saved' line")
            for (_, mb, total, blocked), (t_ms, b_ms) in zip(saved, timers):
                check(float(blocked) <= float(total) and float(b_ms) <= float(t_ms) and float(mb) > 50,
                      f"async: blocked {blocked} s of {total} s, timers {t_ms} / {b_ms} ms, {mb} MB")
            out["async_saved"] = saved
        else:
            check([s[0] for s in SAVED_SYNC.findall(log)] == [str(k), str(n)], f"sync: saved lines: {log[-600:]}")
            check(len(TIMERS_SYNC.findall(log)) == 2 and not TIMERS_ASYNC.search(log), "sync: timers lines")
            check("training blocked" not in log, "sync: an async 'training blocked' line")
            out["sync_timers"] = TIMERS_SYNC.findall(log)
        # Resume from tag k of a copy (its `latest` set back to k) to N.
        copy = os.path.join(tmp, f"{mode}-from-k")
        shutil.copytree(os.path.join(straight, f"global_step{k}"), os.path.join(copy, f"global_step{k}"))
        with open(os.path.join(copy, "latest"), "w") as f:
            f.write(f"global_step{k}")
        resumed = os.path.join(tmp, f"{mode}-resumed")
        r2 = run(model_flags(data, n, ["--load", copy, "--save", resumed, "--save-interval", str(k), *flag]))
        if not check(r2.returncode == 0, f"{mode} resume failed: {r2.stderr[-800:]}"):
            return
        ls, lr = losses(r.stdout + r.stderr), losses(r2.stdout + r2.stderr)
        check(ls.get(n) is not None and ls.get(n) == lr.get(n), f"{mode}: final loss straight {ls} vs resumed {lr}")
        same_tensors(os.path.join(straight, f"global_step{n}"), os.path.join(resumed, f"global_step{n}"),
                     f"{mode} straight vs resumed tag {n}")
        out[mode] = (straight, ls)
    if "async" in out and "sync" in out:
        check(out["async"][1] == out["sync"][1], f"losses async {out['async'][1]} vs sync {out['sync'][1]}")
        for tag in (k, n):
            same_bytes(os.path.join(out["async"][0], f"global_step{tag}"), os.path.join(out["sync"][0], f"global_step{tag}"),
                       f"async vs sync tag {tag}")
        a = out["async_saved"]
        print(f"bit-exact: async == sync (bytes of tags {k}, {n}; losses {out['async'][1]}); async saves "
              f"{[(float(t), float(b)) for _, _, t, b in a]} (total s, blocked s), sync timers {out['sync_timers']} ms")


class Watched:
    """mds-train with its stderr read line by line: wait_saving() returns once a 'saving checkpoint' line appears."""

    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines, self.cond = [], threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stderr:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)
            self.cond.notify_all()

    def wait_saving(self, count, timeout=120):
        """The iteration of the count-th 'saving checkpoint' line, or None if the process ended first."""
        deadline = time.time() + timeout
        with self.cond:
            while time.time() < deadline:
                seen = [SAVING.search(line) for line in self.lines if line]
                seen = [int(m.group(1)) for m in seen if m]
                if len(seen) >= count:
                    return seen[count - 1]
                if self.lines and self.lines[-1] is None:
                    return None
                self.cond.wait(0.5)
        return None

    def text(self):
        with self.cond:
            return "".join(line for line in self.lines if line)


def complete(ck, what):
    """`latest` names a tag whose files all load; returns its iteration (None when there is no latest)."""
    path = os.path.join(ck, "latest")
    if not os.path.exists(path):
        return None
    tag = open(path).read()
    files = tag_files(os.path.join(ck, tag))
    ok = check(len(files) == FILES, f"{what}: latest {tag} has {files}")
    for f in files:
        try:
            torch.load(os.path.join(ck, tag, f), map_location="cpu", weights_only=False)
        except Exception as e:  # noqa: BLE001
            ok = check(False, f"{what}: {tag}/{f} does not load: {e}")
    return int(tag[len("global_step"):]) if ok else None


def kill_during_write(tmp, data):
    ck = os.path.join(tmp, "kill")
    flags = model_flags(data, 100000, ["--save", ck, "--save-interval", "1", "--log-interval", "100000"])
    rng = random.Random(3)
    during = tries = 0
    while tries < 10 and (tries < 3 or during < 2):
        tries += 1
        w = Watched([TRAIN, *flags] + (["--load", ck] if os.path.exists(os.path.join(ck, "latest")) else []))
        # The second save of this run: the first one is published (or being published) by then.
        started = w.wait_saving(2)
        if not check(started is not None, f"kill {tries}: no second save: {w.text()[-600:]}"):
            w.p.kill()
            return
        time.sleep(rng.uniform(0.0, 0.6))
        w.p.kill()
        w.p.wait()
        tmp_left = glob.glob(os.path.join(ck, ".global_step*.tmp-*"))
        latest_it = complete(ck, f"kill {tries}")
        last_started = max(int(m.group(1)) for m in SAVING.finditer(w.text()))
        if tmp_left or (latest_it is not None and latest_it < last_started):
            during += 1
        if not check(latest_it is not None, f"kill {tries}: no complete latest"):
            return
        # The tag before `latest` (if kept) is intact too: every tag folder has all its files.
        for d in glob.glob(os.path.join(ck, "global_step*")):
            check(len(tag_files(d)) == FILES, f"kill {tries}: {os.path.basename(d)} incomplete: {tag_files(d)}")
    check(during >= 1, f"no kill out of {tries} landed during a background write; the test did not exercise it")
    n = complete(ck, "after the kills")
    r = run(flags + ["--load", ck, "--exit-interval", str(n + 1)])
    check(r.returncode == 0 and f"successfully saved checkpoint at iteration {n + 1} " in r.stderr,
          f"resume after kills failed: {r.stderr[-600:]}")
    print(f"kill -9: {tries} kills, {during} during a background write; latest always complete; resumed at {n}")


def sigterm_during_write(tmp, data):
    """SIGTERM as soon as the second save starts. The signal is handled at an iteration boundary; it landed
    during that save's background write when the log says "received ..." before the save's "successfully
    saved" line (a write already done is published at the boundary before the signal is looked at). The
    timing is the machine's, so up to 4 tries, each of which must end well; one must land during a write."""
    during = tries = 0
    while tries < 4 and during == 0:
        tries += 1
        ck = os.path.join(tmp, f"term{tries}")
        w = Watched([TRAIN, *model_flags(data, 100000, ["--save", ck, "--save-interval", "2", "--log-interval", "100000"])])
        started = w.wait_saving(2)
        if not check(started is not None, f"SIGTERM: no second save: {w.text()[-600:]}"):
            w.p.kill()
            return
        w.p.send_signal(signal.SIGTERM)
        rc = w.p.wait(timeout=120)
        log = w.text()
        last_started = max(int(m.group(1)) for m in SAVING.finditer(log))
        saved = [int(s[0]) for s in SAVED_ASYNC.findall(log)]
        latest = complete(ck, "SIGTERM")
        ok = check(rc == 0, f"SIGTERM: exit status {rc}: {log[-600:]}")
        ok &= check(latest == last_started and saved and saved[-1] == last_started and started in saved,
                    f"SIGTERM: latest {latest}, saves started up to {last_started}, published {saved}")
        ok &= check(not glob.glob(os.path.join(ck, ".global_step*.tmp-*")), "SIGTERM: a temporary folder is left")
        if not ok:
            return
        received = log.find(": stopping after iteration ")
        published = log.find(f"successfully saved checkpoint at iteration {started} ")
        if 0 <= received < published:
            during += 1
    check(during == 1, f"SIGTERM: in {tries} tries the signal never landed during a background write")
    print(f"SIGTERM during the write of a save ({tries} tries): the write completed, exit 0, latest = the last save")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
        data = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2"]
        bit_exact(tmp, data)
        sigterm_during_write(tmp, data)
        kill_during_write(tmp, data)
    testkit.finish()


if __name__ == "__main__":
    main()
