#!/usr/bin/env python3
"""mds-train's straggler report (docs/mds-train.md#stragglers) on 2 data-parallel processes over Gloo on loopback,
started as torchrun starts them:
  - rank 1 slowed on purpose by SIGSTOP/SIGCONT bursts from the test (stopped 60 ms of every 100 ms: its own step
    time becomes about 2.5x the other's, while two ranks on a busy 2-core machine differ by up to 1.7x in single
    intervals, hence --straggler-alert-ratio 1.5 in both runs, with the default 3 intervals in a row): the last
    rank's report names rank 1 with this host as the slowest (MxRtt/Rnk) in most intervals, an `***ALERT: straggler`
    line names rank 1 and never rank 0, --alert-command receives it, and TensorBoard has the stragglers/ scalars
    with rank 1 as the slowest rank;
  - the same run without slowing prints a report every log interval and no straggler alert;
  - --no-log-straggler prints no report; one process prints none (nobody to compare with);
  - a bad --straggler-alert-ratio is a usage error (exit 2) naming the flag.
Exits 77 without LibTorch (no mds-train binary)."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "crosscheck"))
import testkit  # noqa: E402
from testkit import check, free_port  # noqa: E402
import tiny_dataset  # noqa: E402

TRAIN = testkit.binary("mds-train")
BIN = os.path.dirname(TRAIN)
ITERS, LOG_INTERVAL = 40, 5
REPORT = re.compile(r"^straggler report at iteration (\d+) .*\| MnRtt/Rnk: ([\d.]+)ms/(\d+)@(\S+) \| "
                    r"MxRtt/Rnk: ([\d.]+)ms/(\d+)@(\S+) \|")
ALERT_FLAGS = ["--straggler-alert-ratio", "1.5"]
ALERT = re.compile(r"^\*\*\*ALERT: straggler at iteration \d+: rank (\d+) \(host (\S+)\)")


def flags(data, iters=ITERS, extra=()):
    # Compute-heavy for its size (8 micro batches of 4 x 64 tokens per rank and step), so that a rank's compute
    # timers, not its waits, take most of its time.
    return [*data, "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
            "--max-position-embeddings", "64", "--micro-batch-size", "4", "--global-batch-size", "64",
            "--train-iters", str(iters), "--lr", "1e-3", "--log-interval", str(LOG_INTERVAL), "--eval-interval", "1000",
            "--eval-iters", "1", "--seed", "3", "--threads", "1", "--device", "cpu", "--distributed-backend", "gloo",
            *extra]


def rank_env(rank, world, port):
    launch = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_")) and k not in launch}
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return env


def bursts(pid, stop_s, period_s, done):
    """Stops `pid` for stop_s of every period_s until `done` is set or the process is gone; leaves it running."""
    while not done.is_set():
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stop_s)
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            return
        time.sleep(period_s - stop_s)


def train(args, world, slow_rank=None, cwd=None):
    """Runs `world` ranks; returns [(exit status, stdout, stderr)] by rank."""
    port = free_port()
    procs = [subprocess.Popen([TRAIN, *args], env=rank_env(r, world, port), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=cwd) for r in range(world)]
    done = threading.Event()
    slower = None
    if slow_rank is not None:
        slower = threading.Thread(target=bursts, args=(procs[slow_rank].pid, 0.06, 0.1, done), daemon=True)
        slower.start()
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            done.set()
            for q in procs:
                q.kill()
            out, err = p.communicate()
            err += "\n[test: killed after 120 s]"
        outs.append((p.returncode, out, err))
    done.set()
    if slower:
        slower.join()
    return outs


def reports(out):
    return [m.groups() for m in map(REPORT.match, out.splitlines()) if m]


def alerts(out):
    return [(int(m.group(1)), m.group(2)) for m in map(ALERT.match, out.splitlines()) if m]


def slowed(tmp, data, host):
    tb = os.path.join(tmp, "tb")
    log = os.path.join(tmp, "alerts.txt")
    outs = train(flags(data, extra=[*ALERT_FLAGS, "--tensorboard-dir", tb,
                                    "--alert-command", f"printf '%s\\n' \"$1\" >> {log}"]), 2, slow_rank=1, cwd=tmp)
    if not check(all(rc == 0 for rc, _, _ in outs), f"slowed run: exits {[o[0] for o in outs]}: {outs[0][2][-1500:]}"):
        return
    out = outs[1][1]
    check(not reports(outs[0][1]), "slowed run: rank 0 printed straggler reports (only the last rank should)")
    reps = reports(out)
    check(len(reps) == ITERS // LOG_INTERVAL, f"slowed run: {len(reps)} straggler reports for {ITERS // LOG_INTERVAL} "
                                             f"log intervals:\n{out[-1500:]}")
    slowest = [int(r[5]) for r in reps]
    check(sum(1 for r in slowest if r == 1) >= 0.75 * len(slowest),
          f"slowed run: rank 1 is the slowest in only {slowest.count(1)} of {len(slowest)} reports: {slowest}")
    check(all(r[6] == host for r in reps) and all(r[3] == host for r in reps),
          f"slowed run: the report does not name this host {host!r}: {reps[:2]}")
    ratios = [float(r[4]) / max(float(r[1]), 1e-9) for r in reps]
    got = alerts(out)
    check(got and all(a == (1, host) for a in got), f"slowed run: straggler alerts {got}, expected rank 1 on {host}:\n"
                                                    f"{out[-2500:]}")
    check(not alerts(outs[0][1]), "slowed run: rank 0 printed a straggler alert")
    # --alert-command ran for it (without waiting: give it a moment).
    for _ in range(50):
        if os.path.exists(log):
            break
        time.sleep(0.1)
    text = open(log).read() if os.path.exists(log) else ""
    check("***ALERT: straggler at iteration" in text and "rank 1 (host" in text,
          f"--alert-command did not receive the straggler alert: {text!r}")
    print(f"slowed run: rank 1 slowest in {slowest.count(1)}/{len(slowest)} reports {slowest}, max/min step "
          f"{' '.join(f'{x:.2f}' for x in ratios)}, {len(got)} alert(s): "
          f"{next((l for l in out.splitlines() if l.startswith('***ALERT: straggler')), '')}")
    tensorboard_scalars(tb)


def tensorboard_scalars(tb):
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError as e:
        print(f"tensorboard not importable ({e}): the stragglers/ scalars not read back")
        return
    acc = EventAccumulator(tb, size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags().get("scalars", [])
    for tag in ("stragglers/max step ms", "stragglers/min step ms", "stragglers/median step ms",
                "stragglers/max-to-median step", "stragglers/slowest rank", "stragglers/fastest rank",
                "stragglers/max data-wait ms", "stragglers/min data-wait ms"):
        check(tag in tags, f"TensorBoard: no {tag} scalar (tags: {[t for t in tags if 'straggler' in t]})")
    if "stragglers/slowest rank" in tags:
        events = acc.Scalars("stragglers/slowest rank")
        check([e.step for e in events] == list(range(LOG_INTERVAL, ITERS + 1, LOG_INTERVAL)),
              f"TensorBoard: stragglers/ steps {[e.step for e in events]}")
        ones = sum(1 for e in events if e.value == 1.0)
        check(ones >= 0.75 * len(events), f"TensorBoard: slowest rank 1 in only {ones} of {len(events)} intervals")


def unslowed(data):
    outs = train(flags(data, extra=ALERT_FLAGS), 2)
    if not check(all(rc == 0 for rc, _, _ in outs), f"plain run: exits {[o[0] for o in outs]}: {outs[0][2][-1500:]}"):
        return
    out = outs[1][1]
    check(len(reports(out)) == ITERS // LOG_INTERVAL, f"plain run: {len(reports(out))} straggler reports")
    check(not alerts(out), f"plain run: a straggler alert without a straggler:\n{out[-2500:]}")
    ratios = [float(r[4]) / max(float(r[1]), 1e-9) for r in reports(out)]
    print(f"plain run: {len(reports(out))} reports, no alert; slowest ranks {[int(r[5]) for r in reports(out)]}, "
          f"max/min step {min(ratios):.2f}-{max(ratios):.2f}")


def off(data):
    outs = train(flags(data, iters=10, extra=["--no-log-straggler"]), 2)
    check(all(rc == 0 for rc, _, _ in outs) and not reports(outs[1][1]) and "straggler" not in outs[1][1],
          f"--no-log-straggler: exits {[o[0] for o in outs]}, output:\n{outs[1][1][-800:]}")
    one = subprocess.run([TRAIN, *flags(data, iters=10, extra=["--log-straggler"])], capture_output=True, text=True,
                         env=rank_env(0, 1, free_port()), timeout=120)
    check(one.returncode == 0 and not reports(one.stdout), f"one process: exit {one.returncode}, reports "
                                                           f"{reports(one.stdout)}: {one.stderr[-800:]}")
    bad = subprocess.run([TRAIN, *flags(data, iters=10, extra=["--straggler-alert-ratio", "0.9"])], capture_output=True,
                         text=True, env=rank_env(0, 1, free_port()), timeout=120)
    check(bad.returncode == 2 and "--straggler-alert-ratio" in bad.stderr,
          f"--straggler-alert-ratio 0.9: exit {bad.returncode}, stderr {bad.stderr[-500:]!r}")


def main():
    tmp = tempfile.mkdtemp(prefix="mds-stragglers-")
    try:
        prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
        data = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2"]
        host = socket.gethostname()
        t0 = time.time()
        slowed(tmp, data, host)
        t1 = time.time()
        unslowed(data)
        t2 = time.time()
        off(data)
        print(f"times: slowed {t1 - t0:.1f} s, plain {t2 - t1:.1f} s, off/one/bad {time.time() - t2:.1f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    testkit.finish()


if __name__ == "__main__":
    main()
