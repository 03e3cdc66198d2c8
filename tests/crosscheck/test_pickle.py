"""Cross-check: mds::ckpt's pickle reader and writer (bin/pickle_probe) against CPython's pickle.

Builds objects shaped like Megatron-DeepSpeed's mp_rank files (argparse.Namespace with an Enum,
torch dtypes, deque, nested OrderedDicts, set, torch.Size, random.getstate(), numpy RNG state,
special floats, big ints, unicode, bytes, shared sub-objects) and torch-style persistent ids, pickles
them with protocols 2 and 4, and checks that
  1. the probe's canonical dump of each pickle equals the dump computed here from the original
     objects through __reduce_ex__ (the grammar is in tests/tools/pickle_probe.cpp);
  2. the probe's rewrite (read_pickle -> write_pickle) loads with pickle.loads / a persistent_load
     Unpickler into objects equal to the originals;
  3. the probe rejects truncated pickles with an error naming the file.
Exits 77 (skipped) without torch / numpy. The probe comes from $MDS_BIN.
"""

import argparse
import collections
import enum
import io
import math
import os
import pickle
import random
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except Exception as e:  # noqa: BLE001
    print(f"SKIP: torch / numpy not importable: {e}")
    sys.exit(77)

PROBE = os.path.join(os.environ.get("MDS_BIN", "build/bin"), "pickle_probe")


class PositionEmbeddingType(enum.Enum):
    rotary = 1
    absolute = 2
    alibi = 3


def quoted(b):
    return "'" + "".join(chr(c) if 0x20 <= c <= 0x7E and c not in (0x27, 0x5C) else f"\\x{c:02x}" for c in b) + "'"


def dump_global(module, name):
    return f"G({module}:{name})"


def dump(o):
    """The canonical dump of how pickle (protocol 2 semantics) encodes `o`."""
    t = type(o)
    if o is None:
        return "None"
    if t is bool:
        return "True" if o else "False"
    if t is int:
        return str(o)
    if t is float:
        return "f:" + struct.pack(">d", o).hex()
    if t is str:
        return "s" + quoted(o.encode("utf-8", "surrogatepass"))
    if t is bytes:
        return "b" + quoted(o)
    if t is tuple:
        return "(" + ",".join(dump(x) for x in o) + ")"
    if t is list:
        return "[" + ",".join(dump(x) for x in o) + "]"
    if t is dict:
        return "{" + ",".join(dump(k) + ":" + dump(v) for k, v in o.items()) + "}"
    if isinstance(o, type) or callable(o) and hasattr(o, "__qualname__") and not hasattr(o, "__reduce_ex__"):
        return dump_global(o.__module__, o.__qualname__)
    if isinstance(o, PID):
        return "P(" + dump(o.pid) + ")"
    rv = o.__reduce_ex__(2)
    if isinstance(rv, str):  # a global by name (torch dtypes)
        return dump_global(getattr(o, "__module__", None) or "torch", rv)
    func, args = rv[0], rv[1]
    state = rv[2] if len(rv) > 2 else None
    listitems = list(rv[3]) if len(rv) > 3 and rv[3] is not None else []
    dictitems = list(rv[4]) if len(rv) > 4 and rv[4] is not None else []
    new = getattr(func, "__name__", "") == "__newobj__"
    if new:
        cls, args = args[0], args[1:]
    else:
        cls = func
    s = f"O({cls.__module__}:{cls.__qualname__},new={int(new)},args={dump(tuple(args))}"
    if state is not None:
        s += ",state=" + dump(state)
    if listitems:
        s += ",list=[" + ",".join(dump(x) for x in listitems) + "]"
    if dictitems:
        s += ",dict={" + ",".join(dump(k) + ":" + dump(v) for k, v in dictitems) + "}"
    return s + ")"


class PID:
    """Stands for a tensor storage: pickled as a persistent id, as torch.save does."""

    def __init__(self, pid):
        self.pid = pid

    def __eq__(self, other):
        return isinstance(other, PID) and self.pid == other.pid


class PidPickler(pickle.Pickler):
    def persistent_id(self, obj):
        return obj.pid if isinstance(obj, PID) else None


class PidUnpickler(pickle.Unpickler):
    def persistent_load(self, pid):
        return PID(pid)

    def find_class(self, module, name):
        if module == __name__ or module == "__main__":
            return globals()[name]
        return super().find_class(module, name)


def dumps(obj, proto):
    f = io.BytesIO()
    PidPickler(f, protocol=proto).dump(obj)
    return f.getvalue()


def loads(b):
    return PidUnpickler(io.BytesIO(b)).load()


def canon(o):
    """A comparable form: Namespaces by attributes, numpy arrays by dtype/shape/bytes, nan-safe floats."""
    if isinstance(o, argparse.Namespace):
        return ("Namespace", canon(vars(o)))
    if isinstance(o, np.ndarray):
        return ("ndarray", str(o.dtype), o.shape, o.tobytes())
    if isinstance(o, float):
        return ("float", struct.pack(">d", o))
    if isinstance(o, collections.OrderedDict):
        return ("OrderedDict", [(canon(k), canon(v)) for k, v in o.items()])
    if isinstance(o, dict):
        return ("dict", [(canon(k), canon(v)) for k, v in o.items()])
    if isinstance(o, (list, tuple, collections.deque)):
        return (type(o).__name__, [canon(x) for x in o])
    if isinstance(o, (set, frozenset)):
        return (type(o).__name__, sorted(repr(canon(x)) for x in o))
    if isinstance(o, PID):
        return ("PID", canon(o.pid))
    return (type(o).__name__, o)


def mp_rank_state():
    random.seed(1234)
    np.random.seed(1234)
    shared = {"lr": 0.5, "betas": [0.9, 0.95]}
    args = argparse.Namespace(
        num_layers=2, hidden_size=64, lr=6e-5, min_lr=0.0, seed=42, fp16=False, bf16=True,
        params_dtype=torch.bfloat16, position_embedding_type=PositionEmbeddingType.alibi,
        skip_train_iteration_range=collections.deque([[10, 20], [30, 40]]), tokenizer_type="GPT2BPETokenizer",
        deepspeed_configuration={"train_batch_size": 8, "bf16": {"enabled": True}}, data_path=["1.0", "data/x"],
        consumed_train_samples=123456789, gigaflos_no_embeds=3.5e15, rank=None, unicode_note="héllo ☃ 𝄞",
    )
    layer = collections.OrderedDict()
    layer["a"] = collections.OrderedDict([("x", torch.Size([4, 8])), ("y", torch.Size([]))])
    layer["b"] = collections.OrderedDict()
    return {
        "module": None,
        "buffer_names": ["tied_modules.embed.position_ids"],
        "optimizer": None,
        "param_shapes": [layer, collections.OrderedDict([("z", torch.Size([3]))])],
        "lr_scheduler": {"max_lr": 6e-5, "warmup_steps": 10, "num_steps": 100, "decay_style": "cosine"},
        "sparse_tensor_module_names": set(),
        "names_set": {"a", "b", 3},
        "frozen": frozenset([1, 2]),
        "skipped_steps": 0, "global_steps": 100, "global_samples": 800, "dp_world_size": 1, "mp_world_size": 2,
        "ds_config": "ds_config.json", "ds_version": "0.6.5",
        "args": args, "checkpoint_version": 3.0, "iteration": 100, "tokens": 2**40 + 7,
        "random_rng_state": random.getstate(),
        "np_rng_state": np.random.get_state(),
        "floats": [math.inf, -math.inf, math.nan, -0.0, 0.0, 1e-310, 1.7976931348623157e308],
        "ints": [0, 1, -1, 255, 256, 65535, 65536, -2**31, 2**31 - 1, 2**31, -2**31 - 1, 2**63 - 1, -2**63, 2**64,
                 -2**64, 10**100, -(10**100), 2**2100 + 1],
        "bytes": [b"", b"\x00\xff\x80abc", bytes(range(256))],
        "shared": [shared, shared, (shared, "t")],
        "long_list": list(range(2500)),
        "big_dict": {f"k{i}": i for i in range(1100)},
        "tuples": [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)],
        "classes": [collections.OrderedDict, torch.float16, torch.float32, int],
    }


def torch_style_state():
    def storage(key, n):
        return PID(("storage", torch.FloatStorage, key, "cuda:3", n))

    s0 = storage("0", 12)
    return collections.OrderedDict(
        [("w", (s0, 0, (3, 4), (4, 1))), ("w_again", (s0, 4, (2,), (1,))), ("b", (storage("1", 4), 0, (4,), (1,)))]
    )


def run_probe(*argv):
    return subprocess.run([PROBE, *argv], capture_output=True, text=True)


def main():
    if not os.path.exists(PROBE):
        print(f"FAIL: {PROBE} not built")
        return 1
    failures = 0
    cases = {"mp_rank": mp_rank_state(), "torch_style": torch_style_state()}
    with tempfile.TemporaryDirectory() as tmp:
        for name, obj in cases.items():
            expected_dump = dump(obj)
            for proto in (2, 4):
                path = os.path.join(tmp, f"{name}.p{proto}.pkl")
                data = dumps(obj, proto)
                with open(path, "wb") as f:
                    f.write(data)
                r = run_probe("dump", path)
                if r.returncode != 0 or r.stdout.strip() != expected_dump:
                    failures += 1
                    got = r.stdout.strip()
                    i = next((k for k in range(min(len(got), len(expected_dump))) if got[k] != expected_dump[k]), None)
                    print(f"FAIL dump {name} protocol {proto}: rc={r.returncode} {r.stderr.strip()}")
                    if i is not None:
                        print(f"  first difference at {i}: got ...{got[max(0, i - 80):i + 80]}")
                        print(f"                  expected ...{expected_dump[max(0, i - 80):i + 80]}")
                    continue
                out = path + ".rewritten"
                r = run_probe("rewrite", path, out)
                if r.returncode != 0:
                    failures += 1
                    print(f"FAIL rewrite {name} protocol {proto}: {r.stdout.strip()} {r.stderr.strip()}")
                    continue
                with open(out, "rb") as f:
                    rewritten = f.read()
                back = loads(rewritten)
                if canon(back) != canon(obj):
                    failures += 1
                    print(f"FAIL round trip {name} protocol {proto}")
                    continue
                if proto == 2 and name == "torch_style" and rewritten != data:
                    # plain data, globals and persistent ids: the writer matches CPython byte for byte
                    failures += 1
                    print(f"FAIL {name}: rewritten bytes differ from CPython's protocol-2 output")
                    continue
                if name == "mp_rank":
                    a = back["args"]
                    ok = (isinstance(a, argparse.Namespace) and a.position_embedding_type is PositionEmbeddingType.alibi
                          and a.params_dtype is torch.bfloat16 and back["shared"][0] is back["shared"][1]
                          and isinstance(back["sparse_tensor_module_names"], set))
                    if not ok:
                        failures += 1
                        print(f"FAIL {name} protocol {proto}: types / sharing not restored")
                        continue
                print(f"ok {name} protocol {proto}: dump of {len(expected_dump)} chars, rewrite of {len(rewritten)} bytes")
            # truncated pickles: an error naming the file, never a crash
            data = dumps(obj, 2)
            for cut in (1, len(data) // 3, len(data) - 1):
                path = os.path.join(tmp, f"{name}.cut{cut}.pkl")
                with open(path, "wb") as f:
                    f.write(data[:cut])
                r = run_probe("dump", path)
                if r.returncode != 1 or not r.stdout.startswith(f"error: {path}: pickle offset"):
                    failures += 1
                    print(f"FAIL truncated {name} at {cut}: rc={r.returncode} {r.stdout[:200]} {r.stderr[:200]}")
        print("ok truncated pickles rejected" if failures == 0 else "")
    print("PASS" if failures == 0 else f"FAIL: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
