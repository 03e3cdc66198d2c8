#!/usr/bin/env python3
"""mds-ckpt-reshape and mds-ckpt-shrink give the same bytes whatever --workers says (issue 22: the files are spread
over worker threads, each file written whole by one of them):
  - a BigScience-style checkpoint (bmd_checkpoint.py: TP 2 x PP 2 x DP 2, bf16, embedding LayerNorm, ALiBi, padded
    vocabulary, random Adam moments, tied embedding on the last stage) reshaped to (tp, pp, dp) = (1, 1, 2),
    (4, 1, 2) (vocabulary re-padded: the merge path) and (2, 3, 1) (shards read in place) with --with-optimizer
    --universal, by 1, 2 and 5 workers: every output file byte for byte the same, and the same as the
    weights-only reshape's layer files;
  - a GLU checkpoint (dense_h_to_4h as two halves: the merge path beside direct splits) by 1 and 3 workers;
  - mds-ckpt-shrink --all by 1 and 3 workers: the same files, byte for byte equal to the source's, and the same
    --verbose lines in the same order; a damaged storage is refused by every worker count, leaving no tag;
  - --workers 0 / -1 / x: usage errors (exit 2) naming the flag, nothing written.
Exits 77 without the binaries or torch."""
import filecmp
import os
import struct
import subprocess
import sys
import tempfile
import zipfile

BIN = os.environ.get("MDS_BIN", "build/bin")
RESHAPE = os.path.join(BIN, "mds-ckpt-reshape")
SHRINK = os.path.join(BIN, "mds-ckpt-shrink")
if not os.path.exists(RESHAPE) or not os.path.exists(SHRINK):
    print("SKIP: mds-ckpt-reshape / mds-ckpt-shrink not built")
    sys.exit(77)
try:
    import torch  # noqa: F401  (bmd_checkpoint writes with torch.save)
except Exception as e:  # noqa: BLE001
    print(f"SKIP: torch not importable: {e}")
    sys.exit(77)

import bmd_checkpoint  # noqa: E402  (tests/crosscheck)

BLOOM = bmd_checkpoint.ModelShape(num_layers=6, hidden=36, heads=4, ffn=144, padded_vocab=256, seq=16,
                                  embed_layernorm=True, alibi=True)
ORIGINAL_VOCAB = 200

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    return cond


def run(tool, *args):
    return subprocess.run([tool, *args], capture_output=True, text=True)


def tree(root):
    """Relative path -> bytes of every file under root."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def same_trees(a, b, what):
    ta, tb = tree(a), tree(b)
    if not check(sorted(ta) == sorted(tb), f"{what}: other files: {sorted(set(ta) ^ set(tb))[:5]}"):
        return
    differ = [k for k in ta if ta[k] != tb[k]]
    check(not differ, f"{what}: files differ: {differ[:5]}")


def check_reshape(tmp):
    src = os.path.join(tmp, "bloom")
    bmd_checkpoint.make_checkpoint(src, BLOOM, tp=2, pp=2, dp=2, original_vocab=ORIGINAL_VOCAB, last_stage_tied=True,
                                   moments_seed=3)
    for (tp, pp, dp) in [(1, 1, 2), (4, 1, 2), (2, 3, 1)]:
        outs = []
        for workers in (1, 2, 5):
            dst = os.path.join(tmp, f"r{tp}{pp}{dp}-w{workers}")
            r = run(RESHAPE, src, dst, "--quiet", "--target-tp", str(tp), "--target-pp", str(pp), "--target-dp", str(dp),
                    "--with-optimizer", "--universal", "--workers", str(workers))
            if check(r.returncode == 0, f"reshape tp{tp}pp{pp}dp{dp} --workers {workers}: exit {r.returncode}: {r.stderr}"):
                outs.append((workers, dst))
        for workers, dst in outs[1:]:
            same_trees(outs[0][1], dst, f"reshape tp{tp}pp{pp}dp{dp}: --workers 1 vs {workers}")
        # Weights only: the layer files are the ones written beside the optimizer files.
        dst = os.path.join(tmp, f"r{tp}{pp}{dp}-weights")
        r = run(RESHAPE, src, dst, "--quiet", "--target-tp", str(tp), "--target-pp", str(pp), "--workers", "2")
        if check(r.returncode == 0, f"weights-only reshape tp{tp}pp{pp}: exit {r.returncode}: {r.stderr}") and outs:
            step = os.path.join(dst, "global_step10")
            for f in sorted(os.listdir(step)):
                if f.startswith("layer_"):
                    check(filecmp.cmp(os.path.join(step, f), os.path.join(outs[0][1], "global_step10", f), shallow=False),
                          f"weights-only reshape tp{tp}pp{pp}: {f} differs from the --with-optimizer one")


def check_glu(tmp):
    src = os.path.join(tmp, "glu")
    bmd_checkpoint.make_checkpoint(src, bmd_checkpoint.ModelShape(num_layers=4, hidden=16, heads=4, ffn=32), tp=2, pp=1, dp=1,
                                   original_vocab=100, write_optimizer=False)
    step = os.path.join(src, "global_step10")
    # Mark the checkpoint as GLU (args.glu_activation), as test_ckpt_reshape.py's GLU case does.
    for f in os.listdir(step):
        if f.startswith("mp_rank_"):
            sd = torch.load(os.path.join(step, f), map_location="cpu", weights_only=False)
            sd["args"].glu_activation = "geglu"
            torch.save(sd, os.path.join(step, f))
    outs = []
    for workers in (1, 3):
        dst = os.path.join(tmp, f"glu-w{workers}")
        r = run(RESHAPE, src, dst, "--quiet", "--target-tp", "1", "--target-pp", "2", "--workers", str(workers))
        if check(r.returncode == 0, f"glu reshape --workers {workers}: exit {r.returncode}: {r.stderr}"):
            outs.append(dst)
    if len(outs) == 2:
        same_trees(outs[0], outs[1], "glu reshape: --workers 1 vs 3")


def check_shrink(tmp):
    src = os.path.join(tmp, "shrink-src")
    bmd_checkpoint.make_checkpoint(src, BLOOM, tp=2, pp=2, dp=2, iteration=10)
    bmd_checkpoint.make_checkpoint(src, BLOOM, tp=2, pp=2, dp=2, iteration=20)
    logs = []
    for workers in (1, 3):
        dst = os.path.join(tmp, f"shrink-w{workers}")
        r = run(SHRINK, src, dst, "--all", "--verbose", "--progress", "off", "--workers", str(workers))
        if not check(r.returncode == 0, f"shrink --workers {workers}: exit {r.returncode}: {r.stderr}"):
            return
        logs.append([line for line in r.stderr.splitlines() if ": copied" in line or ": dropped" in line])
        for tag in ("global_step10", "global_step20"):
            for f in os.listdir(os.path.join(dst, tag)):
                check(filecmp.cmp(os.path.join(dst, tag, f), os.path.join(src, tag, f), shallow=False),
                      f"shrink --workers {workers}: {tag}/{f} is not the source's bytes")
    same_trees(os.path.join(tmp, "shrink-w1"), os.path.join(tmp, "shrink-w3"), "shrink: --workers 1 vs 3")
    check(logs[0] == logs[1] and len(logs[0]) > 10, f"shrink --verbose lines differ between 1 and 3 workers: {logs}")
    check(logs[0] == sorted(logs[0], key=lambda l: (l.split("/")[0], l)), f"shrink --verbose lines out of order: {logs[0]}")

    # A flipped byte in one storage: refused by every worker count, no tag left behind.
    victim = os.path.join(src, "global_step20", "layer_03-model_01-model_states.pt")
    with zipfile.ZipFile(victim) as z:
        biggest = max(z.infolist(), key=lambda i: i.file_size)
    data = bytearray(open(victim, "rb").read())
    name_len, extra_len = struct.unpack_from("<HH", data, biggest.header_offset + 26)
    data[biggest.header_offset + 30 + name_len + extra_len + biggest.file_size // 2] ^= 0x40
    with open(victim, "wb") as fh:
        fh.write(data)
    for workers in (1, 3):
        dst = os.path.join(tmp, f"shrink-bad-w{workers}")
        r = run(SHRINK, src, dst, "--tag", "global_step20", "--quiet", "--workers", str(workers))
        check(r.returncode == 1 and "layer_03-model_01" in r.stderr and "damaged" in r.stderr,
              f"shrink of a damaged file --workers {workers}: exit {r.returncode}: {r.stderr}")
        check(not os.path.exists(os.path.join(dst, "global_step20")) and not os.path.exists(os.path.join(dst, "latest")),
              f"shrink of a damaged file --workers {workers}: a tag or latest was left")
        left = [f for f in os.listdir(dst)] if os.path.isdir(dst) else []
        check(not left, f"shrink of a damaged file --workers {workers}: temporaries left: {left}")


def check_usage(tmp):
    src = os.path.join(tmp, "usage-src")
    bmd_checkpoint.make_checkpoint(src, BLOOM, tp=1, pp=1, dp=1, write_optimizer=False)
    for value in ("0", "-1", "x"):
        dst = os.path.join(tmp, "usage-dst")
        for tool, extra in ((RESHAPE, ["--target-tp", "1", "--target-pp", "1"]), (SHRINK, [])):
            r = run(tool, src, dst, *extra, "--workers", value)
            check(r.returncode == 2 and "--workers" in r.stderr,
                  f"{os.path.basename(tool)} --workers {value}: exit {r.returncode}: {r.stderr}")
            check(not os.path.exists(dst), f"{os.path.basename(tool)} --workers {value}: wrote {dst}")
    for tool in (RESHAPE, SHRINK):
        r = run(tool, "--help")
        check(r.returncode == 0 and "--workers" in r.stdout, f"{os.path.basename(tool)} --help lacks --workers")


def main():
    with tempfile.TemporaryDirectory(prefix="mds-ckpt-workers-") as tmp:
        check_usage(tmp)
        check_reshape(tmp)
        check_glu(tmp)
        check_shrink(tmp)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("ok: reshape and shrink outputs are the same for every --workers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
