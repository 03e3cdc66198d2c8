#!/usr/bin/env python3
"""--reset-position-ids / --reset-attention-mask's batch side (mds::trainer::ltor_masks_and_position_ids, issue 18)
against Megatron-DeepSpeed's own get_ltor_masks_and_position_ids: the function is taken from the third_party tree's
megatron/utils.py (its source compiled alone, with torch; nothing else of Megatron is imported) and both are run on
the same token rows, every combination of the two switches, with EOD tokens first, last, doubled, absent. Position ids
and attention masks (shape and every element) must be equal. mds-train feeds the position ids to the model
(--reset-position-ids); the mask is computed for this comparison only, as BMD's pipeline model drops it
(--reset-attention-mask has no effect there: see docs/data-flags.md). Exits 77 without the tree, torch, or
build/bin/ltor_probe."""
import ast
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("MDS_SOURCE_DIR", os.path.join(HERE, "..", ".."))
BIN = os.environ.get("MDS_BIN", os.path.join(SOURCE, "build", "bin"))
PROBE = os.path.join(BIN, "ltor_probe")
UTILS = os.path.join(SOURCE, "..", "shared", "third_party", "bigscience-megatron-deepspeed", "megatron", "utils.py")


def megatron_function(torch):
    tree = ast.parse(open(UTILS).read(), UTILS)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_ltor_masks_and_position_ids")
    scope = {"torch": torch}
    exec(compile(ast.Module(body=[node], type_ignores=[]), UTILS, "exec"), scope)
    return scope["get_ltor_masks_and_position_ids"]


def main():
    try:
        import torch
    except ImportError:
        print("skipped: no torch")
        sys.exit(77)
    if not os.path.isfile(UTILS) or not os.access(PROBE, os.X_OK):
        print(f"skipped: {UTILS} or {PROBE} missing")
        sys.exit(77)
    reference = megatron_function(torch)
    eod, seq = 7, 9
    rng = random.Random(18)
    batches = [[[1, 2, 7, 3, 4, 5, 7, 6, 2]], [[7, 1, 2, 3, 4, 5, 6, 1, 7]], [[1, 2, 3, 4, 5, 6, 1, 2, 3]],
               [[7, 7, 1, 7, 2, 3, 7, 7, 4], [1, 1, 1, 1, 7, 1, 1, 1, 1]]]
    batches += [[[rng.choice([1, 2, 3, 7]) for _ in range(seq)] for _ in range(3)] for _ in range(20)]
    cases, lines = [], []
    for rows in batches:
        for rp in (False, True):
            for ra in (False, True):
                cases.append((rows, rp, ra))
                lines.append(f"{eod} {int(rp)} {int(ra)} {seq} " + " ".join(str(t) for r in rows for t in r))
    out = subprocess.run([PROBE], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout
    failures = 0
    for (rows, rp, ra), got in zip(cases, out.splitlines(), strict=True):
        mask, _, pos = reference(torch.tensor(rows), eod, rp, ra, eod_mask_loss=False, prefix_indices=None,
                                 loss_on_targets_only=False)[0:3]
        positions, shape_and_mask = got.split("|")
        shape, values = shape_and_mask.split(":")
        want = (pos.flatten().tolist(), list(mask.shape), mask.long().flatten().tolist())
        have = ([int(x) for x in positions.split()], [int(x) for x in shape.split()], [int(x) for x in values.split()])
        if have != want:
            failures += 1
            print(f"FAIL: rows {rows} reset_position_ids={rp} reset_attention_mask={ra}:\n  mds  {have}\n  BMD  {want}")
    print(f"{len(cases)} cases: {len(cases) - failures} equal")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
