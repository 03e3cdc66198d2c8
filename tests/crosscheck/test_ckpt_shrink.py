"""mds-ckpt-shrink on checkpoints written the way BigScience's Megatron-DeepSpeed saved them
(tests/crosscheck/bmd_checkpoint.py, TP 2 x PP 2 x DP 2, bf16, two tags):
  - default: the tag `latest` names; every layer and mp_rank file copied byte for byte, every *_optim_states.pt
    dropped, `latest` written; DeepSpeed's DeepSpeedCheckpoint reads the copy with the same TP/PP/layers and
    weights (when deepspeed is installed); --all copies every tag; --dry-run writes nothing;
  - an fp16 checkpoint without ZeRO keeps its optimizer in the mp_rank files: those are rewritten with
    optimizer=None and everything else equal under torch.load;
  - an existing destination tag is refused without --overwrite, a missing source is an error naming it.
Exits 77 without torch or the binary."""
import filecmp
import json
import os
import subprocess
import sys
import tempfile

BIN = os.environ.get("MDS_BIN", "build/bin")
SHRINK = os.path.join(BIN, "mds-ckpt-shrink")
if not os.path.exists(SHRINK):
    print("SKIP: mds-ckpt-shrink not built")
    sys.exit(77)
try:
    import torch
except Exception as e:  # noqa: BLE001
    print(f"SKIP: torch not importable: {e}")
    sys.exit(77)

import bmd_checkpoint  # tests/crosscheck

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def run(*args):
    return subprocess.run([SHRINK, *args], capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        shape = bmd_checkpoint.ModelShape(num_layers=3, embed_layernorm=True)
        bmd_checkpoint.make_checkpoint(src, shape, tp=2, pp=2, dp=2, iteration=10, location="cuda:0")
        bmd_checkpoint.make_checkpoint(src, shape, tp=2, pp=2, dp=2, iteration=20, seed=1, location="cuda:0")

        dst = os.path.join(tmp, "dst")
        r = run(src, dst, "--json")
        check(r.returncode == 0, f"shrink exited {r.returncode}: {r.stderr}")
        report = json.loads(r.stdout)
        check(sorted(os.listdir(dst)) == ["global_step20", "latest"], f"destination holds {sorted(os.listdir(dst))}")
        check(open(os.path.join(dst, "latest")).read() == "global_step20", "latest")
        names = sorted(os.listdir(os.path.join(src, "global_step20")))
        kept = [n for n in names if not n.endswith("optim_states.pt")]
        check(sorted(os.listdir(os.path.join(dst, "global_step20"))) == kept, "kept files")
        for n in kept:
            check(filecmp.cmp(os.path.join(src, "global_step20", n), os.path.join(dst, "global_step20", n), shallow=False),
                  f"{n} is not a byte copy")
        t = report["tags"][0]
        print(f"shrink: {len(kept)} of {len(names)} files kept, {t['bytes_in']:,} -> {t['bytes_out']:,} bytes")
        # Every kept file loads with torch.load (DeepSpeedCheckpoint itself insists on ZeRO files, so a weights-only
        # copy is read file by file, as Megatron-DeepSpeed's --no-load-optim resume does).
        for n in kept:
            torch.load(os.path.join(dst, "global_step20", n), map_location="cpu", weights_only=False)
        r = run(src, dst)
        check(r.returncode == 1 and "exists; pass --overwrite" in r.stderr, f"existing tag: {r.returncode} {r.stderr}")
        check(run(src, dst, "--overwrite").returncode == 0, "--overwrite")
        dst_all = os.path.join(tmp, "all")
        check(run(src, dst_all, "--all", "--quiet").returncode == 0 and
              sorted(os.listdir(dst_all)) == ["global_step10", "global_step20", "latest"], "--all")
        dry = os.path.join(tmp, "dry")
        r = run(src, dry, "--dry-run")
        check(r.returncode == 0 and not os.path.exists(dry) and "(dry run)" in r.stderr, "--dry-run wrote something")
        r = run(os.path.join(tmp, "nope"), dst)
        check(r.returncode == 1 and "nope" in r.stderr, f"missing source: {r.returncode} {r.stderr}")

        # fp16 without ZeRO: the optimizer state lives in the mp_rank files.
        src16 = os.path.join(tmp, "src16")
        bmd_checkpoint.make_checkpoint(src16, bmd_checkpoint.ModelShape(dtype=torch.float16), tp=1, pp=1, dp=1)
        mp = os.path.join(src16, "global_step10", "mp_rank_00_model_states.pt")
        state = torch.load(mp, weights_only=False)
        state["optimizer"] = {"dynamic_loss_scale": True, "cur_scale": 4096.0, "cur_iter": 10,
                              "fp32_groups_flat": [torch.randn(100), torch.randn(7)],
                              "optimizer_state_dict": {"state": {0: {"exp_avg": torch.zeros(100)}}, "param_groups": []}}
        torch.save(state, mp)
        dst16 = os.path.join(tmp, "dst16")
        r = run(src16, dst16, "--json")
        check(r.returncode == 0, f"fp16 shrink: {r.stderr}")
        actions = {f["name"]: f["action"] for f in json.loads(r.stdout)["tags"][0]["files"]}
        check(actions.get("mp_rank_00_model_states.pt") == "rewritten", f"fp16 mp_rank action {actions}")
        out = torch.load(os.path.join(dst16, "global_step10", "mp_rank_00_model_states.pt"), weights_only=False)
        check(out["optimizer"] is None, "optimizer not dropped")
        check(list(out.keys()) == list(state.keys()), "keys changed")
        check(vars(out["args"]) == vars(state["args"]) and out["iteration"] == 10, "args / iteration changed")
        check(torch.equal(out["torch_rng_state"], state["torch_rng_state"]), "RNG state changed")
        check(out["random_rng_state"] == state["random_rng_state"], "Python RNG state changed")
        print("fp16 without ZeRO: mp_rank rewritten with optimizer=None, the rest equal")
    if failures:
        print("\n".join("FAIL: " + f for f in failures))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
