#!/usr/bin/env python3
"""mds-ckpt-diff against torch's own reading of the same files (BigScience-style checkpoints written by
bmd_checkpoint.py: BLOOM-like bf16 model with the embedding LayerNorm, ALiBi, a padded vocabulary, BF16 optimizer
files with per-parameter Adam moments):
  - the same model at TP1 x PP1 and reshaped by mds-ckpt-reshape to TP2 x PP2 x DP2 (optimizer included, vocabulary
    re-padded 128 -> 256 rows) compares equal, weights and --optimizer; so does its mds-ckpt-to-hf export (BLOOM),
    and a GPT2 export of a GPT-style TP2 checkpoint (Conv1D transposes and QKV order undone);
  - a later save with two tensors changed: exit 1, exactly those two listed, max |a-b|, max relative difference and
    the count of differing elements equal what torch computes from the files; --atol above the largest difference
    gives exit 0; --json carries the same numbers;
  - planted BLOOM restart fault 1 (embedding LayerNorm reset to ones / zeros): reported as the only differing tensors,
    at the top;
  - planted fault 2 (PP=2: the last stage's fp32 copy of the tied word embedding perturbed in its optimizer file):
    "tied copies differ" in B with the files and the difference, exit 1, though the weights are equal;
  - --optimizer: one exp_avg value perturbed is found as that parameter's exp_avg, one element; without --optimizer
    the two are equal;
  - a truncated layer file and a garbage mp_rank file: exit 2 naming the file; a missing path and --optimizer with
    a Hugging Face folder: exit 2;
  - where mds-train is built, fp16 ZeRO files (zero_pp_rank_*): a DP=3 ZeRO-1 save (padded partitions) equals itself
    with --optimizer; one changed exp_avg value is that parameter's state, one element; a zeroed fp32 master matches
    torch's count, max and norm; the DP padding is not compared; a param_slice_mappings entry off DeepSpeed's layout
    exits 2 naming the file; at PP=2 (ZeRO stage 0) a perturbed last-stage tied fp32 copy is reported.
Exits 77 without the binaries or without torch."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

BIN = os.environ.get("MDS_BIN", "build/bin")
TOOL = os.path.join(BIN, "mds-ckpt-diff")
RESHAPE = os.path.join(BIN, "mds-ckpt-reshape")
TO_HF = os.path.join(BIN, "mds-ckpt-to-hf")
for tool in (TOOL, RESHAPE, TO_HF):
    if not os.path.exists(tool):
        print(f"SKIP: {tool} not built")
        sys.exit(77)
try:
    import torch
except Exception as e:  # noqa: BLE001
    print(f"SKIP: torch not importable: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bmd_checkpoint  # noqa: E402

failures = []
SHAPE = bmd_checkpoint.ModelShape(num_layers=2, hidden=16, heads=2, ffn=64, padded_vocab=128, seq=32,
                                  embed_layernorm=True, alibi=True)


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    return cond


def diff(*args):
    r = subprocess.run([TOOL, *args], capture_output=True, text=True)
    return r


def diff_json(*args):
    r = diff(*args, "--json")
    try:
        return r, json.loads(r.stdout)
    except json.JSONDecodeError:
        check(False, f"--json output is not JSON: {r.stdout[:300]!r} {r.stderr[-300:]!r}")
        return r, {}


def load(path):
    return torch.load(path, map_location="cpu", weights_only=False)


def step_dir(root):
    with open(os.path.join(root, "latest")) as f:
        return os.path.join(root, f.read().strip())


def edit_layer(root, layer, fn):
    """Applies fn(state_dict, tp_rank) to every TP shard of layer file `layer`."""
    d = step_dir(root)
    for name in sorted(os.listdir(d)):
        if name.startswith(f"layer_{layer:02d}-model_"):
            path = os.path.join(d, name)
            sd = load(path)
            fn(sd, int(name[15:17]))
            torch.save(sd, path)


def stats(a, b):
    """max |a-b|, max |a-b|/|b| (b != 0), count differing: numpy.allclose's rule with atol = rtol = 0."""
    a, b = a.double(), b.double()
    d = (a - b).abs()
    nz = b != 0
    rel = (d[nz] / b[nz].abs()).max().item() if nz.any() else 0.0
    if ((b == 0) & (d > 0)).any():
        rel = float("inf")
    return d.max().item(), rel, int((d > 0).sum().item())


def close(x, y):
    if x is None or y is None:
        return x is y or (x is None and y == float("inf")) or (y is None and x == float("inf"))
    return abs(x - y) <= 1e-6 * max(1.0, abs(y))


with tempfile.TemporaryDirectory() as tmp:
    base = os.path.join(tmp, "base")
    weights = bmd_checkpoint.make_checkpoint(base, SHAPE, tp=1, pp=1, dp=1, iteration=10, original_vocab=100, moments_seed=3)

    # ---- same model, other layout: TP1 PP1 vs TP2 PP2 DP2 (vocabulary re-padded) ----
    reshaped = os.path.join(tmp, "tp2pp2")
    r = subprocess.run([RESHAPE, base, reshaped, "--target-tp", "2", "--target-pp", "2", "--target-dp", "2", "--with-optimizer",
                        "--quiet"], capture_output=True, text=True)
    check(r.returncode == 0, f"reshape failed: {r.stderr[-500:]}")
    r = diff(base, reshaped)
    check(r.returncode == 0, f"TP1 vs TP2xPP2: exit {r.returncode}: {r.stdout[-800:]} {r.stderr[-500:]}")
    check("0 differ, 0 only in A, 0 only in B" in r.stdout, f"TP1 vs TP2xPP2 summary: {r.stdout[-300:]}")
    r, j = diff_json(base, reshaped, "--optimizer")
    check(r.returncode == 0, f"TP1 vs TP2xPP2 --optimizer: exit {r.returncode}: {r.stdout[-800:]} {r.stderr[-500:]}")
    n_weights = len(weights)
    check(j.get("compared") == n_weights * 4 + 1, f"--optimizer compares weights, 3 states each and the step: {j.get('compared')}")
    check(j.get("tied_checked", 0) >= 3, f"the reshaped PP2 checkpoint's tied copies are checked: {j.get('tied_checked')}")

    # ---- checkpoint vs its Hugging Face export (BLOOM), and the export vs the reshaped one ----
    hf = os.path.join(tmp, "hf")
    r = subprocess.run([TO_HF, base, hf, "--no-tokenizer", "--quiet"], capture_output=True, text=True)
    check(r.returncode == 0, f"to-hf failed: {r.stderr[-500:]}")
    for a, b in ((base, hf), (hf, reshaped)):
        r = diff(a, b)
        check(r.returncode == 0, f"{os.path.basename(a)} vs {os.path.basename(b)}: exit {r.returncode}: {r.stdout[-800:]} {r.stderr[-500:]}")
    r = diff(hf, base, "--optimizer")
    check(r.returncode == 2 and "optimizer" in r.stderr, f"--optimizer with a Hugging Face folder: {r.returncode} {r.stderr}")

    # GPT2 export (transposed Conv1D weights, [3, n, d] QKV rows) of a GPT-style TP2 checkpoint.
    gpt = os.path.join(tmp, "gpt")
    bmd_checkpoint.make_checkpoint(gpt, bmd_checkpoint.ModelShape(num_layers=2, hidden=16, heads=4, ffn=64, padded_vocab=128),
                                   tp=2, pp=1, dp=1, write_optimizer=False)
    gpt_hf = os.path.join(tmp, "gpt_hf")
    r = subprocess.run([TO_HF, gpt, gpt_hf, "--no-tokenizer", "--quiet"], capture_output=True, text=True)
    check(r.returncode == 0, f"to-hf gpt2 failed: {r.stderr[-500:]}")
    r = diff(gpt, gpt_hf)
    check(r.returncode == 0, f"GPT2 export: exit {r.returncode}: {r.stdout[-800:]} {r.stderr[-500:]}")
    # One element of c_attn changed in the export: found under Megatron's name, one element.
    from safetensors.torch import load_file, save_file
    st = load_file(os.path.join(gpt_hf, "model.safetensors"))
    st["transformer.h.1.attn.c_attn.weight"][3, 40] += 0.25
    save_file(st, os.path.join(gpt_hf, "model.safetensors"), metadata={"format": "pt"})
    r, j = diff_json(gpt, gpt_hf)
    names = [t["name"] for t in j.get("tensors", [])]
    check(r.returncode == 1 and names == ["layers.1.self_attention.query_key_value.weight"],
          f"GPT2 export with one QKV element changed: {r.returncode} {names}")
    check(j.get("tensors") and j["tensors"][0]["differing"] == 1, f"one element differs: {j.get('tensors')}")

    # ---- a later save with two tensors changed ----
    later = os.path.join(tmp, "later")
    bmd_checkpoint.make_checkpoint(later, SHAPE, tp=1, pp=1, dp=1, iteration=20, original_vocab=100, moments_seed=3)
    g = torch.Generator().manual_seed(7)
    changed = {}

    def bump_dense(sd, _):
        w = sd["self_attention.dense.weight"]
        mask = torch.rand(w.shape, generator=g) < 0.3
        sd["self_attention.dense.weight"] = torch.where(mask, w + torch.randn(w.shape, generator=g).to(w.dtype) * 0.01, w)
        changed["layers.1.self_attention.dense.weight"] = (w.clone(), sd["self_attention.dense.weight"].clone())

    def bump_final(sd, _):
        b = sd["bias"]
        sd["bias"] = b * 1.5
        changed["final_layernorm.bias"] = (b.clone(), sd["bias"].clone())

    edit_layer(later, 4, bump_dense)
    edit_layer(later, 6, bump_final)
    r, j = diff_json(base, later)
    check(r.returncode == 1, f"later save: exit {r.returncode}")
    check(j.get("compared") == n_weights and j.get("differ") == 2 and j.get("only_in_a_count") == 0
          and j.get("only_in_b_count") == 0, f"later save counts: {j.get('compared')} {j.get('differ')}")
    got = {t["name"]: t for t in j.get("tensors", [])}
    check(set(got) == set(changed), f"later save: differing tensors {sorted(got)}")
    for name, (a, b) in changed.items():
        if name not in got:
            continue
        mx, rel, count = stats(a, b)
        t = got[name]
        check(close(t["max_abs"], mx) and close(t["max_rel"], rel) and t["differing"] == count and t["numel"] == a.numel(),
              f"{name}: mds {t['max_abs']} {t['max_rel']} {t['differing']}/{t['numel']} vs torch {mx} {rel} {count}/{a.numel()}")
        diff_norm = (a.double() - b.double()).norm().item()
        check(close(t["diff_norm"], diff_norm) and close(t["norm_a"], a.double().norm().item()), f"{name}: norms")
    r = diff(base, later)
    check("2 differ, 0 only in A, 0 only in B" in r.stdout and f"{n_weights} tensors compared" in r.stdout,
          f"later save summary: {r.stdout[-400:]}")
    largest = max(stats(a, b)[0] for a, b in changed.values())
    r = diff(base, later, "--atol", str(largest * 1.01))
    check(r.returncode == 0, f"--atol above the largest difference: exit {r.returncode}: {r.stdout[-400:]}")
    r = diff(base, later, "--atol", str(largest * 0.5))
    check(r.returncode == 1, f"--atol below the largest difference: exit {r.returncode}")
    r = diff(base, later, "--quiet")
    check(r.returncode == 1 and r.stdout == "", f"--quiet: {r.returncode} {r.stdout!r}")

    # ---- planted fault 1: the embedding LayerNorm reset to its init on resume ----
    fault1 = os.path.join(tmp, "fault1")
    shutil.copytree(reshaped, fault1)

    def reset_norm(sd, _):
        sd["word_embeddings.norm.weight"] = torch.ones_like(sd["word_embeddings.norm.weight"])
        sd["word_embeddings.norm.bias"] = torch.zeros_like(sd["word_embeddings.norm.bias"])

    edit_layer(fault1, 1, reset_norm)
    r, j = diff_json(base, fault1)
    names = [t["name"] for t in j.get("tensors", [])]
    check(r.returncode == 1 and sorted(names) == ["embedding.word_embeddings.norm.bias", "embedding.word_embeddings.norm.weight"],
          f"fault 1: exit {r.returncode}, differing {names}")
    if names:
        top = j["tensors"][0]
        w = weights[(1, top["name"].replace("embedding.", ""))]
        ref = torch.ones_like(w) if top["name"].endswith("weight") else torch.zeros_like(w)
        mx, rel, count = stats(w, ref)
        check(close(top["max_abs"], mx) and top["differing"] == count, f"fault 1 numbers: {top} vs torch {mx} {count}")
    r = diff(base, fault1)
    check(r.stdout.startswith("embedding.word_embeddings.norm."), f"fault 1 is the top line: {r.stdout[:200]}")

    # ---- planted fault 2: the last stage's copy of the tied word embedding diverged ----
    fault2 = os.path.join(tmp, "fault2")
    shutil.copytree(reshaped, fault2)
    d = step_dir(fault2)
    hit = None
    for dp_rank in (1, 0):  # last stage (pp 1), TP rank 1: mp_rank_03
        path = os.path.join(d, f"bf16_zero_pp_rank_{dp_rank}_mp_rank_03_optim_states.pt")
        sd = load(path)
        osd = sd["optimizer_state_dict"]
        for gi, mapping in enumerate(osd["param_slice_mappings"]):
            frag = mapping.get("tied_modules.embed.word_embeddings.weight")
            if frag is not None and frag.numel > 0:
                hit = (gi, frag.start + frag.numel // 2)
                break
        if hit:
            break
    if check(hit is not None, "fault 2: the last stage holds the tied embedding in its optimizer files"):
        gi, k = hit
        osd["single_partition_of_fp32_groups"][gi][k] += 0.5
        torch.save(sd, path)
        r = diff(reshaped, fault2)
        check(r.returncode == 1, f"fault 2: exit {r.returncode}: {r.stdout[-600:]} {r.stderr[-300:]}")
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("tied copies differ in B")]
        check(len(line) == 1 and "tied_modules.embed.word_embeddings.weight:fp32 (TP rank 1)" in line[0]
              and "mp_rank_01" in line[0] and "mp_rank_03" in line[0] and "max|a-b| 0.5," in line[0] and "1/" in line[0],
              f"fault 2 line: {line}")
        check("0 differ, 0 only in A, 0 only in B" in r.stdout, f"fault 2: the weights are equal: {r.stdout[-300:]}")
        r = diff(fault2, fault2)
        check(r.returncode == 1 and "tied copies differ in A" in r.stdout and "tied copies differ in B" in r.stdout,
              f"fault 2 against itself: {r.returncode}")

    # ---- --optimizer: one exp_avg value ----
    opt = os.path.join(tmp, "opt")
    shutil.copytree(base, opt)
    path = os.path.join(step_dir(opt), "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")
    sd = load(path)
    osd = sd["optimizer_state_dict"]
    pname, frag = next(iter(osd["param_slice_mappings"][1].items()))
    before = osd["base_optimizer_state"]["state"][1]["exp_avg"][frag.start + 5].item()
    osd["base_optimizer_state"]["state"][1]["exp_avg"][frag.start + 5] += 1e-3
    after = osd["base_optimizer_state"]["state"][1]["exp_avg"][frag.start + 5].item()
    torch.save(sd, path)
    layer, _, rest = pname.partition(".")
    ours = "embedding." + pname[len("tied_modules.embed."):] if pname.startswith("tied_modules.") else f"layers.{int(layer) - 3}.{rest}"
    r = diff(base, opt)
    check(r.returncode == 0, f"exp_avg changed, without --optimizer: exit {r.returncode}")
    r, j = diff_json(base, opt, "--optimizer")
    t = j.get("tensors", [])
    check(r.returncode == 1 and [x["name"] for x in t] == [ours + ":exp_avg"], f"--optimizer finds {ours}:exp_avg: {[x['name'] for x in t]}")
    if t:
        check(t[0]["differing"] == 1 and close(t[0]["max_abs"], abs(after - before)), f"--optimizer numbers: {t[0]} vs {after - before}")

    # ---- unreadable inputs: exit 2 naming the file ----
    bad = os.path.join(tmp, "bad")
    shutil.copytree(base, bad)
    victim = os.path.join(step_dir(bad), "layer_03-model_00-model_states.pt")
    with open(victim, "r+b") as f:
        f.truncate(os.path.getsize(victim) // 2)
    r = diff(base, bad)
    check(r.returncode == 2 and "layer_03-model_00-model_states.pt" in r.stderr, f"truncated file: {r.returncode} {r.stderr[-300:]}")
    shutil.rmtree(bad)
    shutil.copytree(base, bad)
    with open(os.path.join(step_dir(bad), "mp_rank_00_model_states.pt"), "wb") as f:
        f.write(b"not a zip file at all" * 10)
    r = diff(bad, base)
    check(r.returncode == 2 and "mp_rank_00_model_states.pt" in r.stderr, f"garbage file: {r.returncode} {r.stderr[-300:]}")
    r = diff(base, os.path.join(tmp, "nowhere"))
    check(r.returncode == 2 and "nowhere" in r.stderr, f"missing path: {r.returncode} {r.stderr[-300:]}")
    r = diff(base)
    check(r.returncode == 2, f"one argument: {r.returncode}")

    # ---- checkpoints mds-train saved (where it is built): PP=2 bf16 BLOOM-style on two processes ----
    TRAIN = os.path.join(BIN, "mds-train")
    if not os.path.exists(TRAIN):
        print("mds-train not built: its checkpoints not tried")
    else:
        source = os.environ.get("MDS_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
        sys.path.insert(0, os.path.join(source, "tests", "integration"))
        import tiny_dataset  # noqa: E402
        from test_train_dp import flags, free_port, start, wait_all  # noqa: E402
        prefix, vocab, merges = tiny_dataset.make(tmp, BIN, source, 1000)
        data = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2"]
        ck = os.path.join(tmp, "trained")
        args = flags(data, iters=6, extra=["--position-embedding-type", "alibi", "--embed-layernorm", "--bf16",
                                           "--pipeline-model-parallel-size", "2", "--save", ck, "--save-interval", "3"])
        outs = wait_all(start(args, 2, free_port()))
        if check(all(o[0] == 0 for o in outs), f"mds-train PP=2: {outs[0][2][-800:]}"):
            # Its tied copies agree (no false alarm on a healthy run), two saves differ everywhere, a TP1 x PP1
            # reshape of it is the same model with the same optimizer states.
            r, j = diff_json(ck, ck, "--optimizer")
            check(r.returncode == 0 and j.get("tied_checked") == 6, f"mds-train checkpoint against itself: {r.returncode} {j}")
            r, j = diff_json(os.path.join(ck, "global_step3"), os.path.join(ck, "global_step6"))
            check(r.returncode == 1 and j.get("differ") == j.get("compared") > 0, f"two mds-train saves: {r.returncode} {j.get('differ')}")
            flat = os.path.join(tmp, "trained_tp1pp1")
            r = subprocess.run([RESHAPE, ck, flat, "--target-tp", "1", "--target-pp", "1", "--with-optimizer", "--quiet"],
                               capture_output=True, text=True)
            check(r.returncode == 0, f"reshape of the mds-train checkpoint: {r.stderr[-400:]}")
            r = diff(ck, flat, "--optimizer")
            check(r.returncode == 0, f"mds-train PP=2 vs its TP1 x PP1 reshape: {r.returncode} {r.stdout[-600:]} {r.stderr[-300:]}")

            # fp16 runs' ZeRO stage 1/2 files (zero_pp_rank_*): DP=3 ZeRO-1 (3 does not divide the groups: the
            # last rank's partition ends with padding), and PP=2 at ZeRO stage 0 (mds-train writes the same files).
            # mds-ckpt-reshape refuses fp16 optimizer files, so no reshape of them is compared.
            z16 = os.path.join(tmp, "fp16_dp3")
            args = flags(data, iters=4, extra=["--fp16", "--initial-loss-scale", "256", "--zero-stage", "1", "--save", z16,
                                               "--save-interval", "4"])
            outs = wait_all(start(args, 3, free_port()))
            if check(all(o[0] == 0 for o in outs), f"mds-train fp16 DP=3: {outs[0][2][-800:]}"):
                r, j = diff_json(z16, z16, "--optimizer")
                n = j.get("compared", 0)
                check(r.returncode == 0 and n > 1 and (n - 1) % 4 == 0 and not j.get("notes"),
                      f"fp16 ZeRO-1 checkpoint against itself with --optimizer: {r.returncode} {r.stderr[-400:]} {j.get('notes')}")
                r2, jw = diff_json(z16, z16)
                check(jw.get("compared", 0) * 4 + 1 == n, f"--optimizer adds 3 states per weight and the step: {jw.get('compared')} {n}")
                # One exp_avg value of a parameter split over ranks 0 and 1 (in rank 1's file), the whole fp32 master of
                # another (both its fragments), and the padding at the end of the last rank's exp_avg changed.
                mod = os.path.join(tmp, "fp16_dp3_mod")
                shutil.copytree(z16, mod)
                d = step_dir(mod)
                files = [os.path.join(d, f"zero_pp_rank_{k}_mp_rank_00_optim_states.pt") for k in range(3)]
                sds = [load(f) for f in files]
                osds = [sd["optimizer_state_dict"] for sd in sds]
                check(any(p > 0 for p in osds[2]["group_paddings"]), f"the DP=3 layout has padding: {osds[2]['group_paddings']}")
                split = [(g, name) for g, m in enumerate(osds[1]["param_slice_mappings"]) for name in m
                         if name in osds[0]["param_slice_mappings"][g]]
                check(len(split) >= 2, f"parameters split over ranks 0 and 1: {split}")
                (g1, p1), (g2, p2) = split[0], split[-1]
                frag = osds[1]["param_slice_mappings"][g1][p1]
                moments = osds[1]["base_optimizer_state"]["state"][g1]["exp_avg"]
                before = moments[frag.start + 5].item()
                moments[frag.start + 5] += 1e-3
                delta = abs(moments[frag.start + 5].item() - before)
                master = torch.cat([o["single_partition_of_fp32_groups"][g2][o["param_slice_mappings"][g2][p2].start:][
                    :o["param_slice_mappings"][g2][p2].numel] for o in osds if p2 in o["param_slice_mappings"][g2]])
                for o in osds:
                    if p2 in o["param_slice_mappings"][g2]:
                        f = o["param_slice_mappings"][g2][p2]
                        o["single_partition_of_fp32_groups"][g2][f.start:f.start + f.numel] = 0
                gp = next(g for g, p in enumerate(osds[2]["group_paddings"]) if p > 0)
                osds[2]["base_optimizer_state"]["state"][gp]["exp_avg"][-1] += 5.0
                for sd, f in zip(sds, files):
                    torch.save(sd, f)

                def ours(p):
                    layer, _, rest = p.partition(".")
                    if p.startswith("tied_modules."):
                        return "embedding." + p[len("tied_modules.embed."):]
                    return f"layers.{int(layer) - 3}.{rest}" if int(layer) < 5 else f"final_layernorm.{rest}"
                r, j = diff_json(z16, mod, "--optimizer")
                got = {t["name"]: t for t in j.get("tensors", [])}
                want = {ours(p1) + ":exp_avg", ours(p2) + ":fp32"}
                if check(r.returncode == 1 and set(got) == want, f"fp16 ZeRO files: the changed states found: {sorted(got)} vs {sorted(want)}"):
                    t = got[ours(p1) + ":exp_avg"]
                    check(t["differing"] == 1 and close(t["max_abs"], delta), f"one exp_avg element: {t} vs {delta}")
                    t = got[ours(p2) + ":fp32"]
                    check(t["numel"] == master.numel() and t["differing"] == int((master != 0).sum()) and
                          close(t["max_abs"], master.abs().max().item()) and close(t["diff_norm"], master.double().norm().item()),
                          f"fp32 master of {p2} against torch: {t} vs numel {master.numel()} norm {master.double().norm().item()}")
                r = diff(z16, mod)
                check(r.returncode == 0, f"fp16 ZeRO states changed, without --optimizer: exit {r.returncode}")
                print(f"fp16 ZeRO-1 DP=3: {n} entries; {p1}:exp_avg and {p2}:fp32 found as changed")
                # A param_slice_mappings entry that disagrees with DeepSpeed's layout of param_shapes: exit 2 naming the file.
                sd = load(files[0])
                m = sd["optimizer_state_dict"]["param_slice_mappings"][g1]
                m[p1] = type(m[p1])(numel=m[p1].numel, start=m[p1].start + 1)
                torch.save(sd, files[0])
                r = diff(z16, mod, "--optimizer")
                check(r.returncode == 2 and "zero_pp_rank_0_mp_rank_00_optim_states.pt" in r.stderr and p1 in r.stderr,
                      f"a mapping off DeepSpeed's layout: {r.returncode} {r.stderr[-400:]}")

            z16pp = os.path.join(tmp, "fp16_pp2")
            args = flags(data, iters=4, extra=["--fp16", "--initial-loss-scale", "256", "--pipeline-model-parallel-size", "2", "--zero-stage", "0",
                                               "--save", z16pp, "--save-interval", "4"])
            outs = wait_all(start(args, 2, free_port()))
            if check(all(o[0] == 0 for o in outs), f"mds-train fp16 PP=2: {outs[0][2][-800:]}"):
                r, j = diff_json(z16pp, z16pp, "--optimizer")
                check(r.returncode == 0 and j.get("tied_checked") == 6, f"fp16 PP=2 against itself: {r.returncode} {r.stderr[-300:]} {j.get('tied_checked')}")
                # The last stage's fp32 copy of the tied word embedding perturbed: found with and without --optimizer.
                mod = os.path.join(tmp, "fp16_pp2_mod")
                shutil.copytree(z16pp, mod)
                path = os.path.join(step_dir(mod), "zero_pp_rank_0_mp_rank_01_optim_states.pt")
                sd = load(path)
                osd = sd["optimizer_state_dict"]
                g, f = next((g, m["tied_modules.embed.word_embeddings.weight"]) for g, m in enumerate(osd["param_slice_mappings"])
                            if "tied_modules.embed.word_embeddings.weight" in m)
                master = osd["single_partition_of_fp32_groups"][g]
                before = master[f.start + 7].item()
                master[f.start + 7] += 0.5
                delta = abs(master[f.start + 7].item() - before)
                torch.save(sd, path)
                for extra in ([], ["--optimizer"]):
                    r, j = diff_json(z16pp, mod, *extra)
                    td = j.get("tied_differ", [])
                    check(r.returncode == 1 and not j.get("tensors") and len(td) == 1 and td[0].get("side") == "B" and
                          td[0]["name"].endswith(":fp32") and td[0]["last"].endswith("/zero_pp_rank_*_mp_rank_01_optim_states.pt") and
                          td[0]["differing"] == 1 and close(td[0]["max_abs"], delta),
                          f"fp16 tied fp32 copy perturbed {extra}: {r.returncode} {json.dumps(td)[:600]}")
                print("fp16 PP=2: tied copies checked from the ZeRO files")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("OK: mds-ckpt-diff")
