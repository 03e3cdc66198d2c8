#!/usr/bin/env python3
"""mds-train data- and tensor-parallel on CPU over Gloo, started as torchrun starts processes:
  - 2, 3 and 4 processes (RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT) train the same tiny GPT on
    the same data as one process: the same lm loss, grad norm and params norm every iteration and the same
    validation losses, to fp32 tolerance, with the optimizer states partitioned (ZeRO-1, 3 ranks: uneven, padded
    partitions); only the last rank prints iteration lines (Megatron's print_rank_last);
  - ZeRO stage 0 (replicated states in fp32; bf16 partitions them as DeepSpeed's BF16_Optimizer) and stage 1 give
    identical lines, in fp32 and in bf16; bf16 on 2 processes
    gives one process's lines (its gradients summed in fp32 either way); bf16's fp32 main gradients all-reduced in 20000-element buckets (in place,
    during backward or after it) give the default bucket's lines to the last digit;
  - a one-process checkpoint (iteration 10) resumed on 2 processes (every rank loads it, each keeps its ZeRO-1
    partition of the optimizer states) continues exactly as the one-process resume and the uninterrupted run;
  - the real `torchrun --no-python` of the venv's torch starts them too, with the same losses, and so does `srun -n 2`
    on a real single-node SLURM (slurm_cluster.py; skipped without root or the SLURM packages), where each task
    finds its rank, local rank and the master host from SLURM's variables alone, and Open MPI's `mpirun -np 2`
    (skipped without the openmpi-bin package);
  - a rank killed with SIGKILL, or stopped with SIGSTOP (a hang), makes the others exit non-zero within the
    timeout (--distributed-timeout-minutes) with an error naming that rank, instead of waiting forever;
  - a signal that reaches one rank only (SIGUSR1) stops every rank after the same iteration;
  - a checkpoint saved on 2 processes (one optimizer partition per rank) and resumed on 2 continues bit for bit
    as the uninterrupted 2-process run; one saved at TP=2 x DP=2 (a shard per TP rank) resumes bit for bit at
    that shape and on the same curve at TP=2 x DP=1, and at TP=1 the error names mds-ckpt-reshape;
  - tensor parallelism: TP=2 (also with --sync-tp-duplicated-parameters), TP=2 x DP=2 and a BLOOM-style model (ALiBi, embedding LayerNorm, recomputation) at
    TP=4 give one process's lm loss, grad norm, params norm and validation losses (relative 2e-6);
  - usage errors: heads or a world size TP does not divide, a world size the global batch does not divide, a malformed launcher
    variable.
Exits 77 without LibTorch (no mds-train binary)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "crosscheck"))
import testkit  # noqa: E402
from slurm_cluster import SlurmCluster  # noqa: E402
from testkit import check, free_port  # noqa: E402
import tiny_dataset  # noqa: E402

TRAIN = testkit.binary("mds-train")
BIN = os.path.dirname(TRAIN)
ITERS = 20
FUSED_RTOL = 1e-4  # fused vs unfused bf16 steps partitioned over 2 ranks: 1.6e-5 apart at most (2026-11-29)
LOSS = re.compile(r"^ iteration +(\d+)/ +\d+ \| consumed samples: +(\d+) \|.* lm loss: (\S+) \| grad norm: (\S+) \|"
                  r".* params norm: (\S+) \|")
VALID = re.compile(r"valid loss at (.*) \| lm loss value: (\S+) \|")


def flags(data, iters=ITERS, extra=(), layers=2):
    return [*data, "--num-layers", str(layers), "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
            "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "24",
            "--train-iters", str(iters), "--lr", "3e-3", "--min-lr", "3e-4", "--lr-decay-style", "cosine",
            "--lr-warmup-iters", "3", "--weight-decay", "0.1", "--clip-grad", "1.0", "--hidden-dropout", "0",
            "--attention-dropout", "0", "--log-params-norm", "--log-interval", "1", "--eval-interval", "10", "--eval-iters", "2",
            "--seed", "7", "--threads", "1", "--device", "cpu", "--distributed-backend", "gloo", *extra]


def clean_env():
    """The environment without any launcher's variables (the test itself may run under one)."""
    launch = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_")) and k not in launch}


def rank_env(rank, world, port, per_node=None):
    """torchrun's variables for `rank` of `world`, on nodes of `per_node` ranks (default: one node)."""
    per_node = per_node or world
    env = clean_env()
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % per_node), LOCAL_WORLD_SIZE=str(per_node),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return env


def start(args, world, port, per_node=None):
    return [subprocess.Popen([TRAIN, *args], env=rank_env(r, world, port, per_node), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for r in range(world)]


def wait_all(procs, timeout=600):
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            err += "\n[test: killed after the timeout]"
        outs.append((p.returncode, out, err))
    return outs


def curve(out):
    losses = [(int(m.group(1)), int(m.group(2)), float(m.group(3)), float(m.group(4)), float(m.group(5)))
              for m in map(LOSS.match, out.splitlines()) if m]
    valid = [(m.group(1), float(m.group(2))) for m in map(VALID.search, out.splitlines()) if m]
    return losses, valid


def same_curve(name, ref, got, rtol=2e-5, against="one process", iters=ITERS):
    """`got`'s iteration and validation lines against `ref`'s, the run `against` names."""
    (rl, rv), (gl, gv) = ref, got
    if not check(len(gl) == len(rl) == iters, f"{name}: {len(gl)} iteration lines, {against} printed {len(rl)}"):
        return
    check([x[:2] for x in gl] == [x[:2] for x in rl], f"{name}: iterations / consumed samples differ")
    worst = max(abs(a[2] - b[2]) / abs(b[2]) for a, b in zip(gl, rl))
    check(worst <= rtol, f"{name}: lm loss differs from {against} by {worst:.2e} (relative) > {rtol:.0e}")
    # grad norm and params norm are printed with 3 decimals: equal up to the last digit's rounding.
    for k, what in ((3, "grad norm"), (4, "params norm")):
        off = max(abs(a[k] - b[k]) for a, b in zip(gl, rl))
        check(off <= 1.001e-3 + rtol * max(b[k] for b in rl), f"{name}: {what} differs from {against} by {off}")
    check(len(gv) == len(rv) >= 3, f"{name}: {len(gv)} validation blocks, {against} printed {len(rv)}")
    for (wa, a), (wb, b) in zip(gv, rv):
        check(wa == wb and abs(a - b) <= rtol * abs(b), f"{name}: validation at {wa}: {a} vs {against} {b}")
    print(f"{name}: {len(gl)} iterations, lm loss {gl[0][2]:.4f} -> {gl[-1][2]:.4f}, worst relative difference "
          f"from {against} {worst:.1e}")


def equivalence(tmp, data):
    one = subprocess.run([TRAIN, *flags(data)], capture_output=True, text=True, env=rank_env(0, 1, free_port()))
    if not check(one.returncode == 0, f"one process exited {one.returncode}: {one.stderr[-2000:]}"):
        return
    ref = curve(one.stdout)
    tp2dp2 = resume(tmp, data, ref)  # its straight TP=2 x DP=2 run, which saved: that shape's check below
    srun_launch(tmp, data, ref)
    mpirun_launch(data, ref)
    check(ref[0][-1][2] < ref[0][0][2] - 0.3, f"one process: the loss did not fall ({ref[0][0][2]} -> {ref[0][-1][2]})")
    dp2 = None  # DP=2's curve (ZeRO stage 1, the default): the fp32 stage-1 run of the ZeRO comparison below
    for world in (2, 3, 4):
        outs = wait_all(start(flags(data), world, free_port()))
        for r, (rc, out, err) in enumerate(outs):
            check(rc == 0, f"DP={world}: rank {r} exited {rc}: {err[-2000:]}")
            if r != world - 1:
                check(not curve(out)[0], f"DP={world}: rank {r} printed iteration lines (only the last rank should)")
        check(f"TP 1 x PP 1 x DP {world} over {world} processes" in outs[0][2], f"DP={world}: rank 0 did not report the layout")
        check("ZeRO stage 1: each rank holds the optimizer states of about" in outs[0][2],
              f"DP={world}: rank 0 did not report the partitioned optimizer")
        same_curve(f"DP={world}", ref, curve(outs[-1][1]))
        if world == 2 and all(o[0] == 0 for o in outs):
            dp2 = curve(outs[-1][1])

    # Tensor parallelism (Megatron's column / row-parallel layers, vocab-parallel embedding and cross entropy),
    # alone and with data parallelism; then a BLOOM-style model (ALiBi, embedding LayerNorm, recomputation) at TP=4.
    for tp, world in ((2, 2), (2, 4)):
        outs = tp2dp2 if world == 4 and tp2dp2 else \
            wait_all(start(flags(data, extra=["--tensor-model-parallel-size", str(tp)]), world, free_port()))
        check(all(o[0] == 0 for o in outs), f"TP={tp} on {world}: exits {[o[0] for o in outs]}: {outs[0][2][-800:]}")
        check(f"TP {tp} x PP 1 x DP {world // tp} over {world} processes" in outs[0][2], f"TP={tp} on {world}: layout not reported")
        same_curve(f"TP={tp} x DP={world // tp}", ref, curve(outs[-1][1]), rtol=2e-6)
    # BMD's --sync-tp-duplicated-parameters: the LayerNorm copies averaged over TP before each step (equal copies
    # here, so the same curve), reported at start-up.
    outs = wait_all(start(flags(data, extra=["--tensor-model-parallel-size", "2", "--sync-tp-duplicated-parameters"]), 2,
                          free_port()))
    check(all(o[0] == 0 for o in outs), f"--sync-tp-duplicated-parameters: {outs[0][2][-800:]}")
    check("--sync-tp-duplicated-parameters: 10 LayerNorm tensors averaged over the tensor-parallel group" in outs[0][2],
          f"--sync-tp-duplicated-parameters: not reported: {outs[0][2][-600:]}")
    same_curve("TP=2 with --sync-tp-duplicated-parameters", ref, curve(outs[-1][1]), rtol=2e-6)
    # 10 iterations (validation every 5): TP=4 over Gloo on 4 processes is slow on 2 cores (~1 ms a collective).
    bloom = ["--position-embedding-type", "alibi", "--embed-layernorm", "--checkpoint-activations", "--eval-interval", "5"]
    one_bloom = subprocess.run([TRAIN, *flags(data, 10, bloom)], capture_output=True, text=True, env=rank_env(0, 1, free_port()))
    outs = wait_all(start(flags(data, 10, [*bloom, "--tensor-model-parallel-size", "4"]), 4, free_port()))
    check(one_bloom.returncode == 0 and all(o[0] == 0 for o in outs), f"BLOOM-style TP=4: {outs[0][2][-800:]}")
    same_curve("BLOOM-style (ALiBi, embedding LayerNorm, recomputation) TP=4", curve(one_bloom.stdout), curve(outs[-1][1]),
               rtol=2e-6, iters=10)

    # The gradient all-reduce overlapped with backward: DeepSpeed's zero_optimization.reduce_bucket_size cuts the
    # gradients into 7 buckets; most start during the last backward pass, and the curve is one process's, as it is
    # with --no-overlap-grad-reduce (all buckets after backward).
    cfg = os.path.join(tmp, "ds_buckets.json")
    with open(cfg, "w") as f:
        json.dump({"zero_optimization": {"stage": 1, "reduce_bucket_size": 20000}}, f)
    for extra, overlap in (([], True), (["--no-overlap-grad-reduce"], False)):
        outs = wait_all(start(flags(data, extra=["--deepspeed", "--deepspeed_config", cfg, *extra]), 2, free_port()))
        name = "overlapped all-reduce" if overlap else "--no-overlap-grad-reduce"
        if not check(all(o[0] == 0 for o in outs), f"{name}: exits {[o[0] for o in outs]}: {outs[0][2][-800:]}"):
            continue
        m = re.search(r"in the last step (\d+) of (\d+) bucket all-reduces started during the backward pass", outs[0][2])
        if check(m is not None, f"{name}: rank 0 did not report the buckets: {outs[0][2][-600:]}"):
            early, total = int(m.group(1)), int(m.group(2))
            check(total >= 5 and (early >= total // 2 if overlap else early == 0),
                  f"{name}: {early} of {total} buckets started during the backward pass")
            print(f"{name}: {early} of {total} buckets started during the backward pass")
        same_curve(f"DP=2, {name}", ref, curve(outs[-1][1]))

    # ZeRO-0 vs ZeRO-1: the same gradients and element-wise updates, so the same lines to the last digit.
    for precision in ([], ["--bf16"]):
        curves = {}
        for stage in ("0", "1"):
            if stage == "1" and not precision and dp2 is not None:
                curves[stage] = dp2
                continue
            outs = wait_all(start(flags(data, extra=[*precision, "--zero-stage", stage]), 2, free_port()))
            check(all(rc == 0 for rc, _, _ in outs), f"ZeRO-{stage} {precision}: exits {[o[0] for o in outs]}")
            curves[stage] = curve(outs[-1][1])
        name = "bf16" if precision else "fp32"
        check(len(curves["0"][0]) == ITERS and curves["0"] == curves["1"],
              f"{name}: ZeRO-0 and ZeRO-1 on 2 processes print different losses or norms")
        if precision:
            bf1 = subprocess.run([TRAIN, *flags(data, extra=precision)], capture_output=True, text=True,
                                 env=rank_env(0, 1, free_port()))
            # One process's lines to the printed digit: each micro batch's bf16 gradients are summed in fp32 either
            # way (one process: its 2 micro batches, each loss halved, an exact power of two; DP=2: the fp32
            # all-reduce's mean). With the gradients summed in bf16 this took a tolerance of 1e-3.
            same_curve("bf16 DP=2", curve(bf1.stdout), curves["1"], rtol=0)
            # bf16 all-reduces its fp32 main gradients, a bucket being a range of their one buffer reduced in place:
            # cut into many buckets, started during the last backward pass or after it, the sums are the same, so
            # the lines are the default bucket's to the last digit.
            bcfg = os.path.join(tmp, "ds_buckets_bf16.json")
            with open(bcfg, "w") as f:
                json.dump({"zero_optimization": {"stage": 1, "reduce_bucket_size": 20000}, "bf16": {"enabled": True}}, f)
            for extra in ([], ["--no-overlap-grad-reduce"]):
                outs = wait_all(start(flags(data, extra=[*precision, "--deepspeed", "--deepspeed_config", bcfg, *extra]), 2,
                                      free_port()))
                name = f"bf16 DP=2 in 20000-element buckets{' ' + extra[0] if extra else ''}"
                if not check(all(o[0] == 0 for o in outs), f"{name}: exits {[o[0] for o in outs]}: {outs[0][2][-800:]}"):
                    continue
                m = re.search(r"in the last step (\d+) of (\d+) bucket all-reduces started", outs[0][2])
                check(m is not None and int(m.group(2)) >= 5, f"{name}: buckets {m.groups() if m else None}")
                check("gradients accumulated over the micro batches and all-reduced in fp32" in outs[0][2],
                      f"{name}: no fp32 main gradients line: {outs[0][2][-600:]}")
                check(curve(outs[-1][1]) == curves["1"], f"{name}: other losses or norms than the default bucket's")
                print(f"{name}: {m.group(1) if m else '?'} of {m.group(2) if m else '?'} buckets during backward, "
                      "the default bucket's lines")
            # --adam-step-fusion over the partitions: each rank's fragments updated from the bf16 gradients, then
            # gathered; the unfused partitioned step's curve but for fp32 roundings.
            outs = wait_all(start(flags(data, extra=[*precision, "--adam-step-fusion"]), 2, free_port()))
            if check(all(rc == 0 for rc, _, _ in outs), f"bf16 --adam-step-fusion DP=2: exits {[o[0] for o in outs]}: "
                                                        f"{outs[0][2][-800:]}"):
                same_curve("bf16 DP=2 --adam-step-fusion", curves["1"], curve(outs[-1][1]), rtol=FUSED_RTOL,
                           against="the unfused step")

    torchrun = os.path.join(os.path.dirname(os.environ.get("MDS_PYTHON", sys.executable)), "torchrun")
    if not os.path.exists(torchrun):
        print(f"note: {torchrun} missing, the real torchrun launch is not checked")
        return
    env = dict(clean_env(), OMP_NUM_THREADS="1")
    r = subprocess.run([torchrun, "--no-python", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                        "--master-port", str(free_port()), "--tee", "3", "--log-dir", tmp + "/torchrun", TRAIN,
                        *flags(data)], capture_output=True, text=True, env=env, timeout=600)
    if not check(r.returncode == 0, f"torchrun exited {r.returncode}: {r.stderr[-3000:]}"):
        return
    # --tee prefixes each line with "[rank]:"; rank 1 (the last) prints the iteration lines.
    rank1 = "\n".join(line.split(":", 1)[1] for line in r.stdout.splitlines() if line.startswith("[default1]:"))
    same_curve("torchrun --no-python, 2 processes", ref, curve(rank1))


def mpirun_launch(data, ref):
    """Open MPI's mpirun: ranks from OMPI_COMM_WORLD_*, the rendezvous from the exported MASTER_ADDR / PORT."""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        print("note: mpirun missing (Debian package openmpi-bin), the mpirun launch is not checked")
        return
    env = dict(clean_env(), OMPI_MCA_btl="self,tcp", OMPI_MCA_plm="isolated")
    r = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", "--tag-output",
                        "-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={free_port()}", TRAIN, *flags(data)],
                       capture_output=True, text=True, env=env, timeout=600)
    if not check(r.returncode == 0, f"mpirun exited {r.returncode}: {r.stderr[-2000:]}"):
        return
    # --tag-output prefixes each line with "[job,rank]<stdout>:".
    rank1 = "\n".join(line.split(">:", 1)[1] for line in r.stdout.splitlines() if line.startswith("[1,1]<stdout>:"))
    check("TP 1 x PP 1 x DP 2 over 2 processes (Open MPI" in r.stderr, "mpirun: rank 0 did not report the Open MPI launch")
    same_curve("mpirun -np 2", ref, curve(rank1))


def srun_launch(tmp, data, ref):
    why = SlurmCluster.unavailable()
    if why:
        print(f"note: srun launch not checked: {why}")
        return
    probe = os.path.join(BIN, "dist_probe")
    with SlurmCluster(cpus=4) as c:
        r = c.run(["srun", "-n", "2", probe, "launch"], timeout=120)
        if check(r.returncode == 0, f"srun -n 2 dist_probe launch: {r.returncode} {r.stderr[-800:]}"):
            seen = sorted((j["rank"], j["local_rank"], j["world_size"], j["local_world_size"], j["launcher"], j["master_addr"])
                          for j in map(json.loads, r.stdout.split("\n")[:-1]))
            want = [(i, i, 2, 2, "srun", c.host) for i in range(2)]
            check(seen == want, f"srun -n 2: the tasks saw {seen}, expected {want}")
        out = tmp + "/srun"
        os.makedirs(out)
        r = c.run(["srun", "-n", "2", "-o", out + "/%t.out", "-e", out + "/%t.err", TRAIN, *flags(data)], timeout=600,
                  env={"MASTER_PORT": str(free_port())})
        logs = {}
        for t in (0, 1):
            for kind in ("out", "err"):
                with open(f"{out}/{t}.{kind}") as f:
                    logs[t, kind] = f.read()
        if check(r.returncode == 0, f"srun -n 2 mds-train exited {r.returncode}: {r.stderr[-800:]} "
                                    f"{logs[0, 'err'][-800:]} {logs[1, 'err'][-800:]}"):
            check("TP 1 x PP 1 x DP 2 over 2 processes (srun" in logs[0, "err"], "srun: rank 0 did not report the srun launch")
            same_curve("srun -n 2", ref, curve(logs[1, "out"]))


def resume(tmp, data, ref):
    """Returns the outputs of the straight TP=2 x DP=2 run (4 ranks) that saved at 10, or None."""
    ckpt = tmp + "/ckpt"
    r = subprocess.run([TRAIN, *flags(data, extra=["--save", ckpt, "--save-interval", "10", "--exit-interval", "10"])],
                       capture_output=True, text=True, env=rank_env(0, 1, free_port()))
    if not check(r.returncode == 0 and os.path.exists(ckpt + "/latest"), f"save at 10: {r.returncode} {r.stderr[-800:]}"):
        return
    one = subprocess.run([TRAIN, *flags(data, extra=["--load", ckpt])], capture_output=True, text=True,
                         env=rank_env(0, 1, free_port()))
    outs = wait_all(start(flags(data, extra=["--load", ckpt]), 2, free_port()))
    check(one.returncode == 0 and all(o[0] == 0 for o in outs), f"resume: exits {one.returncode} {[o[0] for o in outs]}: "
                                                                 f"{outs[0][2][-800:]}")
    a, b = curve(one.stdout)[0], curve(outs[-1][1])[0]
    if not check(len(a) == len(b) == ITERS - 10 and a[0][0] == 11, f"resume: {len(a)} / {len(b)} iteration lines"):
        return
    worst = max(abs(x[2] - y[2]) / y[2] for x, y in zip(b, a))
    check(worst <= 2e-5 and all(abs(x[4] - y[4]) <= 1.001e-3 for x, y in zip(b, a)),
          f"resume on 2 processes differs from the one-process resume by {worst:.1e}")
    check(all(abs(x[2] - y[2]) / y[2] <= 2e-5 for x, y in zip(a, ref[0][10:])),
          "the one-process resume left the uninterrupted curve")
    print(f"resume at 10 on 2 processes: iterations 11-20 within {worst:.1e} of the one-process resume")

    # Saved on 2 processes, resumed on 2: the same lines as 2 processes straight through. The straight run is
    # the one that saves (at 10 and 20): saving leaves the training as it was, or the resume would not match it.
    dp_ckpt = tmp + "/ckpt-dp2"
    straight = wait_all(start(flags(data, extra=["--save", dp_ckpt, "--save-interval", "10"]), 2, free_port()))
    if not check(all(o[0] == 0 for o in straight), f"DP=2 save: a rank failed: {straight[0][2][-600:]}"):
        return
    testkit.checkpoint_back_to(dp_ckpt, 10)
    resumed = wait_all(start(flags(data, extra=["--load", dp_ckpt]), 2, free_port()))
    if not check(all(o[0] == 0 for o in resumed), "DP=2 resume: a rank failed: "
                 f"{[o[0] for o in resumed]} {resumed[0][2][-600:]}"):
        return
    files = sorted(os.listdir(dp_ckpt + "/global_step10"))
    check([f for f in files if "optim" in f] == [f"zero_pp_rank_{d}_mp_rank_00_optim_states.pt" for d in (0, 1)],
          f"DP=2 save: {files}")
    a, b = curve(straight[-1][1]), curve(resumed[-1][1])
    check(len(b[0]) == 10 and b[0] == a[0][10:] and b[1] == a[1][1:],
          f"DP=2 resume: iterations 11-20 differ from the straight run: {b[0][:2]} vs {a[0][10:12]}")
    print("saved on 2 processes at 10, resumed on 2: iterations 11-20 and validation identical to the straight run")

    # TP=2 x DP=2: one shard per tensor-parallel rank, one optimizer partition per rank; resumed at the same shape
    # bit for bit, and at TP=2 x DP=1 on the same curve. At TP=1 the error says how to reshape.
    tp_ckpt, tp_flags = tmp + "/ckpt-tp2dp2", ["--tensor-model-parallel-size", "2"]
    straight = wait_all(start(flags(data, extra=[*tp_flags, "--save", tp_ckpt, "--save-interval", "10"]), 4, free_port()))
    if not check(all(o[0] == 0 for o in straight), f"TP=2 save: a rank failed: {straight[0][2][-600:]}"):
        return
    testkit.checkpoint_back_to(tp_ckpt, 10)
    same = wait_all(start(flags(data, extra=[*tp_flags, "--load", tp_ckpt]), 4, free_port()))
    fewer = wait_all(start(flags(data, extra=[*tp_flags, "--load", tp_ckpt]), 2, free_port()))
    if not check(all(o[0] == 0 for o in same + fewer), "TP=2 resume: a rank failed: "
                 f"{[o[0] for o in same]} {[o[0] for o in fewer]} {same[0][2][-600:]}"):
        return
    files = sorted(f for f in os.listdir(tp_ckpt + "/global_step10") if "optim" in f or "mp_rank_0" in f[:9])
    want = sorted([f"mp_rank_0{t}_model_states.pt" for t in (0, 1)] +
                  [f"zero_pp_rank_{d}_mp_rank_0{t}_optim_states.pt" for d in (0, 1) for t in (0, 1)])
    check(files == want, f"TP=2 x DP=2 save: {files}")
    a, b, c = curve(straight[-1][1]), curve(same[-1][1]), curve(fewer[-1][1])
    check(b[0] == a[0][10:] and b[1] == a[1][1:], "TP=2 x DP=2 resume: iterations 11-20 differ from the straight run")
    worst = max(abs(x[2] - y[2]) / y[2] for x, y in zip(c[0], a[0][10:])) if len(c[0]) == 10 else 1.0
    check(worst <= 2e-6, f"TP=2 x DP=2 checkpoint resumed at TP=2 x DP=1 left the curve by {worst:.1e}")
    one = subprocess.run([TRAIN, *flags(data, extra=["--load", tp_ckpt])], capture_output=True, text=True,
                         env=rank_env(0, 1, free_port()))
    check(one.returncode != 0 and "mds-ckpt-reshape --target-tp 1" in one.stderr,
          f"a TP=2 checkpoint loaded at TP=1: exit {one.returncode}: {one.stderr[-400:]}")
    print(f"TP=2 x DP=2 saved at 10: resumed at the same shape bit for bit, at TP=2 x DP=1 within {worst:.1e}")
    sync_tp_norms(tmp, data, tp_ckpt)
    return straight


def sync_tp_norms(tmp, data, tp_ckpt):
    """--sync-tp-duplicated-parameters pulls LayerNorm copies that drifted apart back together: the TP=2 checkpoint
    with TP rank 1's input_layernorm.weight of layer_03 set to 3 (rank 0's is about 1) resumed for one iteration at
    --lr 0 saves the mean of the two copies on both ranks; without the flag each rank keeps its own."""
    try:
        import torch
    except ImportError:
        print("note: torch missing, --sync-tp-duplicated-parameters on drifted copies not checked")
        return
    src = tmp + "/ckpt-drifted"
    shutil.copytree(tp_ckpt, src)
    f1 = f"{src}/global_step10/layer_03-model_01-model_states.pt"
    sd = torch.load(f1, weights_only=False)
    sd["input_layernorm.weight"] = torch.full_like(sd["input_layernorm.weight"], 3.0)
    torch.save(sd, f1)
    rank0 = torch.load(f"{src}/global_step10/layer_03-model_00-model_states.pt", weights_only=False)["input_layernorm.weight"]
    for sync in (True, False):
        out = tmp + f"/ckpt-drifted-{'sync' if sync else 'nosync'}"
        extra = ["--tensor-model-parallel-size", "2", "--load", src, "--no-load-optim", "--lr", "0", "--min-lr", "0",
                 "--override-lr-scheduler",
                 "--save", out, "--save-interval", "11", "--exit-interval", "11"] + (["--sync-tp-duplicated-parameters"] if sync else [])
        outs = wait_all(start(flags(data, extra=extra), 2, free_port()))
        if not check(all(o[0] == 0 for o in outs), f"drifted LayerNorms, sync={sync}: {[o[2][-600:] for o in outs]}"):
            continue
        w = [torch.load(f"{out}/global_step11/layer_03-model_0{t}-model_states.pt", weights_only=False)["input_layernorm.weight"]
             for t in (0, 1)]
        if sync:
            check(torch.equal(w[0], w[1]) and torch.allclose(w[0], (rank0 + 3.0) / 2),
                  f"--sync-tp-duplicated-parameters: the copies are {w[0][:3]} and {w[1][:3]}, expected their mean")
        else:
            check(torch.equal(w[0], rank0) and torch.equal(w[1], torch.full_like(w[1], 3.0)),
                  "without --sync-tp-duplicated-parameters the LayerNorm copies should stay as loaded")
    print("--sync-tp-duplicated-parameters: drifted LayerNorm copies (about 1 and 3) saved as their mean on both TP ranks")


def read_until_iteration(proc, deadline):
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            return False
        if LOSS.match(line):
            return True
    return False


def failures(tmp, data):
    """A rank that dies or hangs: the survivor exits with an error naming it, within the timeout."""
    cases = (("killed", 1, signal.SIGKILL, r"rank 1 stopped answering"),
             ("hung", 1, signal.SIGSTOP, r"rank 1 stopped answering"),
             ("killed", 0, signal.SIGKILL, r"rank 0, which holds the rendezvous store at 127\.0\.0\.1:\d+, cannot be reached"))
    for how, rank, sig, want in cases:
        procs = start(flags(data, 100000, ["--distributed-timeout-minutes", "0.25"]), 2, free_port())
        victim, survivor = procs[rank], procs[1 - rank]
        # Rank 1 prints the iteration lines: once one is out, both ranks train.
        ok = check(read_until_iteration(procs[1], time.time() + 300), f"rank {rank} {how}: no iteration line")
        t0 = time.time()
        if ok:
            victim.send_signal(sig)
        try:
            _, err = survivor.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            survivor.kill()
            _, err = survivor.communicate()
            check(False, f"rank {rank} {how}: rank {1 - rank} still running 120 s later")
        elapsed = time.time() - t0
        victim.kill()
        victim.communicate()
        if not ok:
            continue
        name = f"rank {rank} {how}: rank {1 - rank}"
        check(survivor.returncode is not None and survivor.returncode > 0, f"{name} exited {survivor.returncode}, expected an error")
        check(re.search(want, err) is not None, f"{name}'s error does not say /{want}/: {err[-1500:]}")
        check("Traceback" not in err and "terminate called" not in err, f"{name} crashed: {err[-1500:]}")
        print(f"{name} exited {survivor.returncode} after {elapsed:.1f} s: {err.strip().splitlines()[-1][:300]}")


def one_rank_signal(tmp, data):
    """SIGUSR1 to rank 0 only: both ranks stop after the same iteration, exit 0."""
    procs = start(flags(data, 100000), 2, free_port())
    if check(read_until_iteration(procs[1], time.time() + 300), "signal: rank 1 printed no iteration line"):
        procs[0].send_signal(signal.SIGUSR1)
    outs = wait_all(procs, timeout=300)
    for r, (rc, out, err) in enumerate(outs):
        check(rc == 0, f"SIGUSR1 on rank 0: rank {r} exited {rc}: {err[-1500:]}")
    stops = [re.findall(r"stopped \(SIGUSR1\) after (\d+) iterations", err) for _, _, err in outs]
    check(len(stops[0]) == 1 and stops[0] == stops[1], f"SIGUSR1 on rank 0: the ranks stopped at {stops}")


def usage_errors(tmp, data):
    cases = [
        (["--tensor-model-parallel-size", "3"], 3, "--num-attention-heads 4 is not divisible by --tensor-model-parallel-size 3"),
        (["--tensor-model-parallel-size", "4"], 2, "world size 2 is not divisible by --tensor-model-parallel-size 4"),
        (["--global-batch-size", "6"], 4, "not divisible by micro batch size 2 × data parallel size 4"),
    ]
    for extra, world, want in cases:
        outs = wait_all(start(flags(data, 5, extra), world, free_port()), timeout=120)
        rc, _, err = outs[0]
        check(rc != 0 and want in err, f"{extra} on {world} processes: exit {rc}, expected an error with "
                                       f"{want!r}: {err[-600:]}")
    # Two "nodes" of one rank each (LOCAL_WORLD_SIZE=1) at TP=2: the tensor-parallel group spans them, a warning says so.
    port = free_port()
    procs = []
    for r in range(2):
        env = rank_env(r, 2, port)
        env.update(LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        procs.append(subprocess.Popen([TRAIN, *flags(data, 5, ["--tensor-model-parallel-size", "2"])], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = wait_all(procs, timeout=300)
    check(all(o[0] == 0 for o in outs) and "--tensor-model-parallel-size 2 spans 2 nodes of 1 ranks" in outs[0][2],
          f"TP across nodes: {[o[0] for o in outs]} {outs[0][2][-600:]}")
    env = rank_env(0, 2, free_port())
    env["RANK"] = "2"
    r = subprocess.run([TRAIN, *flags(data, 5)], capture_output=True, text=True, env=env, timeout=60)
    check(r.returncode != 0 and "RANK=2" in r.stderr, f"RANK=2 of WORLD_SIZE=2: exit {r.returncode}: {r.stderr[-400:]}")


def main():
    tmp = tempfile.mkdtemp(prefix="mds-train-dp-")
    try:
        prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
        data = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2"]
        equivalence(tmp, data)
        failures(tmp, data)
        one_rank_signal(tmp, data)
        usage_errors(tmp, data)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    testkit.finish()


if __name__ == "__main__":
    main()
