#!/usr/bin/env python3
"""mds-train's save schedule and absolute exits on a tiny GPT (docs/mds-train.md, "Save schedules and absolute exits"):
  - --save-interval 2@1-6,3@7-12,5 --train-iters 20 saves at 2, 4, 6, 9, 12, 15 and 20 (the end), each once, `latest`
    names global_step20, and each checkpoint's args.save_interval is the int in effect at its iteration;
  - --exit-iteration 7 stops after iteration 7 with a checkpoint there and says why; the same command again exits at
    once, trains nothing and leaves the checkpoint byte for byte; a raised --exit-iteration 10 resumes at 8 and stops
    at 10, saved once although the periodic save (--save-interval 5) falls there too;
  - --exit-samples with a batch-size ramp-up stops after the first iteration whose consumed samples reach the count;
  - a bad schedule, --exit-iteration 0 and --exit-samples -1 exit 2 naming the problem, before training.
Exits 77 without the mds-train binary (no LibTorch)."""
import hashlib
import os
import re
import subprocess
import sys
import tempfile

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "crosscheck"))
import testkit  # noqa: E402
from testkit import check  # noqa: E402
import tiny_dataset  # noqa: E402

TRAIN = testkit.binary("mds-train")
BIN = os.path.dirname(TRAIN)


def model_flags(extra=()):
    return ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
            "--max-position-embeddings", "32", "--micro-batch-size", "2", "--lr", "1e-3", "--min-lr", "1e-4",
            "--lr-decay-style", "cosine", "--log-interval", "1", "--eval-iters", "0", "--seed", "7", "--threads", "2",
            *extra]


def run(args):
    r = subprocess.run([TRAIN, *args], capture_output=True, text=True)
    r.out = r.stdout + r.stderr
    return r


def iterations(r):
    """(iteration, consumed samples) of each iteration line."""
    return [(int(m.group(1)), int(m.group(2)))
            for m in re.finditer(r"^ iteration +(\d+)/ *\d+ \| consumed samples: +(\d+) \|", r.stdout, re.M)]


def saved_at(r):
    return [int(x) for x in re.findall(r"^(?:mds-train: )?saving checkpoint at iteration (\d+) ", r.out, re.M)]


def steps(ck):
    return sorted(int(d[len("global_step"):]) for d in os.listdir(ck) if re.fullmatch(r"global_step\d+", d))


def latest(ck):
    with open(os.path.join(ck, "latest")) as f:
        return f.read().strip()


def digest(ck):
    """The checkpoints and `latest` (not the run ledger a job appends to)."""
    h = hashlib.sha256()
    paths = [os.path.join(ck, "latest")]
    for step in steps(ck):
        for root, dirs, files in os.walk(os.path.join(ck, f"global_step{step}")):
            dirs.sort()
            paths += [os.path.join(root, name) for name in files]
    for path in sorted(paths):
        h.update(path.encode())
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def saved_interval(ck, step):
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # bmd_checkpoint imports deepspeed: no accelerator probe
    import torch
    import bmd_checkpoint  # noqa: F401  (megatron.enums stand-in so the pickled args resolve)
    states = torch.load(os.path.join(ck, f"global_step{step}", "mp_rank_00_model_states.pt"), map_location="cpu",
                        weights_only=False)
    return getattr(states["args"], "save_interval", "(missing)")


def schedule(tmp, data):
    ck = tmp + "/schedule"
    r = run(data + model_flags(["--global-batch-size", "4", "--train-iters", "20", "--save", ck,
                                "--save-interval", "2@1-6,3@7-12,5"]))
    if not check(r.returncode == 0, f"schedule run: rc {r.returncode}: {r.stderr[-1500:]}"):
        return
    want = [2, 4, 6, 9, 12, 15, 20]
    check(len(iterations(r)) == 20, f"schedule run: {len(iterations(r))} iterations, expected 20")
    check(steps(ck) == want, f"schedule run: checkpoints at {steps(ck)}, expected {want}")
    check(saved_at(r) == want, f"schedule run: saves logged at {saved_at(r)}, expected {want} (each once)")
    check(latest(ck) == "global_step20", f"schedule run: latest is {latest(ck)!r}")
    got = {s: saved_interval(ck, s) for s in (4, 9, 15, 20)}
    check(got == {4: 2, 9: 3, 15: 5, 20: 5}, f"args.save_interval per checkpoint: {got}")
    check(all(type(v) is int for v in got.values()), f"args.save_interval must stay a Python int: {got}")
    print(f"schedule: 2@1-6,3@7-12,5 over 20 iterations saved at {steps(ck)}; args.save_interval {got}")


def exit_iteration(tmp, data):
    ck = tmp + "/exit-iteration"
    flags = data + model_flags(["--global-batch-size", "4", "--train-iters", "20", "--save", ck, "--load", ck,
                                "--save-interval", "5"])
    r = run(flags + ["--exit-iteration", "7"])
    if not check(r.returncode == 0, f"--exit-iteration 7: rc {r.returncode}: {r.stderr[-1500:]}"):
        return
    its = [i for i, _ in iterations(r)]
    check(its == list(range(1, 8)), f"--exit-iteration 7 trained iterations {its}")
    check(steps(ck) == [5, 7] and latest(ck) == "global_step7", f"--exit-iteration 7: checkpoints {steps(ck)}, "
          f"latest {latest(ck)!r}")
    check("exiting program at iteration 7 (--exit-iteration 7)" in r.out, f"--exit-iteration 7: no reason: {r.out[-800:]}")
    check("end of training" not in r.out, "--exit-iteration must not run the end-of-training steps")
    check("stopped (exit iteration)" in r.out, f"--exit-iteration: summary line: {r.stderr[-400:]}")
    before = digest(ck)

    # The job resubmitted with the same flags: nothing to train, nothing written.
    r = run(flags + ["--exit-iteration", "7"])
    check(r.returncode == 0, f"resubmitted at --exit-iteration 7: rc {r.returncode}: {r.stderr[-1500:]}")
    check(not iterations(r) and not saved_at(r), f"resubmitted: trained {iterations(r)} / saved {saved_at(r)}")
    check("resumed at iteration 7" in r.out and "at or past --exit-iteration 7: exiting without training" in r.out,
          f"resubmitted: no message: {r.out[-800:]}")
    check(digest(ck) == before and latest(ck) == "global_step7", "resubmitted: the checkpoint folder changed")

    # Raised: resumes at 8 and stops at 10, where --save-interval 5 saves too: one save.
    r = run(flags + ["--exit-iteration", "10"])
    its = [i for i, _ in iterations(r)]
    check(r.returncode == 0 and its == [8, 9, 10], f"--exit-iteration 10: rc {r.returncode}, iterations {its}: "
          f"{r.stderr[-800:]}")
    check(saved_at(r) == [10], f"--exit-iteration 10 on a periodic save: saves logged at {saved_at(r)}, expected [10]")
    check(steps(ck) == [5, 7, 10] and latest(ck) == "global_step10", f"--exit-iteration 10: checkpoints {steps(ck)}")
    print(f"exit iteration: stopped at 7, resubmission trained nothing (checkpoint unchanged), raised to 10 resumed at "
          f"{its[:1]} and saved {steps(ck)}")


def exit_samples(tmp, data):
    ck = tmp + "/exit-samples"
    # Ramp-up 2 -> 8 in steps of 2 over 24 samples: the consumed samples grow unevenly.
    flags = data + model_flags(["--global-batch-size", "8", "--rampup-batch-size", "2", "2", "24",
                                "--train-samples", "400", "--save", ck, "--save-interval", "1000"])
    r = run(flags + ["--exit-samples", "25"])
    its = iterations(r)
    if not check(r.returncode == 0 and its, f"--exit-samples 25: rc {r.returncode}: {r.stderr[-1500:]}"):
        return
    last_it, last_consumed = its[-1]
    check(last_consumed >= 25 and all(c < 25 for _, c in its[:-1]),
          f"--exit-samples 25: must stop after the first iteration reaching 25 samples: {its}")
    check(len({c - p for (_, p), (_, c) in zip([(0, 0)] + its[:-1], its)}) > 1, f"no ramp-up seen: {its}")
    check(steps(ck) == [last_it], f"--exit-samples: checkpoints {steps(ck)}, expected [{last_it}]")
    check(f"exiting program at iteration {last_it}: {last_consumed} consumed samples reach --exit-samples 25" in r.out,
          f"--exit-samples: no reason: {r.out[-800:]}")
    r = run(flags + ["--load", ck, "--exit-samples", "25"])
    check(r.returncode == 0 and not iterations(r) and "at or past --exit-samples 25" in r.out,
          f"--exit-samples resubmitted: rc {r.returncode}, {iterations(r)}: {r.out[-600:]}")
    print(f"exit samples: stopped at iteration {last_it} with {last_consumed} samples (consumed samples per iteration {[c for _, c in its]})")


def usage_errors(tmp, data):
    cases = [
        (["--save-interval", "10@5-1"], "--save-interval '10@5-1': the iteration range '5-1': the range ends (1) before it starts (5)"),
        (["--save-interval", "2@1-6,3@5-9"], "overlap (iteration 5 is in both)"),
        (["--save-interval", "10@"], "the iteration range after '@' is missing"),
        (["--exit-iteration", "0"], "--exit-iteration must be positive"),
        (["--exit-samples", "-1"], "--exit-samples must be positive"),
    ]
    for extra, needle in cases:
        r = run(data + model_flags(["--global-batch-size", "4", "--train-iters", "4", "--save", tmp + "/bad", "--save-interval",
                                    "2", *extra]))
        check(r.returncode == 2 and needle in r.stderr and not iterations(r),
              f"{extra}: expected exit 2 with {needle!r}, got {r.returncode}: {r.stderr[-400:]}")
    check(not os.path.exists(tmp + "/bad/latest"), "a refused command line wrote a checkpoint")
    print(f"usage errors: {len(cases)} bad schedules or exit points refused with exit 2")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
        data = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2"]
        usage_errors(tmp, data)
        schedule(tmp, data)
        exit_iteration(tmp, data)
        exit_samples(tmp, data)
    testkit.finish()


if __name__ == "__main__":
    main()
