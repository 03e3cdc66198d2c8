"""Random byte flips in the .pt files of a tiny bf16 checkpoint (tests/crosscheck/bmd_checkpoint.py: layer files,
mp_rank file, BF16 optimizer file), fixed seed (issue 24):
  - every flip inside a storage record or data.pkl is an error (exit 1) of each tool that reads that file's data -
    mds-ckpt-shrink (layer and mp_rank files, verified whole before copying), mds-ckpt-to-hf (layer files),
    mds-ckpt-reshape (layer and mp_rank files; optimizer files with --with-optimizer) - naming the file and the tensor
    on that storage (or data.pkl), never a silent success, never a crash, and nothing under the final name;
  - with --no-verify a flip inside a storage goes through (what the flag is for);
  - a flip anywhere else in the file (zip headers, the other records) is an error or a success, never a crash or an
    "internal error".
Exits 77 without torch or the binaries."""
import os
import random
import shutil
import sys
import tempfile
import time

from testkit import check, finish
import ckpt_hostile_kit as kit

T = kit.tools()
TAG = "global_step10"
SEED = 2024
FLIPS_IN_RECORDS = 45
FLIPS_ANYWHERE = 20


def readers(name):
    """The tool runs (tool, extra flags) that read every storage of the file `name`."""
    if name.startswith("layer_"):
        return [("mds-ckpt-shrink", []), ("mds-ckpt-to-hf", ["--no-tokenizer"]), ("mds-ckpt-reshape", [])]
    if name.startswith("mp_rank_"):
        return [("mds-ckpt-shrink", []), ("mds-ckpt-reshape", [])]
    return [("mds-ckpt-reshape", ["--with-optimizer"])]


def tool_run(tool, src, out, flags):
    extra = ["--target-tp", "1", "--target-pp", "1"] if tool == "mds-ckpt-reshape" else []
    if os.path.exists(out):
        shutil.rmtree(out)
    return kit.run(T[tool], src, out, "-q", *extra, *flags)


def flip(path, offset, xor):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ xor]))


def main():
    rng = random.Random(SEED)
    with tempfile.TemporaryDirectory() as tmp:
        src = kit.make_checkpoint(os.path.join(tmp, "ckpt"))
        tag_dir = os.path.join(src, TAG)
        files = sorted(n for n in os.listdir(tag_dir) if n.endswith(".pt"))
        records = {n: [r for r in kit.zip_records(os.path.join(tag_dir, n)) if r[2] > 0 and
                       (r[0].endswith("/data.pkl") or "/data/" in r[0])] for n in files}
        storages = {n: kit.tensors_by_storage(os.path.join(tag_dir, n)) for n in files}
        out = os.path.join(tmp, "out")
        start = time.time()
        runs = 0
        for i in range(FLIPS_IN_RECORDS):
            name = files[i % len(files)]
            path = os.path.join(tag_dir, name)
            rec, off, size = rng.choice(records[name])
            at = off + rng.randrange(size)
            xor = rng.randrange(1, 256)
            key = rec.split("/data/", 1)[1] if "/data/" in rec else None
            expect = ["data.pkl"] if key is None else storages[name].get(key, [])
            what = f"flip {i}: {name} {rec.split('/', 1)[1]} byte {at - off} ^ {xor:#04x}"
            check(key is None or expect, f"{what}: no tensor found on storage {key} (test fixture)")
            flip(path, at, xor)
            try:
                for tool, flags in readers(name):
                    r = tool_run(tool, src, out, flags)
                    runs += 1
                    e = r.stderr.decode("utf-8", "replace")
                    check(r.returncode == 1, f"{what}: {tool} exit {r.returncode}: {e[-400:]}")
                    check(name in e and any(t in e for t in expect), f"{what}: {tool} does not name {name} and {expect}: {e[-400:]}")
                    check(b"internal error" not in r.stderr, f"{what}: {tool}: {e[-400:]}")
                    check(not os.path.exists(os.path.join(out, TAG)) and not os.path.exists(os.path.join(out, "config.json")),
                          f"{what}: {tool} left an output under its final name")
                if key is not None and name.startswith("layer_"):
                    r = tool_run("mds-ckpt-to-hf", src, out, ["--no-tokenizer", "--no-verify"])
                    runs += 1
                    check(r.returncode == 0, f"{what}: to-hf --no-verify exit {r.returncode}: {r.stderr[-300:]!r}")
            finally:
                flip(path, at, xor)  # restore
        for i in range(FLIPS_ANYWHERE):
            name = rng.choice(files)
            path = os.path.join(tag_dir, name)
            at = rng.randrange(os.path.getsize(path))
            xor = rng.randrange(1, 256)
            flip(path, at, xor)
            try:
                for tool, flags in readers(name):
                    r = tool_run(tool, src, out, flags)
                    runs += 1
                    check(r.returncode in (0, 1) and b"internal error" not in r.stderr and not kit.raw_control_bytes(r.stderr),
                          f"anywhere {i}: {name} byte {at} ^ {xor:#04x}: {tool} exit {r.returncode}: {r.stderr[-300:]!r}")
            finally:
                flip(path, at, xor)
        print(f"{FLIPS_IN_RECORDS} flips in records, {FLIPS_ANYWHERE} anywhere: {runs} runs in {time.time() - start:.1f} s")
    finish()


if __name__ == "__main__":
    sys.exit(main())
