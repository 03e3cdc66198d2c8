"""Cross-check: mds::optim (driven through bin/optim_probe) against megatron-core's own classes.

On many random parameter sets it compares, value for value (bit-exact, doubles printed with 17 digits):
  1. learning rate and weight decay after every step: megatron.core.optimizer_param_scheduler.
     OptimizerParamScheduler on a dummy torch SGD optimizer (styles constant / linear / cosine /
     inverse-square-root, warmup from init_lr, fractional warmup), and a resume through
     state_dict() / load_state_dict() at a random step;
  2. global batch size and number of micro-batches per iteration, the samples per ramp step, the batch size
     at random consumed-sample counts and BS update_train_iters(): megatron.core.num_microbatches_calculator
     (Constant / RampupBatchsize calculators, consistency checks on); configurations it rejects at
     construction must be rejected by mds too;
  3. loss-scale sequences for random overflow patterns: megatron-core DynamicGradScaler (CPU tensors), and
     DeepSpeed's DynamicLossScaler (deepspeed/runtime/fp16/loss_scaler.py, loaded from an installed deepspeed or
     from a source tree named by MDS_DEEPSPEED_SRC; skipped with a note when neither exists);
  4. gradient norm (torch, float64), zero count (torch.count_nonzero) and clipping of random fp32 gradients.
Exits 77 (skipped) without torch or megatron-core. The probe comes from $MDS_BIN.
"""

import importlib.util
import inspect
import json
import math
import os
import random
import subprocess
import sys
import types

try:
    import torch
    from megatron.core import num_microbatches_calculator as nmc
    from megatron.core.optimizer.grad_scaler import DynamicGradScaler
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
except Exception as e:  # noqa: BLE001
    print(f"SKIP: torch / megatron-core not importable: {e}")
    sys.exit(77)

import logging

logging.disable(logging.CRITICAL)

PROBE = os.path.join(os.environ.get("MDS_BIN", os.path.join(os.getcwd(), "bin")), "optim_probe")
if not os.path.exists(PROBE):
    print(f"FAIL: {PROBE} not built")
    sys.exit(1)

rng = random.Random(20240611)
failures = []


def probe(lines):
    out = subprocess.run([PROBE], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout
    return [json.loads(x) for x in out.splitlines()]


def fail(what, case, want, got):
    failures.append(f"{what}: {case}\n  megatron: {want}\n  mds:      {got}")


def as_float(v):
    return float(v) if not isinstance(v, str) else float(v)


# ---------------------------------------------------------------- 1. learning rate
def random_lr_case():
    style = rng.choice(["constant", "linear", "cosine", "inverse-square-root"])
    decay = rng.choice([1, 7, 1000, 123_457, 126_953_125])
    if rng.random() < 0.3:
        warmup = rng.random() * 0.2 * decay  # --lr-warmup-fraction
        if warmup >= decay:
            warmup = 0.0
    else:
        warmup = rng.randrange(0, decay)
    max_lr = rng.choice([1e-4, 6e-5, 3e-4, rng.uniform(1e-6, 1e-2)])
    min_lr = rng.choice([0.0, max_lr / 10, rng.uniform(0, max_lr)])
    init_lr = rng.choice([0.0, 0.0, rng.uniform(0, max_lr)])
    wd_style = rng.choice(["constant", "linear", "cosine"])
    start_wd = rng.choice([0.0, 0.01, 0.1])
    end_wd = start_wd if wd_style == "constant" else start_wd + rng.choice([0.0, 0.05, 0.1])
    wd_steps = rng.choice([1, decay, 2 * decay])
    n = rng.randrange(1, 60)
    gbs = rng.choice([1, 16, 512, 2048])
    total = decay * rng.uniform(0.5, 1.5)
    incs = []
    for _ in range(n):
        incs.append(max(1, int(rng.choice([gbs, total / n, rng.uniform(1, 2 * total / n)]))))
    save_at = rng.randrange(0, n + 1)
    return dict(style=style, decay=decay, warmup=warmup, max_lr=max_lr, min_lr=min_lr, init_lr=init_lr,
                wd_style=wd_style, start_wd=start_wd, end_wd=end_wd, wd_steps=wd_steps, increments=incs,
                save_at=save_at)


def megatron_sched(c):
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=0.0)
    return OptimizerParamScheduler(
        opt, init_lr=c["init_lr"], max_lr=c["max_lr"], min_lr=c["min_lr"], lr_warmup_steps=c["warmup"],
        lr_decay_steps=c["decay"], lr_decay_style=c["style"], start_wd=c["start_wd"], end_wd=c["end_wd"],
        wd_incr_steps=c["wd_steps"], wd_incr_style=c["wd_style"], use_checkpoint_opt_param_scheduler=False,
        override_opt_param_scheduler=False), opt


def megatron_lr(c):
    sched, opt = megatron_sched(c)
    lr = [opt.param_groups[0]["lr"]]
    wd = [opt.param_groups[0]["weight_decay"]]
    sd = sched.state_dict()
    for i, inc in enumerate(c["increments"]):
        sched.step(inc)
        lr.append(opt.param_groups[0]["lr"])
        wd.append(opt.param_groups[0]["weight_decay"])
        if i + 1 == c["save_at"]:
            sd = dict(sched.state_dict())
    res, ropt = megatron_sched(c)
    res.load_state_dict(sd)
    resumed = [ropt.param_groups[0]["lr"]]
    for inc in c["increments"][c["save_at"]:]:
        res.step(inc)
        resumed.append(ropt.param_groups[0]["lr"])
    return lr, wd, resumed


def lr_line(c):
    return (f"lr init_lr={c['init_lr']!r} max_lr={c['max_lr']!r} min_lr={c['min_lr']!r} warmup={c['warmup']!r} "
            f"decay={c['decay']} style={c['style']} start_wd={c['start_wd']!r} end_wd={c['end_wd']!r} "
            f"wd_steps={c['wd_steps']} wd_style={c['wd_style']} increments={','.join(map(str, c['increments']))} "
            f"save_at={c['save_at']}")


lr_cases = [random_lr_case() for _ in range(400)]
# Hand-picked edges: n == W exactly, n == D exactly, no warmup.
lr_cases.append(dict(style="cosine", decay=1000, warmup=100, max_lr=1e-4, min_lr=1e-5, init_lr=0.0, wd_style="linear",
                     start_wd=0.0, end_wd=0.1, wd_steps=1000, increments=[50, 50, 400, 500, 1], save_at=2))
lr_cases.append(dict(style="inverse-square-root", decay=10**9, warmup=0, max_lr=1e-3, min_lr=0.0, init_lr=0.0,
                     wd_style="constant", start_wd=0.1, end_wd=0.1, wd_steps=1, increments=[1, 3, 1000, 10**6],
                     save_at=3))
for c, got in zip(lr_cases, probe([lr_line(c) for c in lr_cases])):
    want_lr, want_wd, want_res = megatron_lr(c)
    if "error" in got:
        fail("lr", c, "ok", got["error"])
        continue
    if [as_float(x) for x in got["lr"]] != want_lr:
        fail("lr", c, want_lr, got["lr"])
    if [as_float(x) for x in got["wd"]] != want_wd:
        fail("weight decay", c, want_wd, got["wd"])
    if [as_float(x) for x in got["resumed_lr"]] != want_res:
        fail("lr after resume", c, want_res, got["resumed_lr"])
print(f"lr: {len(lr_cases)} schedules compared")


# ---------------------------------------------------------------- 2. micro-batches
def megatron_mb(c):
    if c.get("start") is None:
        calc = nmc.ConstantNumMicroBatchesCalculator(c["gbs"], c["mbs"], c["dp"], False, 0)
    else:
        calc = nmc.RampupBatchsizeNumMicroBatchesCalculator(c["gbs"], c["mbs"], c["dp"], False, 0, c["start"],
                                                            c["incr"], c["samples"])
    gbs, nmb = [], []
    consumed = 0
    for _ in range(c["iters"]):
        calc.update(consumed, True)
        gbs.append(calc.get_current_global_batch_size())
        nmb.append(calc.get())
        consumed += calc.get_current_global_batch_size()
    at = []
    for x in c["consumed"]:
        calc.update(x, False)
        at.append(calc.get_current_global_batch_size())
    # BS megatron/training.py update_train_iters().
    if c.get("start") is None:
        train_iters = c["train_samples"] // c["gbs"]
    else:
        iterations, consumed = 0, 0
        while consumed <= c["samples"]:
            calc.update(consumed, False)
            consumed += calc.get_current_global_batch_size()
            iterations += 1
        train_iters = iterations + (c["train_samples"] - consumed) // c["gbs"]
    per = getattr(calc, "rampup_samples_per_increment", 0.0)
    return dict(gbs=gbs, nmb=nmb, at=at, per_incr=per, train_iters=train_iters)


def random_mb_case(valid):
    mbs, dp = rng.choice([1, 2, 4]), rng.choice([1, 2, 8, 16, 48])
    m = mbs * dp
    c = dict(mbs=mbs, dp=dp, iters=rng.randrange(1, 300))
    if rng.random() < 0.25:
        c["gbs"] = m * rng.randrange(1, 64) + (0 if valid else rng.randrange(1, m + 1) % m or 1)
    else:
        start, incr = m * rng.randrange(1, 8), m * rng.randrange(1, 8)
        k = rng.randrange(1, 70)
        c.update(start=start, incr=incr, gbs=start + incr * k, samples=rng.choice([1, 1000, 5_000_000, rng.randrange(1, 10**6)]))
        if not valid:
            c["gbs"] += rng.randrange(1, incr) if incr > 1 else 0
            if c["gbs"] == start + incr * k:
                c["incr"] = incr + 1 if (c["gbs"] - start) % (incr + 1) else incr + 2
    c["train_samples"] = rng.randrange(0, 10**7)
    c["consumed"] = [rng.randrange(0, 2 * c.get("samples", 1000) + 2) for _ in range(20)]
    return c


def mb_line(c):
    s = f"mb gbs={c['gbs']} mbs={c['mbs']} dp={c['dp']} iters={c['iters']} train_samples={c['train_samples']}"
    s += f" consumed={','.join(map(str, c['consumed']))}"
    if c.get("start") is not None:
        s += f" start={c['start']} incr={c['incr']} samples={c['samples']}"
    return s


mb_cases = [random_mb_case(True) for _ in range(300)] + [random_mb_case(False) for _ in range(100)]
mb_cases.append(dict(gbs=1024, mbs=1, dp=16, start=16, incr=16, samples=5_000_000, iters=2000,
                     train_samples=300_000_000, consumed=[79365, 79366, 5_000_000, 5_000_001]))
compared = rejected = 0
for c, got in zip(mb_cases, probe([mb_line(c) for c in mb_cases])):
    try:
        want = megatron_mb(c)
    except (AssertionError, ZeroDivisionError) as e:
        rejected += 1
        if "error" not in got:
            fail("micro-batches (megatron rejects)", c, repr(e), got)
        continue
    if "error" in got:
        fail("micro-batches", c, want, got["error"])
        continue
    compared += 1
    for key in ("gbs", "nmb", "at", "train_iters"):
        if got[key] != want[key]:
            fail(f"micro-batches {key}", c, want[key], got[key])
    if as_float(got["per_incr"]) != float(want["per_incr"]):
        fail("samples per increment", c, want["per_incr"], got["per_incr"])
print(f"micro-batches: {compared} configurations compared, {rejected} rejected by both")
tr1 = probe([mb_line(mb_cases[-1])])[0]
assert int(as_float(tr1["per_incr"])) == 79365, tr1["per_incr"]


# ---------------------------------------------------------------- 3. loss scalers
def random_pattern():
    p = rng.choice([0.02, 0.1, 0.3, 0.6])
    return "".join("1" if rng.random() < p else "0" for _ in range(rng.randrange(1, 400)))


_tensor = torch.tensor


def cpu_tensor(*a, **k):
    k.pop("device", None)
    return _tensor(*a, **k)


meg_lines, meg_cases = [], []
for _ in range(300):
    c = dict(initial=float(2 ** rng.randrange(0, 33)), min=float(rng.choice([1, 2, 0.5, 3])),
             growth=rng.choice([2.0, 1.5, 4.0]), backoff=rng.choice([0.5, 0.25, 0.75]),
             interval=rng.randrange(1, 50), hysteresis=rng.randrange(1, 5), overflows=random_pattern())
    c["min"] = min(c["min"], c["initial"])
    meg_cases.append(c)
    meg_lines.append("meg_scaler " + " ".join(f"{k}={v!r}" if isinstance(v, float) else f"{k}={v}" for k, v in c.items()))
for c, got in zip(meg_cases, probe(meg_lines)):
    torch.tensor = cpu_tensor
    try:
        s = DynamicGradScaler(c["initial"], c["min"], c["growth"], c["backoff"], c["interval"], c["hysteresis"])
    finally:
        torch.tensor = _tensor
    scale, growth, hyst = [], [], []
    for ch in c["overflows"]:
        s.update(ch == "1")
        scale.append(float(s.scale.item()))
        growth.append(s._growth_tracker)
        hyst.append(s._hysteresis_tracker)
    if [as_float(x) for x in got["scale"]] != scale or got["growth"] != growth or got["hyst"] != hyst:
        fail("DynamicGradScaler", c, (scale, growth, hyst), got)
    if as_float(got["inv_scale"]) != float(s.inv_scale.item()):
        fail("inv_scale", c, float(s.inv_scale.item()), got["inv_scale"])
    if got["skipped"] != c["overflows"].count("1"):
        fail("skipped iterations", c, c["overflows"].count("1"), got["skipped"])
print(f"megatron-core DynamicGradScaler: {len(meg_cases)} overflow patterns compared")


def load_deepspeed_scaler():
    roots = []
    if os.environ.get("MDS_DEEPSPEED_SRC"):
        roots.append(os.environ["MDS_DEEPSPEED_SRC"])
    spec = importlib.util.find_spec("deepspeed")
    if spec is not None and spec.submodule_search_locations:
        roots.extend(os.path.dirname(r) for r in spec.submodule_search_locations)
    for root in roots:
        path = os.path.join(root, "deepspeed", "runtime", "fp16", "loss_scaler.py")
        if not os.path.exists(path):
            continue
        # Load the one file without importing the deepspeed package (which needs CUDA tooling): stub the
        # names it imports (rank 0, silent logging, a config base class); update_scale uses none of the rest.
        names = ["deepspeed", "deepspeed.comm", "deepspeed.utils", "deepspeed.runtime", "deepspeed.runtime.config_utils",
                 "deepspeed.runtime.utils"]
        stubs = {n: types.ModuleType(n) for n in names}
        stubs["deepspeed.comm"].get_rank = lambda: 0
        stubs["deepspeed"].comm = stubs["deepspeed.comm"]
        stubs["deepspeed"].__path__ = []
        stubs["deepspeed.runtime"].__path__ = []
        stubs["deepspeed.utils"].logger = logging.getLogger("deepspeed-stub")
        stubs["deepspeed.utils"].log_dist = lambda *a, **k: None
        stubs["deepspeed.runtime.config_utils"].DeepSpeedConfigObject = type("DeepSpeedConfigObject", (object,), {})
        stubs["deepspeed.runtime.utils"].has_inf_or_nan = lambda *a, **k: False
        saved = {k: sys.modules.get(k) for k in stubs}
        sys.modules.update(stubs)
        try:
            s = importlib.util.spec_from_file_location("ds_loss_scaler", path)
            module = importlib.util.module_from_spec(s)
            s.loader.exec_module(module)
            return module, path
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
    return None, None


ds, ds_path = load_deepspeed_scaler()
if ds is None:
    print("note: DeepSpeed's loss_scaler.py not found (pip install deepspeed or set MDS_DEEPSPEED_SRC); "
          "DeepSpeed scaler not cross-checked")
else:
    # Recent DeepSpeed grows one clean iteration later than the DeepSpeed BigScience ran (loss_scaler.h).
    stable = 1 if "stable_interval" in open(ds_path).read() else 0
    ds_lines, ds_cases = [], []
    for _ in range(300):
        c = dict(init=float(2 ** rng.randrange(0, 33)), window=rng.randrange(1, 50), min=float(rng.choice([1, 2, 4, 3])),
                 hysteresis=rng.randrange(1, 5), consecutive=rng.randrange(0, 2), raise_=rng.randrange(0, 2),
                 overflows=random_pattern())
        ds_cases.append(c)
        ds_lines.append(f"ds_scaler init={c['init']!r} window={c['window']} min={c['min']!r} "
                        f"hysteresis={c['hysteresis']} consecutive={c['consecutive']} raise={c['raise_']} "
                        f"stable={stable} overflows={c['overflows']}")
    for c, got in zip(ds_cases, probe(ds_lines)):
        kwargs = dict(init_scale=c["init"], scale_window=c["window"], min_scale=c["min"], delayed_shift=c["hysteresis"],
                      consecutive_hysteresis=bool(c["consecutive"]), raise_error_at_min_scale=bool(c["raise_"]))
        if "scale_factor" in inspect.signature(ds.DynamicLossScaler.__init__).parameters:
            kwargs["scale_factor"] = 2.0  # a parameter before DeepSpeed 0.17 or so, fixed at 2.0 since
        s = ds.DynamicLossScaler(**kwargs)
        scale, hyst, error_at = [], [], None
        for i, ch in enumerate(c["overflows"]):
            try:
                s.update_scale(ch == "1")
            except Exception:  # noqa: BLE001
                error_at = i
                break
            scale.append(float(s.cur_scale))
            hyst.append(s.cur_hysteresis)
        if [as_float(x) for x in got["scale"]] != scale or got["hyst"] != hyst or got["error_at"] != error_at:
            fail("DeepSpeed DynamicLossScaler", c, (scale, hyst, error_at), got)
    print(f"DeepSpeed DynamicLossScaler ({ds_path}, stable-interval growth: {bool(stable)}): "
          f"{len(ds_cases)} overflow patterns compared")


# ---------------------------------------------------------------- 4. clipping
clip_cases, clip_lines = [], []
for _ in range(200):
    spans = []
    for _ in range(rng.randrange(1, 5)):
        scale = rng.choice([1e-3, 1.0, 50.0])
        spans.append([0.0 if rng.random() < 0.2 else float(torch.tensor(rng.gauss(0, scale), dtype=torch.float32))
                      for _ in range(rng.randrange(1, 40))])
    max_norm = rng.choice([0.0, 0.5, 1.0, 100.0])
    clip_cases.append((spans, max_norm))
    clip_lines.append(f"clip max_norm={max_norm!r} data=" + ";".join(",".join(repr(v) for v in s) for s in spans))
for (spans, max_norm), got in zip(clip_cases, probe(clip_lines)):
    flat = torch.tensor([v for s in spans for v in s], dtype=torch.float32)
    want_norm = float(torch.linalg.vector_norm(flat.double()))
    norm = as_float(got["norm"])
    if not math.isclose(norm, want_norm, rel_tol=1e-12, abs_tol=1e-300):
        fail("grad norm", spans, want_norm, norm)
    zeros = flat.numel() - int(torch.count_nonzero(flat))
    if got["zeros"] != zeros:
        fail("num zeros", spans, zeros, got["zeros"])
    coeff = max_norm / (norm + 1.0e-6)
    want = flat * torch.tensor(coeff, dtype=torch.float32) if max_norm > 0 and coeff < 1.0 else flat
    if [as_float(x) for x in got["clipped"]] != [float(v) for v in want]:
        fail("clipped grads", (spans, max_norm), want.tolist(), got["clipped"])
print(f"clipping: {len(clip_cases)} gradient sets compared")

if failures:
    for f in failures[:20]:
        print("FAIL", f)
    print(f"{len(failures)} mismatches")
    sys.exit(1)
print("OK")
