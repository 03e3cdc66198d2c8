#!/usr/bin/env python3
"""mds-train checkpoints, checked with independent code (torch.load, DeepSpeed's DeepSpeedCheckpoint, Python's
random and numpy):
  - bit-exact resume: N iterations straight and k + (N-k) with a stop in between (the --exit-interval exit path
    saves) give bitwise identical tensors in every checkpoint file (weights, fp32 masters, Adam moments, RNG
    states) and identical iteration and validation lines after the resume; for fp32 with dropout, BLOOM-style
    bf16 (ALiBi, embedding LayerNorm), fp16 with DeepSpeed's loss scaler and fp16 with Megatron's;
  - every file loads with torch.load; DeepSpeedCheckpoint finds TP 1, PP 1 and the layer files; `args` is an
    argparse.Namespace carrying consumed samples and tokens; random_rng_state / np_rng_state are what
    random.seed / np.random.seed give; the optimizer file has BMD's three groups and fragment_address mappings
    that cover every parameter; the embedding LayerNorm is saved once, in layer_01;
  - --exit-duration-in-mins and SIGUSR1 save before exiting, and the carbon tracker writes a row at the save;
  - kill -9 at random moments of a run saving every iteration, with asynchronous and synchronous saves in turn:
    `latest` always names a complete tag that loads and resumes (some kills land inside a save);
  - mds-ckpt-shrink then resume: without --no-load-optim an error says to use it; with it the validation loss
    equals the full checkpoint's, and training goes on;
  - checkpoints written the way BigScience's Megatron-DeepSpeed saved them (bmd_checkpoint.py: Namespace args,
    OrderedDicts, bf16, the BMD layer numbering, bf16 optimizer shards with fragment_address mappings; GPT and
    BLOOM shapes) resume in mds-train: weights and fp32 masters come back bitwise, iteration, consumed samples
    and tokens and the LR schedule continue where the file says;
  - --finetune starts at iteration 0 from the loaded weights; --load of a folder without `latest` starts from
    scratch; a shape mismatch and missing RNG states are errors naming the file and the flag to use.
Exits 77 without mds-train (no LibTorch) or without torch in the venv."""
import glob
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
BIN = os.environ.get("MDS_BIN", "build/bin")
TRAIN = os.path.join(BIN, "mds-train")
SHRINK = os.path.join(BIN, "mds-ckpt-shrink")
if not os.path.exists(TRAIN):
    print("SKIP: mds-train not built (no LibTorch)")
    sys.exit(77)
try:
    import numpy as np
    import torch
except Exception as e:  # noqa: BLE001
    print(f"SKIP: torch/numpy not importable: {e}")
    sys.exit(77)

import bmd_checkpoint  # noqa: E402,F401  (stand-in megatron.enums so torch.load resolves the Namespace's enum)
import tiny_dataset  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def run(args, **kw):
    return subprocess.run([TRAIN, *args], capture_output=True, text=True, **kw)


def model_flags(iters, extra=()):
    return ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
            "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "4",
            "--train-iters", str(iters), "--lr", "3e-3", "--min-lr", "3e-4", "--lr-decay-style", "cosine",
            "--lr-warmup-iters", "3", "--weight-decay", "0.1", "--log-interval", "1", "--eval-interval", "3",
            "--eval-iters", "2", "--seed", "42", "--threads", "2", *extra]


def lines_after(out, first_iteration):
    """Iteration lines from `first_iteration` on without the timing fields, and the validation lines."""
    keep = []
    for line in out.splitlines():
        m = re.match(r"^ iteration +(\d+)/", line)
        if m and int(m.group(1)) >= first_iteration:
            keep.append(re.sub(r"(elapsed time per iteration \(s\)|samples per second|TFLOPs|tokens per second): [0-9.]+",
                               r"\1: *", line))
        elif line.startswith(("valid loss at ", "test loss at ")):
            m = re.search(r"iteration (\d+)", line)
            if not m or int(m.group(1)) >= first_iteration:
                keep.append(line)
    return keep


def tensors(path):
    """Every tensor in a torch.load'ed file, by path inside the object."""
    out = {}

    def walk(x, where):
        if isinstance(x, torch.Tensor):
            out[where] = x
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{where}.{k}")
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{where}[{i}]")
        elif hasattr(x, "__dict__") and not isinstance(x, type):
            walk(vars(x), where)
    walk(torch.load(path, weights_only=False, map_location="cpu"), "")
    return out


def same_checkpoint(a, b, what):
    fa = sorted(os.listdir(a))
    fb = sorted(os.listdir(b))
    if not check(fa == fb, f"{what}: files differ: {fa} vs {fb}"):
        return
    n = 0
    for name in fa:
        ta, tb = tensors(os.path.join(a, name)), tensors(os.path.join(b, name))
        check(ta.keys() == tb.keys(), f"{what}: {name}: tensor sets differ")
        for k in ta:
            n += 1
            same = k in tb and ta[k].dtype == tb[k].dtype and ta[k].shape == tb[k].shape and \
                torch.equal(ta[k].view(torch.uint8) if ta[k].dtype != torch.bool else ta[k],
                            tb[k].view(torch.uint8) if tb[k].dtype != torch.bool else tb[k])
            check(same, f"{what}: {name}{k} differs after the resume")
    return n


def resume_case(tmp, data, name, extra, ds_config=None):
    flags = list(extra)
    if ds_config is not None:
        cfg = os.path.join(tmp, name + ".json")
        with open(cfg, "w") as f:
            json.dump(ds_config, f)
        flags += ["--deepspeed", "--deepspeed_config", cfg]
    straight, parts = os.path.join(tmp, name + "-straight"), os.path.join(tmp, name + "-parts")
    a = run(data + model_flags(8, flags + ["--save", straight, "--save-interval", "8"]))
    b1 = run(data + model_flags(8, flags + ["--save", parts, "--save-interval", "100", "--exit-interval", "5"]))
    b2 = run(data + model_flags(8, flags + ["--save", parts, "--save-interval", "8", "--load", parts]))
    for r, what in ((a, "straight"), (b1, "first part"), (b2, "resumed part")):
        if not check(r.returncode == 0, f"{name}: {what} exited {r.returncode}: {r.stderr[-1500:]}"):
            return None
    check(os.path.isdir(os.path.join(parts, "global_step5")), f"{name}: the exit interval did not save global_step5")
    check("successfully loaded checkpoint" in b2.stdout + b2.stderr, f"{name}: no load message")
    la, lb = lines_after(a.stdout, 6), lines_after(b2.stdout, 6)
    check(len(la) == 3 + 3 and la == lb, f"{name}: lines after the resume differ:\n" + "\n".join(la) + "\n---\n" + "\n".join(lb))
    n = same_checkpoint(os.path.join(straight, "global_step8"), os.path.join(parts, "global_step8"), name)
    print(f"{name}: resumed at 5 of 8, {n} tensors bitwise equal, {len(la)} log lines equal")
    return os.path.join(straight, "global_step8")


def structure(step_dir, bf16, embed_ln):
    files = sorted(os.listdir(step_dir))
    optim = ("bf16_" if bf16 else "") + "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    expect = ["layer_01-model_00-model_states.pt", "layer_03-model_00-model_states.pt",
              "layer_04-model_00-model_states.pt", "layer_06-model_00-model_states.pt",
              "mp_rank_00_model_states.pt", optim]
    check(files == sorted(expect), f"{step_dir}: files {files}, expected {sorted(expect)}")
    for f in files:
        torch.load(os.path.join(step_dir, f), weights_only=False, map_location="cpu")  # raises on a bad file
    mp = torch.load(os.path.join(step_dir, "mp_rank_00_model_states.pt"), weights_only=False)
    args = mp["args"]
    check(type(args).__module__ == "argparse" and type(args).__name__ == "Namespace", f"args is {type(args)}")
    check(args.consumed_train_samples == 8 * 4 and mp["iteration"] == 8 and mp["global_steps"] == 8,
          f"consumed {args.consumed_train_samples}, iteration {mp['iteration']}")
    check(mp["checkpoint_version"] == 3.0 and mp["mp_world_size"] == 1 and mp["module"] is None, "DeepSpeed keys")
    check(args.consumed_train_tokens == 8 * 4 * 32 and mp["tokens"] == 8 * 4 * 32, f"tokens {mp['tokens']}")
    check(isinstance(mp["sparse_tensor_module_names"], set), "sparse_tensor_module_names is not a set")
    random.seed(42)
    check(mp["random_rng_state"] == random.getstate(), "random_rng_state is not random.seed(42)'s")
    np.random.seed(42)
    ref = np.random.get_state()
    got = mp["np_rng_state"]
    check(got[0] == ref[0] and np.array_equal(got[1], ref[1]) and got[1].dtype == ref[1].dtype and tuple(got[2:]) == ref[2:],
          "np_rng_state is not np.random.seed(42)'s")
    check(mp["torch_rng_state"].dtype == torch.uint8 and mp["torch_rng_state"].numel() == torch.get_rng_state().numel(),
          "torch_rng_state is not a CPU generator state")
    layer01 = torch.load(os.path.join(step_dir, "layer_01-model_00-model_states.pt"), weights_only=False)
    check(type(layer01).__name__ == "OrderedDict", "layer file is not an OrderedDict")
    has_norm = [f for f in files if f.startswith("layer_") and any(
        "word_embeddings.norm" in k for k in torch.load(os.path.join(step_dir, f), weights_only=False))]
    check(has_norm == (["layer_01-model_00-model_states.pt"] if embed_ln else []),
          f"embedding LayerNorm saved in {has_norm}")
    # The optimizer file: BMD's 3 groups, mappings covering every parameter exactly once, masters = weights.
    osd = torch.load(os.path.join(step_dir, optim), weights_only=False)["optimizer_state_dict"]
    maps = osd["param_slice_mappings"]
    check(len(maps) == 3 and len(osd["single_partition_of_fp32_groups"]) == 3, "not 3 param groups")
    names = [n for m in maps for n in m]
    shapes = {n: s for g in mp["param_shapes"] for n, s in g.items()}
    check(sorted(names) == sorted(shapes) and len(names) == len(set(names)), "mappings and param_shapes disagree")
    weights = {}
    for f in files:
        if f.startswith("layer_"):
            idx = int(f[6:8])
            for k, v in torch.load(os.path.join(step_dir, f), weights_only=False).items():
                weights["tied_modules.embed." + k if idx == 1 else f"{idx}.{k}"] = v
    for g, m in enumerate(maps):
        flat = osd["single_partition_of_fp32_groups"][g]
        for n, frag in m.items():
            master = flat[frag.start:frag.start + frag.numel].view(shapes[n])
            check(torch.equal(master.to(weights[n].dtype), weights[n]), f"master of {n} does not round to the weight")
    try:
        from deepspeed.checkpoint import DeepSpeedCheckpoint
    except Exception as e:  # noqa: BLE001
        print(f"deepspeed not importable ({e}); DeepSpeedCheckpoint check skipped")
        return
    ds = DeepSpeedCheckpoint(step_dir)
    check(ds.tp_degree == 1 and ds.pp_degree == 1 and ds.dp_degree == 1, f"DeepSpeedCheckpoint degrees {ds.tp_degree}")
    check(ds.layer_keys == ["layer_01", "layer_03", "layer_04", "layer_06"], f"layer keys {ds.layer_keys}")
    check(sorted(ds.get_embedding_state(0).keys()) == sorted(k for k in layer01), "embedding state differs")
    print(f"{step_dir}: torch.load, DeepSpeedCheckpoint, Namespace, RNG states, optimizer mappings OK")


def exit_paths(tmp, data):
    # --exit-duration-in-mins 0: the first iteration is past the limit; the checkpoint is saved and the carbon row written.
    ck, carbon = os.path.join(tmp, "dur"), os.path.join(tmp, "carbon")
    r = run(data + model_flags(8, ["--save", ck, "--save-interval", "100", "--exit-duration-in-mins", "0",
                                   "--codecarbon-dir", carbon]))
    check(r.returncode == 0 and open(os.path.join(ck, "latest")).read() == "global_step1",
          f"exit duration did not save global_step1: {r.stderr[-500:]}")
    rows = open(os.path.join(carbon, "emissions.csv")).read().splitlines()
    check(len(rows) >= 3, f"emissions.csv has {len(rows) - 1} rows; expected one at the save and one at the end")
    # SIGUSR1: stop after the current iteration, saved.
    ck = os.path.join(tmp, "usr1")
    p = subprocess.Popen([TRAIN, *data, *model_flags(100000, ["--save", ck, "--save-interval", "100000", "--eval-interval", "100000"])],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    p.send_signal(signal.SIGUSR1)
    out, err = p.communicate(timeout=120)
    latest = open(os.path.join(ck, "latest")).read() if os.path.exists(os.path.join(ck, "latest")) else ""
    last = re.findall(r"^ iteration +(\d+)/", out, re.M)
    check(p.returncode == 0 and last and latest == f"global_step{last[-1]}",
          f"SIGUSR1: rc {p.returncode}, latest {latest!r}, last iteration {last[-1:]}: {err[-300:]}")
    print(f"exit paths: duration and SIGUSR1 saved ({latest})")


def kill_during_save(tmp, data):
    """SIGKILL at random moments while every iteration saves a checkpoint of a larger model."""
    ck = os.path.join(tmp, "kill")
    flags = model_flags(100000, ["--hidden-size", "256", "--num-layers", "4", "--save", ck, "--save-interval", "1",
                                 "--eval-interval", "100000", "--log-interval", "100000"])
    rng = random.Random(7)
    in_save = tries = 0
    while tries < 40 and (tries < 8 or in_save < 2):
        tries += 1
        # Asynchronous saves (the default) on odd tries, synchronous ones on even tries: both commits are
        # exercised (the asynchronous one's background write: tests/integration/test_async_save.py).
        mode = [] if tries % 2 else ["--no-async-save"]
        p = subprocess.Popen([TRAIN, *data, *flags, *mode] + (["--load", ck] if os.path.exists(ck) else []),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        # Wait for the first save of this run, then kill at a random moment.
        t0 = time.time()
        # (An asynchronous save moves `latest` an iteration or more after it starts: a loaded machine needs time.)
        while time.time() - t0 < 240 and p.poll() is None:
            if os.path.exists(os.path.join(ck, "latest")) and (time.time() - t0) > 2:
                break
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.5))
        p.kill()
        p.wait()
        if glob.glob(os.path.join(ck, ".global_step*.tmp-*")):
            in_save += 1
        if not check(os.path.exists(os.path.join(ck, "latest")), f"kill {tries}: no `latest` after the first save"):
            return
        latest = open(os.path.join(ck, "latest")).read()
        step = os.path.join(ck, latest)
        files = sorted(os.listdir(step))
        ok = len(files) == 8 and all(f.startswith(("layer_", "mp_rank_", "zero_pp_rank_")) for f in files)
        for f in files:
            try:
                torch.load(os.path.join(step, f), weights_only=False, map_location="cpu")
            except Exception as e:  # noqa: BLE001
                ok = False
                check(False, f"kill {tries}: {latest}/{f} does not load: {e}")
        if not check(ok, f"kill {tries}: latest names an incomplete tag {latest}: {files}"):
            return
    check(in_save >= 1, f"no kill out of {tries} landed inside a save; the test did not exercise it")
    # The survivor resumes.
    latest = open(os.path.join(ck, "latest")).read()
    n = int(latest[len("global_step"):])
    r = run(data + flags + ["--load", ck, "--exit-interval", str(n + 1)])
    check(r.returncode == 0 and f"successfully saved checkpoint at iteration {n + 1} " in r.stderr,
          f"resume after kills failed: {r.stderr[-500:]}")
    print(f"kill -9: {tries} kills, {in_save} inside a save; latest always complete; resumed at {n}")


def shrink_then_resume(tmp, data, full_root):
    if not os.path.exists(SHRINK):
        check(False, "mds-ckpt-shrink not built")
        return
    small = os.path.join(tmp, "shrunk")
    r = subprocess.run([SHRINK, full_root, small], capture_output=True, text=True)
    check(r.returncode == 0, f"shrink failed: {r.stderr}")
    check(not glob.glob(os.path.join(small, "global_step8", "*optim_states.pt")), "shrunk copy kept optimizer files")
    r = run(data + model_flags(8, ["--load", small]))
    check(r.returncode != 0 and "--no-load-optim" in r.stderr, f"resume of a shrunk checkpoint without --no-load-optim: {r.returncode} {r.stderr[-300:]}")

    def end_loss(root):
        r = run(data + model_flags(8, ["--load", root, "--no-load-optim"]))
        m = re.search(r"valid loss at the end of training for val data \| lm loss value: (\S+)", r.stdout)
        check(r.returncode == 0 and m, f"--load {root} --no-load-optim: {r.returncode} {r.stderr[-300:]}")
        return m.group(1) if m else None
    full, shrunk = end_loss(full_root), end_loss(small)
    check(full is not None and full == shrunk, f"validation loss {shrunk} after shrink, {full} from the full checkpoint")
    r = run(data + model_flags(12, ["--load", small, "--no-load-optim", "--override-lr-scheduler", "--save", small,
                                    "--save-interval", "12"]))
    losses = [float(x) for x in re.findall(r"lm loss: (\S+)", r.stdout)]
    check(r.returncode == 0 and len(losses) == 4 and all(np.isfinite(losses)) and
          open(os.path.join(small, "latest")).read() == "global_step12", f"training on after shrink: {r.stderr[-300:]}")
    print(f"shrink then resume: validation loss {shrunk} == {full}; 4 more iterations from the weights-only copy")


def other_loads(tmp, data, full_root):
    r = run(data + model_flags(4, ["--load", full_root, "--finetune"]))
    first = re.search(r"^ iteration +1/ +4 \| consumed samples: +4 \|.*lm loss: (\S+)", r.stdout, re.M)
    fresh = run(data + model_flags(4, []))
    fresh_loss = re.search(r"lm loss: (\S+)", fresh.stdout)
    check(r.returncode == 0 and first and fresh_loss and float(first.group(1)) < float(fresh_loss.group(1)) - 0.5,
          f"--finetune: {r.returncode} {first and first.group(0)} vs fresh {fresh_loss and fresh_loss.group(1)}: {r.stderr[-300:]}")
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    r = run(data + model_flags(4, ["--load", empty]))
    check(r.returncode == 0 and "could not find the metadata file" in r.stdout + r.stderr, f"--load of an empty folder: {r.stderr[-300:]}")
    r = run(data + model_flags(9, ["--load", full_root, "--hidden-size", "32"]))
    check(r.returncode != 0 and "mp_rank_00_model_states.pt" in r.stderr and "hidden_size" in r.stderr,
          f"shape mismatch: {r.returncode} {r.stderr[-300:]}")
    norng = os.path.join(tmp, "norng")
    r = run(data + model_flags(4, ["--save", norng, "--save-interval", "2", "--exit-interval", "2", "--no-save-rng"]))
    check(r.returncode == 0, f"--no-save-rng: {r.stderr[-300:]}")
    r = run(data + model_flags(4, ["--load", norng]))
    check(r.returncode != 0 and "--no-load-rng" in r.stderr, f"missing RNG states: {r.returncode} {r.stderr[-300:]}")
    r = run(data + model_flags(4, ["--load", norng, "--no-load-rng"]))
    check(r.returncode == 0, f"--no-load-rng: {r.stderr[-300:]}")
    print("finetune, empty folder, mismatch and RNG errors OK")


def bmd_resume(tmp, data):
    for name, extra_shape, extra_flags in (("gpt", {}, []),
                                           ("bloom", {"embed_layernorm": True, "alibi": True},
                                            ["--embed-layernorm", "--position-embedding-type", "alibi"])):
        src, out = os.path.join(tmp, "bmd-" + name), os.path.join(tmp, "bmd-" + name + "-out")
        shape = bmd_checkpoint.ModelShape(num_layers=2, hidden=16, heads=2, ffn=64, padded_vocab=1024, seq=32, **extra_shape)
        weights = bmd_checkpoint.make_checkpoint(src, shape, tp=1, pp=1, dp=1, iteration=10)
        flags = ["--hidden-size", "16", "--num-attention-heads", "2", "--bf16", "--use-checkpoint-lr-scheduler", *extra_flags]
        # Nothing left to train: load, evaluate, save global_step10 again from what was loaded.
        r = run(data + model_flags(10, flags + ["--load", src, "--save", out, "--save-interval", "100"]))
        if not check(r.returncode == 0, f"bmd {name}: resume failed: {r.stderr[-800:]}"):
            continue
        step = os.path.join(out, "global_step10")
        for f in sorted(os.listdir(step)):
            if not f.startswith("layer_"):
                continue
            idx = int(f[6:8])
            for k, v in torch.load(os.path.join(step, f), weights_only=False).items():
                check(torch.equal(v, weights[(idx, k)]), f"bmd {name}: {f} {k} differs from the source")
        src_opt = torch.load(os.path.join(src, "global_step10", "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"),
                             weights_only=False)["optimizer_state_dict"]
        got_opt = torch.load(os.path.join(step, "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"),
                             weights_only=False)["optimizer_state_dict"]

        def per_param(osd, key):
            out = {}
            for g, m in enumerate(osd["param_slice_mappings"]):
                flat = osd["single_partition_of_fp32_groups"][g] if key == "fp32" else \
                    osd["base_optimizer_state"]["state"][g][key]
                for n, frag in m.items():
                    out[n] = flat[frag.start:frag.start + frag.numel]
            return out
        for key in ("fp32", "exp_avg", "exp_avg_sq"):
            a, b = per_param(src_opt, key), per_param(got_opt, key)
            check(a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a),
                  f"bmd {name}: optimizer {key} not carried over bitwise")
        # Two more iterations: the run continues at iteration 11 with the file's data position and schedule.
        r = run(data + model_flags(12, flags + ["--load", src]))
        m = re.search(r"^ iteration +11/ +12 \| consumed samples: +(\d+) \| consumed tokens: +(\d+) \|.*"
                      r"learning rate: (\S+) \|", r.stdout, re.M)
        check(r.returncode == 0 and m and m.groups() == ("44", str(40 * 32 + 4 * 32), "4.400E-05"),
              f"bmd {name}: iteration 11 is {m and m.groups()}: {r.stderr[-300:]}")
    print("BigScience-style checkpoints (GPT, BLOOM) resume: weights and optimizer bitwise, progress continued")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
        data = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2"]
        fp32 = resume_case(tmp, data, "fp32", [])
        bloom = resume_case(tmp, data, "bf16-bloom", ["--bf16", "--position-embedding-type", "alibi", "--embed-layernorm"])
        resume_case(tmp, data, "fp16-deepspeed", ["--fp16"],
                    {"train_micro_batch_size_per_gpu": 2, "train_batch_size": 4, "gradient_clipping": 1.0,
                     "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 2,
                              "hysteresis": 2, "min_loss_scale": 1}})
        resume_case(tmp, data, "fp16-megatron", ["--fp16", "--initial-loss-scale", "4096", "--loss-scale-window", "2"])
        if fp32:
            structure(fp32, bf16=False, embed_ln=False)
        if bloom:
            structure(bloom, bf16=True, embed_ln=True)
        bmd_resume(tmp, data)
        exit_paths(tmp, data)
        if fp32:
            shrink_then_resume(tmp, data, os.path.dirname(fp32))
            other_loads(tmp, data, os.path.dirname(fp32))
        kill_during_save(tmp, data)
    if failures:
        print(f"FAIL: {len(failures)} problem(s)")
        for f in failures[:30]:
            print("  " + f)
        sys.exit(1)
    print("OK: mds-train checkpoints resume bit-exactly and load in torch and DeepSpeed")


if __name__ == "__main__":
    main()
