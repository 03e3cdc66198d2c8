#!/usr/bin/env python3
"""mds-train's Megatron timers (docs/mds-train.md, Timers):
  - one process, default --timing-log-level (2): after every iteration line, before the next, BMD's
    "time (ms) | forward-compute: X | backward-compute: ... | optimizer: ... | batch-generator: ..." line with the
    names in BMD's order; the non-overlapping ones (forward-compute, backward-compute, the two gradient all-reduces,
    optimizer) sum to within 25% of the iteration time (TensorBoard's iteration-time/iteration-time, full
    precision) and so do the TensorBoard time/<name>-time scalars (seconds, read back with EventAccumulator);
  - --timing-log-level 1 keeps only optimizer, the all-reduces and forward-backward; 0 prints no line after the
    iterations; a save prints its own "time (ms) | save-checkpoint: X" line whatever the level;
  - PP=2 on two processes: with --timing-log-option all, one line per rank, each with its stage's pipeline
    transfers (forward-send, forward-send-backward-recv, backward-recv on the first stage; forward-recv,
    backward-send-forward-recv, backward-send on the last), each rank's sum near the iteration time; with minmax,
    "(min, max)" values;
  - a --timing-log-option outside max/minmax/all is a usage error.
Exits 77 without LibTorch (no mds-train binary) or without tensorboard in the venv."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "crosscheck"))
import testkit  # noqa: E402
from testkit import check, free_port  # noqa: E402
import tiny_dataset  # noqa: E402

TRAIN = testkit.binary("mds-train")
BIN = os.path.dirname(TRAIN)
try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except Exception as e:  # noqa: BLE001
    testkit.skip(f"tensorboard not importable: {e}")

ITERATION = re.compile(r"^ iteration +(\d+)/")
TIMES = re.compile(r"^time \(ms\)(?: rank (\d+))? \| (.*)$")
# Timers that do not overlap one another: their sum is the step's time but for the untimed bits.
DISJOINT = {"forward-compute", "backward-compute", "backward-params-all-reduce", "backward-embedding-all-reduce",
            "optimizer", "forward-recv", "forward-send", "backward-recv", "backward-send",
            "forward-send-backward-recv", "backward-send-forward-recv"}
BMD_ORDER = ["forward-compute", "backward-compute", "backward-params-all-reduce", "backward-embedding-all-reduce",
             "optimizer", "batch-generator", "forward-backward"]
ITERS, LOG_INTERVAL = 6, 2


def env_for(rank, world, port):
    launch = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_")) and k not in launch}
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return env


def flags(data, extra=()):
    # Big enough that a step takes tens of milliseconds, so the untimed bits stay small beside it.
    return [*data, "--num-layers", "2", "--hidden-size", "128", "--num-attention-heads", "4", "--seq-length", "64",
            "--max-position-embeddings", "64", "--micro-batch-size", "2", "--global-batch-size", "16",
            "--train-iters", str(ITERS), "--lr", "1e-3", "--log-interval", str(LOG_INTERVAL), "--eval-interval", "1000",
            "--eval-iters", "1", "--seed", "7", "--threads", "1", "--device", "cpu", "--distributed-backend", "gloo",
            *extra]


def train(args, world=1):
    port = free_port()
    procs = [subprocess.Popen([TRAIN, *args], env=env_for(r, world, port), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(world)]
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        outs.append((p.returncode, out, err))
    for r, (rc, _, err) in enumerate(outs):
        check(rc == 0, f"{args[-6:]} rank {r}: exit {rc}: {err[-1500:]}")
    return outs[-1][1]  # the last rank prints the lines


def parse_values(body):
    """'forward-compute: 1.00 | optimizer: (1.00, 2.00)' -> [(name, value text)]."""
    return [tuple(part.split(": ", 1)) for part in body.split(" | ")]


def blocks(out):
    """For each iteration line: the "time (ms)" lines between it and the next iteration line, as
    {rank or None: [(name, value text)]}."""
    result, current = [], None
    for line in out.splitlines():
        if ITERATION.match(line):
            current = {}
            result.append(current)
        elif current is not None and (m := TIMES.match(line)) and "save-checkpoint" not in line:
            current[None if m.group(1) is None else int(m.group(1))] = parse_values(m.group(2))
    return result


def tensorboard(tb):
    acc = EventAccumulator(tb, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def near(name, timed, total):
    ratio = timed / total if total > 0 else 0
    print(f"{name}: timed {timed * 1000:.1f} ms of {total * 1000:.1f} ms per iteration ({ratio:.2f})")
    check(0.75 <= ratio <= 1.25, f"{name}: the disjoint timers sum to {ratio:.2f} of the iteration time")


def one_process(tmp, data):
    tb = tmp + "/tb"
    out = train(flags(data, ["--tensorboard-dir", tb, "--log-timers-to-tensorboard"]))
    got = blocks(out)
    check(len(got) == ITERS // LOG_INTERVAL, f"level 2: {len(got)} iteration lines, expected {ITERS // LOG_INTERVAL}")
    scalars = tensorboard(tb)
    for i, b in enumerate(got):
        check(list(b) == [None], f"level 2, line {i}: expected one time (ms) line after the iteration line, got {b}")
        values = b.get(None, [])
        names = [n for n, _ in values]
        check(names == BMD_ORDER, f"level 2: names {names}, expected {BMD_ORDER}")
        step = (i + 1) * LOG_INTERVAL
        per_iter = scalars.get("iteration-time/iteration-time", {}).get(step, 0.0)
        near(f"level 2 line at iteration {step}", sum(float(v) for n, v in values if n in DISJOINT) / 1000, per_iter)
        tags = {f"time/{n}-time": scalars.get(f"time/{n}-time", {}).get(step) for n in BMD_ORDER}
        check(all(v is not None for v in tags.values()), f"TensorBoard at {step}: missing {[t for t, v in tags.items() if v is None]}")
        near(f"TensorBoard time/ at iteration {step}", sum(v or 0 for t, v in tags.items() if t[5:-5] in DISJOINT), per_iter)
        # Same window, same normalizer (the log interval's iterations): the line is the TensorBoard value in ms.
        fc = dict(values).get("forward-compute")
        if fc is not None and tags["time/forward-compute-time"] is not None:
            check(abs(float(fc) - tags["time/forward-compute-time"] * 1000) <= 0.01 + 1e-3 * float(fc),
                  f"forward-compute: line {fc} ms, TensorBoard {tags['time/forward-compute-time']} s")
    # Written at every TensorBoard interval (1), not only at the log interval.
    check(len(scalars.get("time/optimizer-time", {})) == ITERS, f"time/optimizer-time at {sorted(scalars.get('time/optimizer-time', {}))}")


def levels_and_save(tmp, data):
    out = train(flags(data, ["--timing-log-level", "1", "--save", tmp + "/ckpt1", "--save-interval", "3"]))
    for b in blocks(out):
        names = [n for n, _ in b.get(None, [])]
        check(names == ["backward-params-all-reduce", "backward-embedding-all-reduce", "optimizer", "forward-backward"],
              f"level 1: names {names}")
    saves = [line for line in out.splitlines() if line.startswith("time (ms) | save-checkpoint: ")]
    check(len(saves) == ITERS // 3, f"level 1: {len(saves)} save-checkpoint lines for {ITERS // 3} saves: {saves}")
    check(all(float(s.rsplit(" ", 1)[1]) > 0 for s in saves), f"save-checkpoint times {saves}")

    out = train(flags(data, ["--timing-log-level", "0", "--save", tmp + "/ckpt0", "--save-interval", "3"]))
    got = blocks(out)
    check(len(got) == ITERS // LOG_INTERVAL and all(not b for b in got), f"level 0: time lines after iterations: {got}")
    check(sum(line.startswith("time (ms) | save-checkpoint: ") for line in out.splitlines()) == ITERS // 3,
          "level 0: the save-checkpoint line is missing")


def pipeline(tmp, data):
    tb = tmp + "/tb_pp"
    out = train(flags(data, ["--pipeline-model-parallel-size", "2", "--timing-log-option", "all",
                             "--tensorboard-dir", tb, "--log-timers-to-tensorboard"]), world=2)
    got = blocks(out)
    check(len(got) == ITERS // LOG_INTERVAL, f"PP=2: {len(got)} iteration lines")
    scalars = tensorboard(tb)
    first = {"forward-send", "forward-send-backward-recv", "backward-recv"}
    last = {"forward-recv", "backward-send-forward-recv", "backward-send"}
    for i, b in enumerate(got):
        check(sorted(b) == [0, 1], f"PP=2 all: lines for ranks {sorted(b)}, expected [0, 1]")
        step = (i + 1) * LOG_INTERVAL
        per_iter = scalars.get("iteration-time/iteration-time", {}).get(step, 0.0)
        for rank, mine, other in ((0, first, last), (1, last, first)):
            names = {n for n, _ in b.get(rank, [])}
            check(mine <= names and not (other & names), f"PP=2 rank {rank}: names {sorted(names)}")
            if i > 0:  # the first interval includes the pipeline's start-up wait on the last stage
                near(f"PP=2 rank {rank} at iteration {step}",
                     sum(float(v) for n, v in b.get(rank, []) if n in DISJOINT) / 1000, per_iter)

    out = train(flags(data, ["--pipeline-model-parallel-size", "2", "--timing-log-option", "minmax"]), world=2)
    for b in blocks(out):
        values = b.get(None, [])
        check(values and all(re.fullmatch(r"\(\d+\.\d\d, \d+\.\d\d\)", v) for _, v in values),
              f"PP=2 minmax: values {values}")
        pairs = [tuple(map(float, v[1:-1].split(", "))) for _, v in values]
        check(all(lo <= hi for lo, hi in pairs), f"PP=2 minmax: min above max in {values}")


def usage(data):
    r = subprocess.run([TRAIN, *flags(data, ["--timing-log-option", "mean"])], capture_output=True, text=True,
                       env=env_for(0, 1, free_port()), timeout=120)
    check(r.returncode == 2 and "--timing-log-option" in r.stderr, f"--timing-log-option mean: exit {r.returncode}: {r.stderr[-500:]}")


def main():
    tmp = tempfile.mkdtemp(prefix="mds_timers_")
    try:
        prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
        data = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2"]
        one_process(tmp, data)
        levels_and_save(tmp, data)
        pipeline(tmp, data)
        usage(data)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    testkit.finish()


if __name__ == "__main__":
    main()
