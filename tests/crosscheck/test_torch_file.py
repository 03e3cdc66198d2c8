"""Cross-check: mds::ckpt reads and writes torch.save files (bin/torch_file_probe) as PyTorch does.

1. A checkpoint written the way BigScience's Megatron-DeepSpeed + DeepSpeed saved BLOOM-era checkpoints
   (tests/crosscheck/bmd_checkpoint.py: TP 2 x PP 2 x DP 2, bf16, embedding LayerNorm, ALiBi, storages located on
   'cuda:3', optimizer files saved through a file object so their archive is named "archive", argparse.Namespace
   args with an enum and a deque, RNG states, fragment_address dataclasses). DeepSpeed's own reader
   (deepspeed.checkpoint.DeepSpeedCheckpoint) checks the fixture's structure when deepspeed is installed.
2. For every file, the tensors mds finds (path, dtype, shape, location, CRC-32 of the bytes) equal what
   torch.load(map_location='cpu') gives, in the same traversal order.
3. Every file copied by mds (TorchSaveWriter: each tensor in its own contiguous storage) loads with torch.load
   and equals the original: tensors bit for bit, Namespace attributes, enums, deques, sets, dataclasses, tuples.
4. Non-contiguous views and storages shared by several tensors (plain torch.save of views) are read right.
Exits 77 without torch / numpy or the probe.
"""
import argparse
import collections
import dataclasses
import enum
import os
import subprocess
import sys
import tempfile
import zlib

PROBE = os.path.join(os.environ.get("MDS_BIN", "build/bin"), "torch_file_probe")
if not os.path.exists(PROBE):
    print(f"SKIP: {PROBE} not built")
    sys.exit(77)
try:
    import numpy as np
    import torch
except Exception as e:  # noqa: BLE001
    print(f"SKIP: torch / numpy not importable: {e}")
    sys.exit(77)

import bmd_checkpoint  # tests/crosscheck

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
          torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
          torch.bool: "BOOL"}
failures = []


def walk(obj, path, out):
    """The probe's traversal: dict/OrderedDict/Namespace keys as .key (int keys [i]), list/tuple items [i],
    dataclass / other object state as .@state."""
    if isinstance(obj, torch.Tensor):
        data = obj.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if obj.numel() else b""
        shape = ",".join(str(d) for d in obj.shape)
        out.append(f"tensor {path or '.'} {DTYPES[obj.dtype]} [{shape}] {zlib.crc32(data):08x}")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            walk(v, path + (f".{k}" if isinstance(k, str) else f"[{k}]"), out)
    elif isinstance(obj, argparse.Namespace):
        walk(vars(obj), path, out)
    elif isinstance(obj, (list, tuple, collections.deque)):
        for i, v in enumerate(obj):
            walk(v, f"{path}[{i}]", out)
    elif dataclasses.is_dataclass(obj):
        walk(dataclasses.asdict(obj), path + ".@state", out)


def same(a, b, path="root"):
    if type(a) is not type(b):
        failures.append(f"{path}: {type(a).__name__} != {type(b).__name__}")
    elif isinstance(a, torch.Tensor):
        raw = lambda t: t.contiguous().reshape(-1).view(torch.uint8) if t.numel() else t  # noqa: E731
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(raw(a), raw(b)):
            failures.append(f"{path}: tensors differ")
    elif isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            failures.append(f"{path}: keys {list(a)[:5]} != {list(b)[:5]}")
        for k in a:
            if k in b:
                same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, argparse.Namespace):
        same(vars(a), vars(b), path)
    elif isinstance(a, (list, tuple, collections.deque)):
        if len(a) != len(b):
            failures.append(f"{path}: length {len(a)} != {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, np.ndarray):
        if a.dtype != b.dtype or not np.array_equal(a, b):
            failures.append(f"{path}: arrays differ")
    elif isinstance(a, float) and a != a:
        if b == b:
            failures.append(f"{path}: nan != {b}")
    elif a != b:
        failures.append(f"{path}: {a!r} != {b!r}")


def probe(*args):
    r = subprocess.run([PROBE, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: torch_file_probe {' '.join(args)}: {r.stderr}")
    return r.stdout


def check_file(path, tmp, location):
    ref = torch.load(path, map_location="cpu", weights_only=False)
    expect = []
    walk(ref, "", expect)
    got = [line for line in probe("dump", path).splitlines() if line.startswith("tensor ")]
    got_no_loc = [" ".join(x.split(" ")[:4] + x.split(" ")[5:]) for x in got]
    if got_no_loc != expect:
        failures.append(f"{os.path.basename(path)}: tensors differ:\n  mds   {got_no_loc[:3]}\n  torch {expect[:3]}")
    if location and any(x.split(" ")[4] != location for x in got):
        failures.append(f"{os.path.basename(path)}: locations are not all {location}")
    copy = os.path.join(tmp, "copy.pt")
    probe("copy", path, copy)
    same(ref, torch.load(copy, map_location="cpu", weights_only=False), os.path.basename(path))
    return len(got)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "ckpt")
        shape = bmd_checkpoint.ModelShape(num_layers=3, embed_layernorm=True, alibi=True)
        bmd_checkpoint.make_checkpoint(root, shape, tp=2, pp=2, dp=2, location="cuda:3", optimizer_via_file_object=True)
        step = os.path.join(root, "global_step10")
        try:
            from deepspeed.checkpoint import DeepSpeedCheckpoint
            ck = DeepSpeedCheckpoint(step, tp_degree=2, pp_degree=2)
            assert (ck.tp_degree, ck.pp_degree, ck.dp_degree, ck.get_iteration()) == (2, 2, 2, 10)
            print("fixture: DeepSpeedCheckpoint reads it as TP 2, PP 2, DP 2, iteration 10")
        except ImportError:
            print("fixture: deepspeed not installed; DeepSpeedCheckpoint check skipped")
        files = sorted(os.listdir(step))
        tensors = sum(check_file(os.path.join(step, f), tmp, "cuda:3") for f in files)
        print(f"BigScience-style checkpoint: {len(files)} files, {tensors} tensors read and copied like torch.load")

        # Views into shared storages, non-contiguous and offset tensors, every dtype, empty tensors.
        base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
        odd = collections.OrderedDict(t=base.t(), row=base[2], col=base[:, 3], empty=torch.zeros(0, 3),
                                      scalar=torch.tensor(3.5), **{str(d).split(".")[1]: torch.ones(3, dtype=d) for d in DTYPES})
        path = os.path.join(tmp, "views.pt")
        torch.save({"views": odd, "base": base, "tuple": (base[1:3], 7)}, path)
        n = check_file(path, tmp, "cpu")
        print(f"views, shared storages, dtypes: {n} tensors")

        # Bad input: a storage shorter than its tensor needs, named in the error.
        broken = os.path.join(tmp, "broken.pt")
        torch.save({"x": torch.ones(4)}, broken)
        import zipfile
        with zipfile.ZipFile(broken) as z:
            records = {i.filename: z.read(i) for i in z.infolist()}
        with zipfile.ZipFile(broken, "w") as z:
            for name, data in records.items():
                z.writestr(name, data[:8] if name.endswith("data/0") else data)
        r = subprocess.run([PROBE, "dump", broken], capture_output=True, text=True)
        if r.returncode != 1 or "storage data/0 has 8 bytes" not in r.stderr:
            failures.append(f"truncated storage: rc {r.returncode}, {r.stderr.strip()}")
    if failures:
        print("\n".join("FAIL: " + f for f in failures[:30]))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
