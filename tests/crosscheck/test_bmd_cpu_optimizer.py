#!/usr/bin/env python3
"""ZeRO-Offload's optimizer half (issue 18): mds-train --cpu-optimizer, and the DeepSpeed config's
zero_optimization.offload_optimizer {device: cpu}, against BigScience's real Megatron-DeepSpeed (bmd_harness.py).

What the reference does (read from the third_party tree and DeepSpeed 0.19): BMD's own `--cpu-optimizer` raises
NotImplementedError('need to add cpu adam') in get_megatron_optimizer, and `--cpu_torch_adam` is parsed and read
nowhere. A Megatron-DeepSpeed run offloads its optimizer through the DeepSpeed config instead: ZeRO stage 1 with
offload_optimizer.device "cpu" keeps the fp32 partitions, Adam moments and gradient partitions on the host and
steps Megatron's own optimizer (apex FusedAdam, the harness's stand-in) there. DeepSpeed refuses a client optimizer
under offload unless the config says "zero_force_ds_cpu_optimizer": false (it would rather build DeepSpeedCPUAdam,
which BMD never asks for: it always passes its own optimizer), so the reference config sets that. The gradient norm
under offload is DeepSpeed's complete_grad_norm_calculation_for_cpu_offload (fp64 norms per partition, summed in
fp32 over the data-parallel ranks): the same value as without offload to ~1e-7.

On the tiny GPT of test_bmd_resume.py (2 layers, hidden 64, seq 64, micro-batch 2, global batch 4, 20 iterations,
the first launch stops at 10), in the CASES below (fp32 PP=1 on 2 ranks: DP=2, ZeRO-1, each rank offloading its
partition; PP=2 x DP=2 on 4 ranks; bf16 at DP=2), each:
  - the real program trains 10 iterations with offload; its own resume gives
    11..20; mds-train resumes the same checkpoint with the same flags and config and must log the same losses and
    grad norms (relative 1e-5 in fp32; bf16 with test_bmd_resume's 1e-3);
  - mds-train trains 10 iterations with offload; the real program and mds-train both resume that checkpoint and must
    agree (relative 1e-5); mds's checkpoint holds what the real one does (test_bmd_resume.compare_checkpoints:
    args, param_shapes, optimizer partitions' sizes and fragment names: offload writes the same layout);
  - (fp32) the same offload config without "zero_force_ds_cpu_optimizer": false stops the real program with DeepSpeed's
    ZeRO-Offload client-optimizer error (proof that the reference runs did offload: DeepSpeed logs "CPU Offload:
    True" at INFO, which these runs do not print);
  - mds-train resumes that checkpoint three ways: offload from the config, --cpu-optimizer with a config without
    offload, and no offload at all: the three curves are identical (the host step is the same computation).
Exits 77 without ../shared/third_party, the Python packages, or the mds binaries.
Runs: `MDS_BIN=build/bin .venv/bin/python tests/crosscheck/test_bmd_cpu_optimizer.py [fp32 pp2dp2 bf16]`."""
import copy
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bmd_harness  # noqa: E402
import test_bmd_resume as resume  # noqa: E402  (exits 77 when the binaries or the reference are missing)
import tiny_dataset  # noqa: E402
from bmd_harness import check  # noqa: E402

TOL = 1e-5


def offload_config(plain):
    cfg = copy.deepcopy(plain)
    cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    cfg["zero_force_ds_cpu_optimizer"] = False  # DeepSpeed's guard against a client optimizer under offload
    return cfg


def identical(what, runs, iterations):
    """Every run in `runs` (name: RunResult) logs exactly the same values at each iteration."""
    names = list(runs)
    base = resume.curve(runs[names[0]])
    for name in names[1:]:
        other = resume.curve(runs[name])
        for i in iterations:
            if not check(i in base and i in other, f"{what}: iteration {i} missing in {names[0]} or {name}"):
                return
            for k in ("lm loss", "grad norm", "learning rate"):
                check(base[i].get(k) == other[i].get(k),
                      f"{what}: iteration {i} {k}: {names[0]} {base[i].get(k)!r}, {name} {other[i].get(k)!r}")
    print(f"  {what}: {', '.join(names)} identical over iterations {iterations[0]}..{iterations[-1]}")


def same_states(what, a_root, b_root, step="global_step20"):
    """Two mds checkpoints (with and without offload) hold the same files, the same optimizer-file keys and equal
    tensors everywhere: offload changes where the states live during training, not what is saved."""
    import torch
    a_dir, b_dir = os.path.join(a_root, step), os.path.join(b_root, step)
    names = sorted(os.listdir(a_dir)) if os.path.isdir(a_dir) else []
    if not check(names and names == sorted(os.listdir(b_dir)) if os.path.isdir(b_dir) else False,
                 f"{what}: files {names} vs {sorted(os.listdir(b_dir)) if os.path.isdir(b_dir) else 'none'}"):
        return

    def tensors(obj, prefix=""):
        if torch.is_tensor(obj):
            yield prefix, obj
        elif isinstance(obj, dict):
            for k, v in obj.items():
                yield from tensors(v, f"{prefix}/{k}")
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                yield from tensors(v, f"{prefix}/{i}")

    count = 0
    for f in names:
        a, b = resume.load_torch(os.path.join(a_dir, f)), resume.load_torch(os.path.join(b_dir, f))
        if "optimizer_state_dict" in a:
            check(sorted(a["optimizer_state_dict"]) == sorted(b["optimizer_state_dict"]), f"{what} {f}: optimizer keys differ")
        ta, tb = dict(tensors({k: v for k, v in a.items() if k != "args"})), dict(tensors({k: v for k, v in b.items() if k != "args"}))
        check(sorted(ta) == sorted(tb), f"{what} {f}: tensors {sorted(set(ta) ^ set(tb))} in only one of them")
        for k in ta:
            if k in tb:
                count += 1
                check(ta[k].dtype == tb[k].dtype and torch.equal(ta[k], tb[k]), f"{what} {f}: {k} differs")
    print(f"  {what}: {len(names)} files, {count} tensors equal")


def offloaded(what, run, marker):
    check(any(marker in text for text in run.logs), f"{what}: no {marker!r} in its log: the optimizer was not offloaded")


# Cases: (TP, PP, ranks, extra flags, DeepSpeed config arguments, tolerance). fp32 at DP=2 (ZeRO-1 partitions on the
# host); pp2dp2: 4 ranks, the last stage's partitions hold the tied embeddings; bf16: ZeRO-1 with fp32 gradient
# accumulation (the harness README: what DeepSpeed 0.19 resumes), with test_bmd_resume's bf16 tolerance.
CASES = {
    "fp32": (1, 1, 2, [], {}, TOL),
    "pp2dp2": (1, 2, 4, [], {}, TOL),
    "bf16": (1, 1, 2, ["--bf16"], {"bf16": True, "data_types": {"grad_accum_dtype": "fp32"}}, 1e-3),
}

# pp2dp2 (4 ranks on this 2-core machine: ~3 minutes alone) runs by name, to keep the default under ~5 minutes.
DEFAULT = ["fp32", "bf16"]


def run_case(tree, tmp, data, vocab, merges, name):
    tp, pp, n, extra, ds_extra, tol = CASES[name]
    plain = bmd_harness.ds_config(micro_batch_size=2, global_batch_size=4, zero_stage=1, clip=1.0, **ds_extra)
    ds = offload_config(plain)
    flags = lambda ck: resume.flags(data, vocab, merges, ck, tp, pp) + extra  # noqa: E731
    its = list(range(11, 21))
    d = os.path.join(tmp, name)
    os.makedirs(d)

    # The real program first, offloaded; both resume its checkpoint.
    ck = os.path.join(d, "real")
    r1 = tree.run(flags(ck), nproc=n, ds_config=ds, name=name + "-real1", timeout=400)
    if not check(r1.ok, f"{name}: real first launch with offload failed (rc {r1.returncode})\n{r1.tail()}"):
        return
    resume.copy(ck, ck + "-own")
    resume.copy(ck, ck + "-mds")
    r2 = tree.run(flags(ck + "-own"), nproc=n, ds_config=ds, name=name + "-real2", timeout=400)
    m = resume.run_mds(flags(ck + "-mds"), os.path.join(d, "run-mds-from-real"), name + "-mds-from-real", ds, n)
    print(f"{name}: real 10 ({r1.seconds:.1f} s), real resumes ({r2.seconds:.1f} s), mds resumes ({m.seconds:.1f} s)")
    if check(r2.ok, f"{name}: real resume failed\n{r2.tail()}") and \
            check(m.ok, f"{name}: mds-train resuming the real checkpoint failed (rc {m.returncode})\n{m.tail()}"):
        offloaded(name + " mds resuming the real checkpoint", m, "optimizer offload:")
        resume.compare(f"{name} offload: mds resumes real", m, r2, its, tol=tol)

    # mds-train first, offloaded; the real program and mds-train (three ways) resume its checkpoint.
    ck = os.path.join(d, "mds")
    m1 = resume.run_mds(flags(ck), os.path.join(d, "run-mds1"), name + "-mds1", ds, n)
    if not check(m1.ok, f"{name}: mds-train first launch with offload failed (rc {m1.returncode})\n{m1.tail()}"):
        return
    offloaded(name + " mds first launch", m1, "optimizer offload:")
    for suffix in ("-own", "-flag", "-none", "-real"):
        resume.copy(ck, ck + suffix)
    m2 = resume.run_mds(flags(ck + "-own"), os.path.join(d, "run-mds2"), name + "-mds2", ds, n)
    mf = resume.run_mds(flags(ck + "-flag") + ["--cpu-optimizer"], os.path.join(d, "run-mds-flag"), name + "-mds-flag",
                        plain, n)
    mn = resume.run_mds(flags(ck + "-none"), os.path.join(d, "run-mds-none"), name + "-mds-none", plain, n)
    r = tree.run(flags(ck + "-real"), nproc=n, ds_config=ds, name=name + "-real-from-mds", timeout=400)
    if not extra:  # bf16 at ZeRO-1: mds's optimizer files lack DeepSpeed's ZeRO keys with or without offload (report)
        resume.compare_checkpoints(name + " offload", os.path.join(d, "real"), ck, tp, pp, n)
    print(f"{name}: mds 10 ({m1.seconds:.1f} s), mds resumes ({m2.seconds:.1f} s; --cpu-optimizer {mf.seconds:.1f} s, "
          f"no offload {mn.seconds:.1f} s), real resumes ({r.seconds:.1f} s)")
    ok = all(check(x.ok, f"{name}: {what} failed (rc {x.returncode})\n{x.tail()}")
             for what, x in (("mds resume", m2), ("mds resume --cpu-optimizer", mf), ("mds resume without offload", mn)))
    if ok:
        offloaded(name + " mds resume with --cpu-optimizer", mf, "optimizer offload:")
        check(not any("optimizer offload:" in t for t in mn.logs), f"{name}: mds resume without offload says it offloaded")
        identical(f"{name} mds with and without offload",
                  {"offload_optimizer": m2, "--cpu-optimizer": mf, "no offload": mn}, its)
        same_states(f"{name} checkpoints with and without offload", ck + "-own", ck + "-none")
    if check(r.ok, f"{name}: the real program resuming the mds-train checkpoint failed (rc {r.returncode})\n{r.tail()}") \
            and ok:
        resume.compare(f"{name} offload: real resumes mds", r, m2, its, tol=tol)
    if name == "fp32":
        guard_proves_offload(tree, d, flags, plain)


def main():
    names = sys.argv[1:] or DEFAULT
    tmp = tempfile.mkdtemp(prefix="bmd-cpu-optimizer-")
    started = time.time()
    build_dir = os.environ.get("MDS_BUILD_DIR")
    cache = os.path.join(build_dir, "crosscheck-cache") if build_dir else None
    data, vocab, merges = tiny_dataset.make(tmp, resume.BIN, resume.SOURCE, 512)
    tree = bmd_harness.BmdTree(os.path.join(tmp, "bmd"), source_dir=resume.SOURCE, cache_dir=cache)
    for name in names:
        run_case(tree, tmp, data, vocab, merges, name)
    return finish(tmp, started)


def guard_proves_offload(tree, tmp, flags, plain):
    """DeepSpeed logs "CPU Offload: True" at INFO only (its logger stays at WARNING here), so the proof that the
    reference runs above offloaded is its guard: the same offload config without "zero_force_ds_cpu_optimizer":
    false must stop deepspeed.initialize with the ZeRO-Offload client-optimizer error."""
    cfg = offload_config(plain)
    del cfg["zero_force_ds_cpu_optimizer"]
    g = tree.run(flags(os.path.join(tmp, "guard")), nproc=2, ds_config=cfg, name="real-guard", timeout=300)
    text = "\n".join(g.logs)
    check(not g.ok and "ZeRO-Offload with a client provided optimizer" in text,
          f"the real program with offload_optimizer and DeepSpeed's default guard: expected the ZeRO-Offload client "
          f"optimizer error (rc {g.returncode})\n{g.tail(10)}")
    print(f"real program without zero_force_ds_cpu_optimizer: refused as expected ({g.seconds:.1f} s)")


def finish(tmp, started):
    bmd_harness.finish(started, tmp)


if __name__ == "__main__":
    main()
