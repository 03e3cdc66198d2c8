#!/usr/bin/env python3
"""mds-ckpt-reshape against DeepSpeed and against the fixtures' own global tensors:
  - stage boundaries: bin/partition_probe equals deepspeed.runtime.utils.partition_balanced / partition_uniform (the
    installed DeepSpeed, dynamic programming) on random weight vectors and part counts, and DeepSpeed 0.6.5's
    binary-search versions on the outputs recorded from that release (partition_v065_golden.json); the stages of a
    reshaped checkpoint are GPTModelPipe's spec list cut by DeepSpeed's partition_balanced for 'type:transformer',
    'type:transformer|embedding', 'parameters' and 'uniform';
  - BigScience-style checkpoints (bmd_checkpoint.py: TP 2 x PP 2 x DP 2, bf16 BLOOM-like shape with embedding
    LayerNorm, ALiBi and a padded vocabulary; the last stage holding the tied embedding; random Adam moments)
    reshaped to (tp, pp, dp) = (1, 1, 2), (4, 1, 2), (1, 3, 1), (2, 2, 4): every file loads with torch.load, the
    mp_rank files carry the new sizes and keep iteration / tokens / LR schedule / consumed samples, the merged
    weights equal the fixture's (vocabulary rows past the original size zero when the padded size changes), the
    target's optimizer fragments reassemble (own Python reassembly from param_slice_mappings) to the source's
    per-parameter fp32 / exp_avg / exp_avg_sq, DeepSpeed's DeepSpeedCheckpoint reads the result with the right
    TP / PP / DP and layers, and DeepSpeed's ds_to_universal gives the same universal tensors for the source, for
    the target and as mds's own --universal folder;
  - there and back (tp2 pp2 -> tp1 pp1 -> tp2 pp2, optimizer included) returns bitwise the same tensors in every
    layer and optimizer file;
  - fp16 (weights only; --with-optimizer refused for ZeRO fp16 files), replicated shards that drifted apart (averaged
    in fp32), GLU dense_h_to_4h (two sub-parameters), 6 heads split 3 ways on head boundaries, QKV rows of
    checkpoint_version 0 and 1.0 (weights and optimizer states) normalised;
  - where mds-train is built: it resumes a TP2 x PP2 x DP2 checkpoint reshaped to TP1 PP1 DP1 with the source's weights
    and optimizer states; and a checkpoint mds-train saved on 2 data-parallel processes (one optimizer partition
    per rank) is read by DeepSpeedCheckpoint (DP 2) and ds_to_universal, its partitions reassemble to masters that
    round to the saved weights, ZeRO-0 and ZeRO-1 runs save the same states, and it resumes on 1 and 3 processes;
    one saved at TP=2 x DP=2 is read as TP 2 / DP 2 and its shards, merged by this test's Megatron rules and by
    ds_to_universal, are the model a one-process run saved at the same iteration;
  - bad inputs (--target-tp 0, heads not divisible, a missing layer or optimizer file, an existing destination)
    fail with a message naming the problem, a non-zero exit and no output.
Exits 77 without the binary or without torch / deepspeed."""
import collections
import contextlib
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import traceback

BIN = os.environ.get("MDS_BIN", "build/bin")
TOOL = os.path.join(BIN, "mds-ckpt-reshape")
PROBE = os.path.join(BIN, "partition_probe")
HERE = os.path.dirname(os.path.abspath(__file__))
if not os.path.exists(TOOL) or not os.path.exists(PROBE):
    print("SKIP: mds-ckpt-reshape / partition_probe not built")
    sys.exit(77)
try:
    import torch
    import deepspeed  # noqa: F401
    from deepspeed.runtime.utils import partition_balanced, partition_uniform
    from deepspeed.checkpoint import DeepSpeedCheckpoint
except Exception as e:  # noqa: BLE001
    print(f"SKIP: torch / deepspeed not importable: {e}")
    sys.exit(77)

import bmd_checkpoint  # noqa: E402  (tests/crosscheck)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    return cond


def reshape(src, dst, *args):
    return subprocess.run([TOOL, src, dst, "--quiet", *args], capture_output=True, text=True)


def load(path):
    return torch.load(path, map_location="cpu", weights_only=False)


# ---- Megatron's TP rules, written out independently of mds (specs/checkpoints.md §4, §6.2) -------------------

split_dim = bmd_checkpoint.tp_split_dim  # the fixture's writer uses the same table


def merge(shards, name, glu=False):
    dim = split_dim(name)
    if dim is None:
        if all(torch.equal(s, shards[0]) for s in shards):
            return shards[0]
        total = shards[0].float()
        for s in shards[1:]:
            total = total + s.float()
        return (total / len(shards)).to(shards[0].dtype)
    if glu and name.startswith("mlp.dense_h_to_4h."):
        halves = [s.chunk(2, dim=0) for s in shards]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
    return torch.cat(shards, dim=dim)


def split(tensor, name, tp, rank, glu=False):
    dim = split_dim(name)
    if dim is None:
        return tensor
    if glu and name.startswith("mlp.dense_h_to_4h."):
        a, b = tensor.chunk(2, dim=0)
        return torch.cat([a.chunk(tp, dim=0)[rank], b.chunk(tp, dim=0)[rank]], dim=0)
    return tensor.chunk(tp, dim=dim)[rank]


def layer_indices(step):
    return sorted({int(f[6:8]) for f in os.listdir(step) if f.startswith("layer_")})


def tp_of(step):
    return len([f for f in os.listdir(step) if f.startswith("layer_01-")])


def read_weights(step, glu=False):
    """{(layer, name): global tensor} merged from the layer files."""
    out = {}
    tp = tp_of(step)
    for layer in layer_indices(step):
        shards = [load(os.path.join(step, f"layer_{layer:02d}-model_{r:02d}-model_states.pt")) for r in range(tp)]
        for name in shards[0]:
            out[(layer, name)] = merge([s[name] for s in shards], name, glu)
    return out


def ds_name(layer, name):
    return ("tied_modules.embed." if layer == 1 else f"{layer}.") + name


def read_optimizer(step):
    """Per-parameter global fp32 / exp_avg / exp_avg_sq reassembled from param_slice_mappings (DP fragments in DP
    order, reshaped with the mp_rank param_shapes, merged over TP), plus each file's layout facts."""
    tp = tp_of(step)
    mp_files = sorted(f for f in os.listdir(step) if f.startswith("mp_rank_"))
    pp = len(mp_files) // tp
    optim = sorted(f for f in os.listdir(step) if f.startswith("bf16_zero_pp_rank_"))
    dp = len(optim) // (pp * tp)
    shapes = {}
    for mp in range(pp * tp):
        for group in load(os.path.join(step, f"mp_rank_{mp:02d}_model_states.pt"))["param_shapes"]:
            for name, shape in group.items():
                shapes[(name, mp % tp)] = tuple(shape)
    pieces = collections.defaultdict(list)  # (name, tp, pp) -> [(dp, {state: piece})]
    layout = []
    for mp in range(pp * tp):
        for d in range(dp):
            sd = load(os.path.join(step, f"bf16_zero_pp_rank_{d}_mp_rank_{mp:02d}_optim_states.pt"))
            osd = sd["optimizer_state_dict"]
            layout.append((mp, d, osd))
            for g, mapping in enumerate(osd["param_slice_mappings"]):
                flat = {"fp32": osd["single_partition_of_fp32_groups"][g],
                        "exp_avg": osd["base_optimizer_state"]["state"][g]["exp_avg"],
                        "exp_avg_sq": osd["base_optimizer_state"]["state"][g]["exp_avg_sq"]}
                for name, frag in mapping.items():
                    pieces[(name, mp % tp, mp // tp)].append(
                        (d, {k: v[frag.start:frag.start + frag.numel] for k, v in flat.items()}))
    states, tied_copies = {}, {}
    names = sorted({k[0] for k in pieces})
    for name in names:
        per_stage = {}
        for (n, r, s) in pieces:
            if n == name:
                per_stage.setdefault(s, {})[r] = sorted(pieces[(n, r, s)], key=lambda x: x[0])
        merged_by_stage = {}
        for s, by_tp in per_stage.items():
            merged = {}
            for key in ("fp32", "exp_avg", "exp_avg_sq"):
                slices = [torch.cat([p[1][key] for p in by_tp[r]]).reshape(shapes[(name, r)]) for r in range(tp)]
                merged[key] = merge(slices, name.split(".", 1)[1] if not name.startswith("tied_modules.") else name[len("tied_modules.embed."):])
            merged_by_stage[s] = merged
        first = min(merged_by_stage)
        states[name] = merged_by_stage[first]
        for s in merged_by_stage:
            if s != first:
                tied_copies[(name, s)] = merged_by_stage[s]
    return states, tied_copies, layout, (tp, pp, dp)


def check_layout(step, where, dp, source_param_groups):
    """The BF16 flat layout of §5.2 in every optimizer file."""
    _, _, layout, _ = read_optimizer(step)
    for mp, d, osd in layout:
        w = f"{where} mp {mp} dp {d}"
        check(osd["partition_count"] == [dp] * 3, f"{w}: partition_count {osd['partition_count']}")
        pads = osd["group_paddings"]
        for g in range(3):
            part = osd["single_partition_of_fp32_groups"][g]
            numel = sum(f.numel for f in osd["param_slice_mappings"][g].values())
            pg = dict(osd["base_optimizer_state"]["param_groups"][g])
            check(pg.pop("params") == [g], f"{w}: params of group {g}")
            src_pg = dict(source_param_groups[g])
            src_pg.pop("params")
            check(pg == src_pg, f"{w}: param_groups[{g}] {pg} != {src_pg}")
            check(part.numel() * dp % (2 * dp) == 0, f"{w}: group {g} flat buffer {part.numel() * dp} not a multiple of 2*D")
            if d != dp - 1:
                check(pads[g] == 0, f"{w}: padding {pads[g]} on a rank that is not the last")
            # Fragments start at the partition's beginning and follow each other; the rest is padding (zeros).
            starts = sorted((f.start, f.numel) for f in osd["param_slice_mappings"][g].values())
            pos = 0
            for start, n in starts:
                check(start == pos, f"{w}: group {g} fragment at {start}, expected {pos}")
                pos = start + n
            for key, t in (("fp32", part), ("exp_avg", osd["base_optimizer_state"]["state"][g]["exp_avg"]),
                           ("exp_avg_sq", osd["base_optimizer_state"]["state"][g]["exp_avg_sq"])):
                check(t.dtype == torch.float32 and t.numel() == part.numel(), f"{w}: {key} of group {g}")
                check(not t[numel:].any(), f"{w}: {key} of group {g} padding is not zero")
    return sum(sum(osd["group_paddings"]) for _, _, osd in layout)


# ---- the GPTModelPipe spec list and DeepSpeed's partition ----------------------------------------------------

def expected_stages(layers, pp, method, weights_per_layer=None, half=True, algorithm=partition_balanced, uniform=partition_uniform):
    embed, norm = layers[0], layers[-1]
    specs = [("_to_float16", None)] + [("<lambda>", None)] * (embed - 1) + [("EmbeddingPipe", embed)]
    specs += [("<lambda>", None)] * (layers[1] - embed - 1)
    specs += [("ParallelTransformerLayerPipe", i) for i in layers[1:-1]]
    specs += [("<lambda>", None)] * (norm - layers[-2] - 1) + [("MixedFusedLayerNorm", norm), ("EmbeddingPipe", None)]
    if half:
        specs.append(("float16_to_fp32", None))
    import re
    m = method.lower()
    if m == "uniform":
        parts = uniform(len(specs), pp)
    elif m == "parameters":
        parts = algorithm([weights_per_layer.get(l, 0) if l is not None else (weights_per_layer[embed] if t == "EmbeddingPipe" else 0)
                           for t, l in specs], pp)
    else:
        rx = re.compile(m.split(":", 1)[1], re.IGNORECASE)
        parts = algorithm([1 if rx.search(t) else 0 for t, _ in specs], pp)
    parts = [int(p) for p in parts]
    return [sorted(l for _, l in specs[parts[s]:parts[s + 1]] if l is not None) for s in range(pp)], parts


def check_partitions():
    rng = random.Random(7)
    lines, expect = [], []
    for _ in range(1500):
        n, m = rng.randint(1, 36), rng.randint(1, 12)
        kind = rng.choice(["bin", "small", "params"])
        w = ([rng.randint(0, 1) for _ in range(n)] if kind == "bin" else [rng.randint(0, 7) for _ in range(n)] if kind == "small"
             else [rng.choice([0, rng.randint(1, 10 ** 9)]) for _ in range(n)])
        if sum(w) == 0:
            w[0] = 1
        lines.append(f"balanced dp {m} " + " ".join(map(str, w)))
        expect.append(" ".join(str(int(x)) for x in partition_balanced(w, m)))
    for n in range(0, 40):
        for m in range(1, 10):
            lines.append(f"uniform dp {m} {n}")
            expect.append(" ".join(str(int(x)) for x in partition_uniform(n, m)))
    golden = json.load(open(os.path.join(HERE, "partition_v065_golden.json")))
    for c in golden["balanced"]:
        lines.append(f"balanced bisect {c['parts']} " + " ".join(map(str, c["weights"])))
        expect.append("error" if c["boundaries"] is None else " ".join(map(str, c["boundaries"])))
    for c in golden["uniform"]:
        lines.append(f"uniform bisect {c['parts']} {c['items']}")
        expect.append(" ".join(map(str, c["boundaries"])))
    out = subprocess.run([PROBE], input="\n".join(lines) + "\n", capture_output=True, text=True).stdout.splitlines()
    check(len(out) == len(lines), f"partition_probe answered {len(out)} of {len(lines)} cases")
    bad = [(l, e, o) for l, e, o in zip(lines, expect, out) if not (o == e or (e == "error" and o.startswith("error")))]
    check(not bad, f"partition: {len(bad)} of {len(lines)} cases differ from DeepSpeed, e.g. {bad[:3]}")
    print(f"partition: {len(lines)} cases equal DeepSpeed's (installed dp, v0.6.5 bisect)")


# ---- fixtures --------------------------------------------------------------------------------------------------

BLOOM = bmd_checkpoint.ModelShape(num_layers=6, hidden=36, heads=4, ffn=144, padded_vocab=256, seq=16,
                                  embed_layernorm=True, alibi=True)
ORIGINAL_VOCAB = 200


def patch_args(step, **attrs):
    for f in os.listdir(step):
        if f.startswith("mp_rank_"):
            sd = load(os.path.join(step, f))
            for k, v in attrs.items():
                setattr(sd["args"], k, v)
            torch.save(sd, os.path.join(step, f))


def expected_weights(fixture, target_vocab):
    out = {}
    for (layer, name), t in fixture.items():
        if name == "word_embeddings.weight" and t.shape[0] != target_vocab:
            w = torch.zeros((target_vocab, t.shape[1]), dtype=t.dtype)
            w[:ORIGINAL_VOCAB] = t[:ORIGINAL_VOCAB]
            t = w
        out[(layer, name)] = t
    return out


def same_tensors(a, b, what):
    keys_ok = check(set(a) == set(b), f"{what}: names differ: {sorted(set(a) ^ set(b))[:6]}")
    if not keys_ok:
        return False
    bad = [k for k in a if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or not torch.equal(a[k], b[k])]
    return check(not bad, f"{what}: {len(bad)} tensors differ, e.g. {bad[:4]}")


def inject_universal_info(src_step, dst_step, glu=False):
    """A copy of a tag whose mp_rank files carry universal_checkpoint_info with BMD's merge rules (as MMD writes it),
    so that the installed ds_to_universal merges BMD checkpoints correctly."""
    shutil.copytree(src_step, dst_step)
    info = {
        "universal_checkpoint_version": 0.2,
        "original_vocab_size": ORIGINAL_VOCAB,
        "vocabulary_parameter_patterns": [r"tied_modules\.embed\.word_embeddings\.weight"],
        "pipeline_replicated_parameter_patterns": [r"tied_modules\.embed\.word_embeddings\.weight"],
        "parameter_to_average_patterns": [r"tied_modules\.embed\.word_embeddings\.norm\.(weight|bias)",
                                          r"\d+\.input_layernorm\.(weight|bias)", r"\d+\.post_attention_layernorm\.(weight|bias)",
                                          r"\d+\.self_attention\.dense\.bias", r"\d+\.mlp\.dense_4h_to_h\.bias", r"\d+\.(weight|bias)$"],
        "parameter_with_row_parallelism_patterns": [r"\d+\.self_attention\.dense\.weight", r"\d+\.mlp\.dense_4h_to_h\.weight"],
    }
    if glu:
        info["parameter_with_2_sub_params_cat_dim_0"] = [r"\d+\.mlp\.dense_h_to_4h\.(weight|bias)"]
    for f in os.listdir(dst_step):
        if f.startswith("mp_rank_"):
            sd = load(os.path.join(dst_step, f))
            sd["universal_checkpoint_info"] = info
            sd["ds_config"] = {}  # a dict, as BMD writes it since 0f23a729 (the installed ds_to_universal insists)
            torch.save(sd, os.path.join(dst_step, f))


def ds_to_universal(step, out):
    """The installed DeepSpeed's ds_to_universal on `step`, in this process (one extract and one merge worker, so no
    process pool; bmd_checkpoint, imported above, provides the megatron.enums module the pickled args name). What it
    prints is shown only when it fails."""
    from deepspeed.checkpoint import ds_to_universal as u
    said, argv = io.StringIO(), sys.argv
    sys.argv = ["ds_to_universal", "--input_folder", step, "--output_folder", out,
                "--num_extract_workers", "1", "--num_merge_workers", "1"]
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            u.main(u.parse_arguments())
        ok = True
    except (Exception, SystemExit):  # noqa: BLE001  (argparse exits)
        said.write(traceback.format_exc())
        ok = False
    finally:
        sys.argv = argv
    check(ok, f"ds_to_universal {step}: {said.getvalue()[-800:]}")
    return ok


def read_universal(folder):
    zero = os.path.join(folder, "zero")
    out = {}
    for name in os.listdir(zero):
        if os.path.isdir(os.path.join(zero, name)):
            for state in ("fp32", "exp_avg", "exp_avg_sq"):
                out[(name, state)] = load(os.path.join(zero, name, f"{state}.pt"))
    return out


def same_universal(a, b, what):
    if not check(set(a) == set(b), f"{what}: universal parameters differ: {sorted(set(a) ^ set(b))[:6]}"):
        return
    bad = []
    for k in a:
        da, db = dict(a[k]), dict(b[k])
        pa, pb = da.pop("param"), db.pop("param")
        if da != db or pa.dtype != pb.dtype or pa.shape != pb.shape or not torch.equal(pa, pb):
            bad.append((k, da, db, tuple(pa.shape), tuple(pb.shape)))
    check(not bad, f"{what}: {len(bad)} universal files differ, e.g. {bad[:3]}")


# ---- the checks ----------------------------------------------------------------------------------------------

def check_bloom(tmp):
    src = os.path.join(tmp, "bloom")
    fixture = bmd_checkpoint.make_checkpoint(src, BLOOM, tp=2, pp=2, dp=2, location="cuda:1", original_vocab=ORIGINAL_VOCAB,
                                             last_stage_tied=True, moments_seed=3, optimizer_via_file_object=True)
    src_step = os.path.join(src, "global_step10")
    src_mp = load(os.path.join(src_step, "mp_rank_00_model_states.pt"))
    src_states, src_tied, src_layout, _ = read_optimizer(src_step)
    source_param_groups = src_layout[0][2]["base_optimizer_state"]["param_groups"]
    check(same_tensors(read_weights(src_step), fixture, "fixture read-back"), "fixture weights")

    # DeepSpeed's own universal conversion of the source, as the reference for every target.
    ref_universal = None
    inj = os.path.join(tmp, "bloom-inj", "global_step10")
    inject_universal_info(src_step, inj)
    if ds_to_universal(inj, os.path.join(tmp, "bloom-inj-uni", "global_step10_universal")):
        ref_universal = read_universal(os.path.join(tmp, "bloom-inj-uni", "global_step10_universal"))

    paddings = 0
    for (tp, pp, dp) in [(1, 1, 2), (4, 1, 2), (1, 3, 1), (2, 2, 4)]:
        what = f"bloom tp2pp2dp2 -> tp{tp}pp{pp}dp{dp}"
        dst = os.path.join(tmp, f"bloom-{tp}{pp}{dp}")
        r = reshape(src, dst, "--target-tp", str(tp), "--target-pp", str(pp), "--target-dp", str(dp), "--with-optimizer", "--universal", "--json")
        if not check(r.returncode == 0, f"{what}: exit {r.returncode}: {r.stderr}"):
            continue
        report = json.loads(r.stdout)
        step = os.path.join(dst, "global_step10")
        check(open(os.path.join(dst, "latest")).read() == "global_step10", f"{what}: latest")
        check(open(os.path.join(dst, "latest_universal")).read() == "global_step10_universal", f"{what}: latest_universal")
        check(not [f for f in os.listdir(dst) if f.startswith(".")], f"{what}: temporary folders left: {os.listdir(dst)}")
        layers = layer_indices(src_step)
        files = sorted(os.listdir(step))
        expect_files = sorted([f"layer_{l:02d}-model_{r:02d}-model_states.pt" for l in layers for r in range(tp)] +
                              [f"mp_rank_{i:02d}_model_states.pt" for i in range(pp * tp)] +
                              [f"bf16_zero_pp_rank_{d}_mp_rank_{i:02d}_optim_states.pt" for d in range(dp) for i in range(pp * tp)])
        check(files == expect_files, f"{what}: files {files}")
        check(report["target"]["files"] == expect_files, f"{what}: --json files")
        for f in files:
            load(os.path.join(step, f))  # every file loads

        # mp_rank files: new sizes, the rest of the source's rank-0 state.
        target_vocab = 256 if tp <= 2 else 512
        stages, _ = expected_stages(layers, pp, "type:transformer")
        check([s["layers"] for s in report["target"]["stages"]] == stages, f"{what}: stages {report['target']['stages']} != {stages}")
        for i in range(pp * tp):
            mp = load(os.path.join(step, f"mp_rank_{i:02d}_model_states.pt"))
            w = f"{what}: mp_rank_{i:02d}"
            check(mp["mp_world_size"] == pp * tp and mp["dp_world_size"] == dp, f"{w}: world sizes")
            a = mp["args"]
            check(type(a).__name__ == "Namespace" and a.tensor_model_parallel_size == tp and a.pipeline_model_parallel_size == pp and
                  a.padded_vocab_size == target_vocab and a.data_parallel_size == dp, f"{w}: args {vars(a)}")
            check(mp["checkpoint_info"] == {"padded_vocab_size": target_vocab, "original_vocab_size": ORIGINAL_VOCAB}, f"{w}: checkpoint_info")
            for k in ("iteration", "tokens", "lr_scheduler", "global_steps", "global_samples", "ds_version", "checkpoint_version"):
                check(mp[k] == src_mp[k], f"{w}: {k} changed")
            check(a.consumed_train_samples == src_mp["args"].consumed_train_samples and a.seed == src_mp["args"].seed, f"{w}: args kept")
            check(torch.equal(mp["torch_rng_state"], src_mp["torch_rng_state"]), f"{w}: RNG state")
            s = i // tp
            names = [n for g in mp["param_shapes"] for n in g]
            prefixes = sorted({1 if n.startswith("tied_modules.") else int(n.split(".")[0]) for n in names})
            expect_prefixes = sorted(set(stages[s]) | ({1} if s == pp - 1 else set()))
            check(prefixes == expect_prefixes, f"{w}: param_shapes layers {prefixes} != {expect_prefixes}")
            check(len(mp["param_shapes"]) == 3, f"{w}: {len(mp['param_shapes'])} param groups")
            check(not (s > 0 and any(n.startswith("tied_modules.embed.word_embeddings.norm") for n in names)),
                  f"{w}: embedding LayerNorm outside the first stage")

        # Weights: the fixture's, with the vocabulary re-padded when its padded size changes.
        same_tensors(read_weights(step), expected_weights(fixture, target_vocab), f"{what}: weights")

        # Optimizer: the same per-parameter states; the BF16 flat layout.
        states, tied, _, degrees = read_optimizer(step)
        check(degrees == (tp, pp, dp), f"{what}: optimizer files say {degrees}")
        paddings += check_layout(step, what, dp, source_param_groups)
        exp_states = {}
        for name, st in src_states.items():
            st = dict(st)
            if name == "tied_modules.embed.word_embeddings.weight" and target_vocab != 256:
                for k in st:
                    v = torch.zeros((target_vocab, st[k].shape[1]))
                    v[:ORIGINAL_VOCAB] = st[k][:ORIGINAL_VOCAB]
                    st[k] = v
            exp_states[name] = st
        check(set(states) == set(exp_states), f"{what}: optimizer parameters {sorted(set(states) ^ set(exp_states))[:5]}")
        bad = [(n, k) for n in states if n in exp_states for k in states[n] if not torch.equal(states[n][k], exp_states[n][k])]
        check(not bad, f"{what}: {len(bad)} optimizer states differ from the source's, e.g. {bad[:4]}")
        for (name, s), st in tied.items():
            check(all(torch.equal(st[k], states[name][k]) for k in st), f"{what}: stage {s} copy of {name} differs from stage 0's")
        check((pp > 1) == bool(tied), f"{what}: tied copies on the last stage: {sorted(tied)}")

        # DeepSpeed reads it.
        ds = DeepSpeedCheckpoint(step)
        check((ds.tp_degree, ds.pp_degree, ds.dp_degree) == (tp, pp, dp), f"{what}: DeepSpeedCheckpoint degrees {(ds.tp_degree, ds.pp_degree, ds.dp_degree)}")
        check(ds.layer_keys == [f"layer_{l:02d}" for l in layers], f"{what}: DeepSpeedCheckpoint layers {ds.layer_keys}")
        check(ds.get_iteration() == 10 and ds.get_args().tensor_model_parallel_size == tp, f"{what}: DeepSpeedCheckpoint args")
        emb = ds.get_embedding_state(0)
        check(torch.equal(emb["word_embeddings.weight"], expected_weights(fixture, target_vocab)[(1, "word_embeddings.weight")].chunk(tp)[0]),
              f"{what}: DeepSpeedCheckpoint embedding")

        # Universal: mds's own folder, DeepSpeed's conversion of the target, of the source.
        mine = read_universal(os.path.join(dst, "global_step10_universal"))
        check(sorted(os.listdir(os.path.join(dst, "global_step10_universal"))) ==
              sorted(["zero"] + [f"mp_rank_{i:02d}_model_states.pt" for i in range(4)]), f"{what}: universal folder")
        if ref_universal is not None:
            same_universal(mine, ref_universal, f"{what}: mds --universal vs ds_to_universal(source)")
            inj_t = os.path.join(tmp, f"inj-{tp}{pp}{dp}", "global_step10")
            inject_universal_info(step, inj_t)
            uni_t = os.path.join(tmp, f"inj-{tp}{pp}{dp}-uni", "global_step10_universal")
            if ds_to_universal(inj_t, uni_t):
                same_universal(read_universal(uni_t), ref_universal, f"{what}: ds_to_universal(target) vs ds_to_universal(source)")
        print(f"{what}: {len(files)} files; weights, optimizer states, DeepSpeedCheckpoint, universal tensors OK")
    check(paddings > 0, "no target has flat-buffer padding; the layout check would be weak")
    return src, fixture


def check_round_trip(tmp, src):
    src_step = os.path.join(src, "global_step10")
    mid, back = os.path.join(tmp, "rt-mid"), os.path.join(tmp, "rt-back")
    r1 = reshape(src, mid, "--target-tp", "1", "--target-pp", "1", "--with-optimizer")
    r2 = reshape(mid, back, "--target-tp", "2", "--target-pp", "2", "--with-optimizer")
    if not check(r1.returncode == 0 and r2.returncode == 0, f"round trip: {r1.stderr} {r2.stderr}"):
        return
    step = os.path.join(back, "global_step10")
    check(sorted(os.listdir(step)) == sorted(os.listdir(src_step)), "round trip: file names")
    nfiles = 0
    for f in sorted(os.listdir(src_step)):
        a, b = load(os.path.join(src_step, f)), load(os.path.join(step, f))
        if f.startswith("layer_"):
            same_tensors(dict(a), dict(b), f"round trip {f}")
        elif f.startswith("bf16_"):
            oa, ob = a["optimizer_state_dict"], b["optimizer_state_dict"]
            for g in range(3):
                check(torch.equal(oa["single_partition_of_fp32_groups"][g], ob["single_partition_of_fp32_groups"][g]), f"round trip {f}: fp32 group {g}")
                for k in ("exp_avg", "exp_avg_sq"):
                    check(torch.equal(oa["base_optimizer_state"]["state"][g][k], ob["base_optimizer_state"]["state"][g][k]), f"round trip {f}: {k} group {g}")
                fa = {n: (x.numel, x.start) for n, x in oa["param_slice_mappings"][g].items()}
                fb = {n: (x.numel, x.start) for n, x in ob["param_slice_mappings"][g].items()}
                check(list(fa.items()) == list(fb.items()), f"round trip {f}: param_slice_mappings group {g}")
            check(oa["base_optimizer_state"]["param_groups"] == ob["base_optimizer_state"]["param_groups"], f"round trip {f}: param_groups")
            check(oa["group_paddings"] == ob["group_paddings"] and oa["partition_count"] == ob["partition_count"], f"round trip {f}: paddings")
        else:
            sa = {n: tuple(s) for g in a["param_shapes"] for n, s in g.items()}
            sb = {n: tuple(s) for g in b["param_shapes"] for n, s in g.items()}
            check(sa == sb, f"round trip {f}: param_shapes")
            check(vars(a["args"]) == vars(b["args"]), f"round trip {f}: args")
        nfiles += 1
    print(f"round trip tp2pp2 -> tp1pp1 -> tp2pp2: {nfiles} files, every tensor bitwise equal")


def check_fp16(tmp):
    src = os.path.join(tmp, "fp16")
    shape = bmd_checkpoint.ModelShape(num_layers=3, dtype=torch.float16, padded_vocab=256)
    fixture = bmd_checkpoint.make_checkpoint(src, shape, tp=2, pp=2, dp=2, original_vocab=ORIGINAL_VOCAB)
    dst = os.path.join(tmp, "fp16-11")
    r = reshape(src, dst, "--target-tp", "1", "--target-pp", "1")
    if check(r.returncode == 0, f"fp16: {r.stderr}"):
        step = os.path.join(dst, "global_step10")
        same_tensors(read_weights(step), expected_weights(fixture, 256), "fp16 tp2pp2 -> tp1pp1 weights")
        check(all(read_weights(step)[k].dtype == torch.float16 for k in fixture), "fp16 dtype kept")
        check(not [f for f in os.listdir(step) if "optim" in f], "fp16: optimizer files written")
    # ZeRO fp16 optimizer shards are another layout: refused, and nothing written.
    step = os.path.join(src, "global_step10")
    for d in range(2):
        for i in range(4):
            torch.save({"optimizer_state_dict": {"zero_stage": 1}}, os.path.join(step, f"zero_pp_rank_{d}_mp_rank_{i:02d}_optim_states.pt"))
    dst2 = os.path.join(tmp, "fp16-opt")
    r = reshape(src, dst2, "--target-tp", "1", "--target-pp", "1", "--with-optimizer")
    check(r.returncode == 1 and "only BF16 optimizer files" in r.stderr and not os.path.exists(dst2), f"fp16 --with-optimizer: {r.returncode} {r.stderr}")
    print("fp16: weights reshaped; --with-optimizer refused for ZeRO fp16 shards")


def check_drifted_replicas(tmp):
    src = os.path.join(tmp, "drift")
    shape = bmd_checkpoint.ModelShape(num_layers=2, padded_vocab=256)
    bmd_checkpoint.make_checkpoint(src, shape, tp=2, pp=1, dp=1, original_vocab=ORIGINAL_VOCAB, write_optimizer=False)
    path = os.path.join(src, "global_step10", "layer_03-model_01-model_states.pt")
    sd = load(path)
    sd["input_layernorm.weight"] = (sd["input_layernorm.weight"].float() + 0.01).to(torch.bfloat16)
    torch.save(sd, path)
    shard0 = load(os.path.join(src, "global_step10", "layer_03-model_00-model_states.pt"))["input_layernorm.weight"]
    expect = ((shard0.float() + sd["input_layernorm.weight"].float()) / 2).to(torch.bfloat16)
    dst = os.path.join(tmp, "drift-1")
    r = reshape(src, dst, "--target-tp", "1", "--target-pp", "1")
    if check(r.returncode == 0, f"drift: {r.stderr}"):
        got = load(os.path.join(dst, "global_step10", "layer_03-model_00-model_states.pt"))["input_layernorm.weight"]
        check(torch.equal(got, expect) and not torch.equal(got, shard0), "drifted replicas are not averaged in fp32")
        dst2 = os.path.join(tmp, "drift-2")
        check(reshape(dst, dst2, "--target-tp", "2", "--target-pp", "1").returncode == 0, "drift split")
        for rank in range(2):
            t = load(os.path.join(dst2, "global_step10", f"layer_03-model_{rank:02d}-model_states.pt"))["input_layernorm.weight"]
            check(torch.equal(t, expect), f"replicated parameter not copied to rank {rank}")
    print("replicas that drifted apart: averaged in fp32, then copied to every new rank")


def check_drifted_optimizer(tmp, bloom_src):
    """Replicated parameters whose fp32 masters drifted apart over TP: averaged in fp32, as ds_to_universal does."""
    src = os.path.join(tmp, "drift-opt")
    shutil.copytree(bloom_src, src)
    step = os.path.join(src, "global_step10")
    before, _, _, _ = read_optimizer(step)
    name = "4.post_attention_layernorm.weight"
    for d in range(2):
        path = os.path.join(step, f"bf16_zero_pp_rank_{d}_mp_rank_01_optim_states.pt")  # stage 0, TP rank 1
        sd = load(path)
        osd = sd["optimizer_state_dict"]
        for g, mapping in enumerate(osd["param_slice_mappings"]):
            if name in mapping:
                f = mapping[name]
                osd["single_partition_of_fp32_groups"][g][f.start:f.start + f.numel] += 0.125
        torch.save(sd, path)
    drifted, _, _, _ = read_optimizer(step)
    check(not torch.equal(drifted[name]["fp32"], before[name]["fp32"]), "drifted optimizer fixture did not change")
    dst = os.path.join(tmp, "drift-opt-1")
    r = reshape(src, dst, "--target-tp", "1", "--target-pp", "1", "--universal")
    if not check(r.returncode == 0, f"drifted optimizer: {r.stderr}"):
        return
    got, _, _, _ = read_optimizer(os.path.join(dst, "global_step10"))
    check(torch.equal(got[name]["fp32"], drifted[name]["fp32"]), "drifted fp32 masters are not averaged in fp32")
    inj = os.path.join(tmp, "drift-opt-inj", "global_step10")
    inject_universal_info(step, inj)
    uni = os.path.join(tmp, "drift-opt-inj-uni", "global_step10_universal")
    if ds_to_universal(inj, uni):
        same_universal(read_universal(os.path.join(dst, "global_step10_universal")), read_universal(uni),
                       "drifted optimizer: mds --universal vs ds_to_universal")
    print("replicated fp32 masters that drifted apart: averaged as ds_to_universal averages them")


def check_glu(tmp):
    """GLU: dense_h_to_4h holds [A_r; B_r] per rank (x1, x2 = chunk(2)); the global tensor is [A; B]."""
    src = os.path.join(tmp, "glu")
    shape = bmd_checkpoint.ModelShape(num_layers=2, heads=4, padded_vocab=256)
    fixture = bmd_checkpoint.make_checkpoint(src, shape, tp=2, pp=1, dp=1, original_vocab=ORIGINAL_VOCAB, write_optimizer=False)
    step = os.path.join(src, "global_step10")
    patch_args(step, glu_activation="geglu")
    for layer in (3, 4):
        for rank in range(2):
            path = os.path.join(step, f"layer_{layer:02d}-model_{rank:02d}-model_states.pt")
            sd = load(path)
            for name in ("mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.bias"):
                sd[name] = split(fixture[(layer, name)], name, 2, rank, glu=True).clone()
            torch.save(sd, path)
    for tp in (1, 4):
        dst = os.path.join(tmp, f"glu-{tp}")
        r = reshape(src, dst, "--target-tp", str(tp), "--target-pp", "1")
        if not check(r.returncode == 0, f"glu tp{tp}: {r.stderr}"):
            continue
        out = os.path.join(dst, "global_step10")
        for layer in (3, 4):
            for rank in range(tp):
                sd = load(os.path.join(out, f"layer_{layer:02d}-model_{rank:02d}-model_states.pt"))
                for name in ("mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.bias"):
                    check(torch.equal(sd[name], split(fixture[(layer, name)], name, tp, rank, glu=True)),
                          f"glu tp{tp} layer {layer} rank {rank} {name}: not [A_r; B_r]")
        same_tensors(read_weights(out, glu=True), expected_weights(fixture, 256 if tp <= 2 else 512), f"glu tp2 -> tp{tp} weights")
    print("GLU dense_h_to_4h: split as two sub-parameters")


def check_heads(tmp):
    """6 heads, TP 2 -> 3: fused QKV split on head boundaries; TP 4 refused."""
    src = os.path.join(tmp, "heads")
    shape = bmd_checkpoint.ModelShape(num_layers=3, hidden=24, heads=6, ffn=96, padded_vocab=768, embed_layernorm=True, alibi=True)
    fixture = bmd_checkpoint.make_checkpoint(src, shape, tp=2, pp=1, dp=1, original_vocab=700, write_optimizer=False)
    patch_args(os.path.join(src, "global_step10"), make_vocab_size_divisible_by=128)
    dst = os.path.join(tmp, "heads-3")
    r = reshape(src, dst, "--target-tp", "3", "--target-pp", "1")
    if check(r.returncode == 0, f"heads tp3: {r.stderr}"):
        d = 24 // 6
        for layer in (3, 4, 5):
            qkv = fixture[(layer, "self_attention.query_key_value.weight")]  # [n, 3, d] rows
            for rank in range(3):
                sd = load(os.path.join(dst, "global_step10", f"layer_{layer:02d}-model_{rank:02d}-model_states.pt"))
                heads = qkv.view(6, 3 * d, 24)[2 * rank:2 * rank + 2].reshape(-1, 24)
                check(torch.equal(sd["self_attention.query_key_value.weight"], heads), f"heads: layer {layer} rank {rank} QKV is not heads {2 * rank}-{2 * rank + 1}")
        mp = load(os.path.join(dst, "global_step10", "mp_rank_00_model_states.pt"))
        check(mp["args"].padded_vocab_size == 768 and mp["checkpoint_info"]["padded_vocab_size"] == 768, "heads: padded vocab for tp3")
    bad = os.path.join(tmp, "heads-4")
    r = reshape(src, bad, "--target-tp", "4", "--target-pp", "1")
    check(r.returncode == 1 and "num_attention_heads 6 is not divisible by --target-tp 4" in r.stderr and not os.path.exists(bad),
          f"heads tp4: {r.returncode} {r.stderr}")
    print("6 heads: TP 3 splits QKV on head boundaries; TP 4 refused")


def qkv_to_version(rows, heads_per_rank, version):
    """Per-partition QKV rows from the [np, 3, d] order to that of checkpoint_version 0 ([3, np, d]) or 1.0 ([np, d, 3])."""
    v = rows.reshape(heads_per_rank, 3, -1, *rows.shape[1:])
    v = v.transpose(0, 1) if version == 0 else v.transpose(1, 2)
    return v.reshape(rows.shape).contiguous()


def check_qkv_versions(tmp):
    """Checkpoints of checkpoint_version 0 and 1.0 store each partition's QKV rows in another order (weights and the
    optimizer's fp32 / Adam states alike); the reshaped checkpoint has the [n, 3, d] order and says 3.0."""
    for version in (0, 1.0):
        src = os.path.join(tmp, f"qkv-v{version}")
        shape = bmd_checkpoint.ModelShape(num_layers=2, hidden=16, heads=4, padded_vocab=256)
        fixture = bmd_checkpoint.make_checkpoint(src, shape, tp=2, pp=1, dp=2, original_vocab=ORIGINAL_VOCAB, moments_seed=5)
        step = os.path.join(src, "global_step10")
        states, _, _, _ = read_optimizer(step)
        tp, np_ = 2, 2
        for layer in (3, 4):
            for rank in range(tp):
                path = os.path.join(step, f"layer_{layer:02d}-model_{rank:02d}-model_states.pt")
                sd = load(path)
                for name in ("self_attention.query_key_value.weight", "self_attention.query_key_value.bias"):
                    sd[name] = qkv_to_version(sd[name], np_, version)
                torch.save(sd, path)
        # The optimizer's QKV slices, reordered the same way through their DP fragments.
        for rank in range(tp):
            files = [os.path.join(step, f"bf16_zero_pp_rank_{d}_mp_rank_{rank:02d}_optim_states.pt") for d in range(2)]
            sds = [load(f) for f in files]
            for layer in (3, 4):
                for name in ("self_attention.query_key_value.weight", "self_attention.query_key_value.bias"):
                    full = f"{layer}.{name}"
                    for key in ("fp32", "exp_avg", "exp_avg_sq"):
                        frags = []
                        for sd in sds:
                            osd = sd["optimizer_state_dict"]
                            for g, mapping in enumerate(osd["param_slice_mappings"]):
                                if full in mapping:
                                    flat = (osd["single_partition_of_fp32_groups"][g] if key == "fp32"
                                            else osd["base_optimizer_state"]["state"][g][key])
                                    frags.append((flat, mapping[full]))
                        shard_shape = split(fixture[(layer, name)], name, tp, rank).shape
                        slice_ = torch.cat([f[f0.start:f0.start + f0.numel] for f, f0 in frags]).reshape(shard_shape)
                        new = qkv_to_version(slice_, np_, version).flatten()
                        pos = 0
                        for flat, f0 in frags:
                            flat[f0.start:f0.start + f0.numel] = new[pos:pos + f0.numel]
                            pos += f0.numel
            for f, sd in zip(files, sds):
                torch.save(sd, f)
        for f in os.listdir(step):
            if f.startswith("mp_rank_"):
                sd = load(os.path.join(step, f))
                if version == 0:
                    del sd["checkpoint_version"]
                else:
                    sd["checkpoint_version"] = version
                torch.save(sd, os.path.join(step, f))
        dst = os.path.join(tmp, f"qkv-v{version}-out")
        r = reshape(src, dst, "--target-tp", "1", "--target-pp", "1", "--with-optimizer")
        if not check(r.returncode == 0, f"qkv v{version}: {r.stderr}"):
            continue
        out = os.path.join(dst, "global_step10")
        same_tensors(read_weights(out), expected_weights(fixture, 256), f"qkv v{version}: weights")
        got, _, _, _ = read_optimizer(out)
        bad = [(n, k) for n in states for k in states[n] if not torch.equal(got[n][k], states[n][k])]
        check(not bad, f"qkv v{version}: optimizer states differ: {bad[:4]}")
        check(load(os.path.join(out, "mp_rank_00_model_states.pt"))["checkpoint_version"] == 3.0, f"qkv v{version}: checkpoint_version")
    print("QKV of checkpoint_version 0 and 1.0: rows normalised in weights and optimizer states; output says 3.0")


def check_train_resume(tmp):
    """An independent consumer: mds-train (when built, with LibTorch) resumes a TP 2 x PP 2 x DP 2 BLOOM-style
    checkpoint reshaped to its single process (TP 1, PP 1, DP 1), weights and fp32 masters as the source's."""
    train = os.path.join(BIN, "mds-train")
    if not all(os.path.exists(os.path.join(BIN, b)) for b in ("mds-train", "mds-tokenizer-train", "mds-preprocess")):
        print("mds-train not built: the resume check is skipped")
        return
    import tiny_dataset
    prefix, vocab, merges = tiny_dataset.make(tmp, BIN, os.environ.get("MDS_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE))), 1000)
    src, dst, out = (os.path.join(tmp, n) for n in ("train-src", "train-11", "train-out"))
    shape = bmd_checkpoint.ModelShape(num_layers=2, hidden=16, heads=2, ffn=64, padded_vocab=1024, seq=32, embed_layernorm=True, alibi=True)
    fixture = bmd_checkpoint.make_checkpoint(src, shape, tp=2, pp=2, dp=2, original_vocab=1000, last_stage_tied=True, moments_seed=9)
    src_states, _, _, _ = read_optimizer(os.path.join(src, "global_step10"))
    r = reshape(src, dst, "--target-tp", "1", "--target-pp", "1", "--target-dp", "1", "--with-optimizer")
    if not check(r.returncode == 0, f"train resume: reshape: {r.stderr}"):
        return
    flags = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2",
             "--num-layers", "2", "--hidden-size", "16", "--num-attention-heads", "2", "--seq-length", "32",
             "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "4", "--lr", "3e-3",
             "--min-lr", "3e-4", "--lr-decay-style", "cosine", "--lr-warmup-iters", "3", "--weight-decay", "0.1",
             "--log-interval", "1", "--eval-interval", "100", "--eval-iters", "1", "--seed", "42", "--threads", "2",
             "--bf16", "--use-checkpoint-lr-scheduler", "--embed-layernorm", "--position-embedding-type", "alibi"]
    # Nothing left to train at iteration 10: load, save again what was loaded.
    r = subprocess.run([train, *flags, "--train-iters", "10", "--load", dst, "--save", out, "--save-interval", "100"],
                       capture_output=True, text=True)
    if not check(r.returncode == 0, f"train resume: mds-train --load failed: {r.stderr[-800:]}"):
        return
    step = os.path.join(out, "global_step10")
    same_tensors(read_weights(step), fixture, "mds-train's save of the reshaped checkpoint: weights")
    got, _, _, _ = read_optimizer(step)
    bad = [(n, k) for n in src_states for k in ("fp32", "exp_avg", "exp_avg_sq") if not torch.equal(got[n][k], src_states[n][k])]
    check(not bad, f"mds-train's save of the reshaped checkpoint: optimizer states differ: {bad[:4]}")
    r = subprocess.run([train, *flags, "--train-iters", "11", "--load", dst], capture_output=True, text=True)
    m = re.search(r"^ iteration +11/ +11 \| consumed samples: +(\d+)", r.stdout, re.M)
    check(r.returncode == 0 and m and m.group(1) == "84", f"train resume: iteration 11 {m and m.group(0)}: {r.stderr[-300:]}")
    print("mds-train resumes the reshaped TP1 PP1 DP1 checkpoint: weights and optimizer states as the source's")


def universal_agrees(tmp, name, step, states):
    """DeepSpeed's ds_to_universal on a copy of `step` gives the fp32 masters `states` (this test's reassembly)."""
    inj = os.path.join(tmp, f"{name}-inj", "global_step10")
    inject_universal_info(step, inj)
    uni = os.path.join(tmp, f"{name}-inj-uni", "global_step10_universal")
    if ds_to_universal(inj, uni):
        u = read_universal(uni)
        # The vocabulary parameter comes back cut to the original vocabulary (universal_checkpoint_info).
        wrong = [n for n in states if not torch.equal(u[(n, "fp32")]["param"], states[n]["fp32"][:len(u[(n, "fp32")]["param"])])]
        check(not wrong, f"{step}: ds_to_universal's fp32 differs from the partitions reassembled: {wrong[:4]}")


def check_train_dp_save(tmp):
    """mds-train on 2 data-parallel processes (bf16, ZeRO-1) saves one optimizer partition per rank: DeepSpeed's
    DeepSpeedCheckpoint sees DP 2; the fp32 masters reassembled from the two files by this test's reader (and by
    DeepSpeed's ds_to_universal) round to the saved bf16 weights; ZeRO-0 (states replicated, cut at save) writes
    the same tensors; mds-train resumes the checkpoint on one process and on 3."""
    import socket
    import tiny_dataset
    train = os.path.join(BIN, "mds-train")
    if not os.path.exists(train):
        print("mds-train not built: the data-parallel save check is skipped")
        return
    prefix, vocab, merges = tiny_dataset.make(os.path.join(tmp, "dpdata"), BIN, os.environ.get(
        "MDS_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE))), 1000)
    flags = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2",
             "--num-layers", "2", "--hidden-size", "16", "--num-attention-heads", "2", "--seq-length", "32",
             "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "12", "--lr", "3e-3",
             "--min-lr", "3e-4", "--lr-decay-style", "cosine", "--lr-warmup-iters", "3", "--weight-decay", "0.1",
             "--log-interval", "1", "--eval-interval", "100", "--eval-iters", "1", "--seed", "42", "--threads", "1",
             "--bf16", "--embed-layernorm", "--position-embedding-type", "alibi", "--hidden-dropout", "0",
             "--attention-dropout", "0", "--device", "cpu"]

    def launch(world, extra):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = []
        for r in range(world):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))}
            env.update(RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(subprocess.Popen([train, *flags, *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        outs = [p.communicate(timeout=600) for p in procs]
        ok = all(p.returncode == 0 for p in procs)
        check(ok, f"mds-train on {world} processes {extra}: {[p.returncode for p in procs]} {outs[0][1][-600:]}")
        return ok, outs

    saved = {}
    for stage in ("1", "0"):
        root = os.path.join(tmp, f"dp-zero{stage}")
        ok, _ = launch(2, ["--train-iters", "20", "--zero-stage", stage, "--save", root, "--save-interval", "10",
                           "--exit-interval", "10"])
        if not ok:
            return
        saved[stage] = os.path.join(root, "global_step10")
    step = saved["1"]
    files = sorted(os.listdir(step))
    check([f for f in files if "optim" in f] == [f"bf16_zero_pp_rank_{d}_mp_rank_00_optim_states.pt" for d in (0, 1)],
          f"data-parallel save: files {files}")
    ds = DeepSpeedCheckpoint(step)
    check((ds.tp_degree, ds.pp_degree, ds.dp_degree) == (1, 1, 2), f"DeepSpeedCheckpoint degrees {ds.tp_degree} {ds.pp_degree} "
                                                                    f"{ds.dp_degree}")
    check(load(os.path.join(step, "mp_rank_00_model_states.pt"))["dp_world_size"] == 2, "dp_world_size is not 2")
    states, _, layout, _ = read_optimizer(step)
    weights = read_weights(step)
    check(len(layout) == 2 and all(osd["partition_count"] == [2, 2, 2] for _, _, osd in layout),
          "partition_count is not 2 in both files")
    by_name = {}
    for (layer, name), w in weights.items():
        by_name["tied_modules.embed." + name if layer == 1 else f"{layer}.{name}"] = w
    check(set(states) == set(by_name), f"optimizer states name {sorted(set(states) ^ set(by_name))[:5]}")
    bad = [n for n in states if n in by_name and not torch.equal(states[n]["fp32"].to(torch.bfloat16), by_name[n])]
    check(not bad, f"fp32 masters reassembled from the 2 partitions do not round to the saved weights: {bad[:4]}")
    other, _, _, _ = read_optimizer(saved["0"])
    diff = [(n, k) for n in states for k in ("fp32", "exp_avg", "exp_avg_sq") if not torch.equal(states[n][k], other[n][k])]
    check(not diff, f"ZeRO-0 and ZeRO-1 saves hold different optimizer states: {diff[:4]}")
    universal_agrees(tmp, "dp", step, states)
    resume = ["--train-iters", "12", "--load", os.path.dirname(step), "--use-checkpoint-lr-scheduler"]
    r = subprocess.run([train, *flags, *resume], capture_output=True, text=True)
    check(r.returncode == 0 and re.search(r"^ iteration +12/ +12 \| consumed samples: +144 ", r.stdout, re.M),
          f"one process does not resume the DP=2 checkpoint: {r.stderr[-500:]}")
    ok, outs = launch(3, resume)
    check(ok and re.search(r"^ iteration +12/ +12 \| consumed samples: +144 ", outs[-1][0], re.M),
          "3 processes do not resume the DP=2 checkpoint")
    print("data-parallel save: 2 partition files DeepSpeed reads, masters = weights, ZeRO-0 = ZeRO-1, resumed on 1 and 3")

    # TP=2 x DP=2 and TP=2 x PP=2 x DP=2: the shards (and stages), merged by this test's own Megatron TP rules (and by
    # ds_to_universal), are the model a one-process run of the same flags saved at the same iteration. With --lr 0 the
    # weights and masters stay the initial ones, which every TP and PP cuts from the same full tensors: equal bit for
    # bit, so a shard in the wrong place shows; the Adam moments (bf16 gradients summed in another order) agree
    # within 2% of their norm. The last stage's copy of the tied embedding module equals the first stage's (the
    # unused LayerNorm copy with zero moments), in DeepSpeed's data-parallel partitions.
    frozen = ["--train-iters", "20", "--lr", "0", "--min-lr", "0", "--save-interval", "10", "--exit-interval", "10"]
    one = subprocess.run([train, *flags, *frozen, "--save", os.path.join(tmp, "tp1dp1")], capture_output=True, text=True)
    if not check(one.returncode == 0, f"one-process save: {one.stderr[-400:]}"):
        return
    one_step = os.path.join(tmp, "tp1dp1", "global_step10")
    one_states = read_optimizer(one_step)[0]
    for tp, pp in ((2, 1), (2, 2)):
        name = f"TP={tp} x PP={pp} x DP=2"
        ok, _ = launch(tp * pp * 2, [*frozen, "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
                                     "--save", os.path.join(tmp, f"tp{tp}pp{pp}dp2")])
        if not ok:
            return
        tp_step = os.path.join(tmp, f"tp{tp}pp{pp}dp2", "global_step10")
        ds = DeepSpeedCheckpoint(tp_step)
        check((ds.tp_degree, ds.pp_degree, ds.dp_degree) == (tp, pp, 2), f"{name}: DeepSpeedCheckpoint degrees "
                                                                          f"{ds.tp_degree} {ds.pp_degree} {ds.dp_degree}")
        tp_states, tied, _, _ = read_optimizer(tp_step)
        check(set(tp_states) == set(one_states), f"{name}: parameter names differ from one process's")
        # DeepSpeed's last stage holds the whole tied embedding module (here BLOOM's: the word embeddings and the
        # embedding LayerNorm); only the word embeddings get a gradient there, the other copies' moments stay zero.
        module = {"tied_modules.embed.word_embeddings.weight", "tied_modules.embed.word_embeddings.norm.weight",
                  "tied_modules.embed.word_embeddings.norm.bias"}
        check(pp == 1 or set(tied) == {(n, pp - 1) for n in module},
              f"{name}: the last stage's optimizer holds {sorted(tied)}, expected the tied embedding module {sorted(module)}")
        for (n, _), copy in tied.items():
            used = n == "tied_modules.embed.word_embeddings.weight"
            check(torch.equal(copy["fp32"], tp_states[n]["fp32"]) and
                  all(torch.equal(copy[k], tp_states[n][k]) if used else not copy[k].any() for k in ("exp_avg", "exp_avg_sq")),
                  f"{name}: the last stage's copy of {n} is not the first stage's" + ("" if used else " with zero moments"))
        bad = [n for n in one_states if n in tp_states and not torch.equal(tp_states[n]["fp32"], one_states[n]["fp32"])]
        check(not bad, f"{name}: merged fp32 masters differ from one process's: {bad[:4]}")
        worst = max(((tp_states[n][k] - one_states[n][k]).norm() / one_states[n][k].norm().clamp_min(1e-30)).item()
                    for n in one_states if n in tp_states for k in ("exp_avg", "exp_avg_sq"))
        check(worst < 2e-2, f"{name}: merged Adam moments differ from one process's by {worst:.1e} of their norm")
        merged = read_weights(tp_step)
        by_name = {("tied_modules.embed." + k[1] if k[0] == 1 else f"{k[0]}.{k[1]}"): v for k, v in merged.items()}
        bad = [n for n in tp_states if not torch.equal(tp_states[n]["fp32"].to(torch.bfloat16), by_name[n])]
        check(not bad, f"{name}: merged masters do not round to the merged weights: {bad[:4]}")
        universal_agrees(tmp, f"tp{tp}pp{pp}", tp_step, tp_states)
        print(f"{name} save: DeepSpeed reads TP {tp} / PP {pp} / DP 2, shards merge to one process's model (masters "
              f"equal, moments within {worst:.1e}), ds_to_universal agrees")


def check_stage_methods(tmp):
    """Dry runs: the stages for each partition method equal DeepSpeed's cut of the spec list."""
    src = os.path.join(tmp, "stages")
    shape = bmd_checkpoint.ModelShape(num_layers=8, padded_vocab=256)
    fixture = bmd_checkpoint.make_checkpoint(src, shape, tp=1, pp=1, dp=1, original_vocab=ORIGINAL_VOCAB, write_optimizer=False)
    layers = layer_indices(os.path.join(src, "global_step10"))
    golden = json.load(open(os.path.join(HERE, "partition_v065_golden.json")))["balanced"]
    n = 0
    for tp in (1, 2):
        per_layer = collections.Counter()
        for (layer, name), t in fixture.items():
            per_layer[layer] += t.numel() // tp if split_dim(name) is not None else t.numel()
        for pp in (1, 2, 3, 4, 5):
            for method in ("type:transformer", "type:transformer|embedding", "parameters", "uniform", "type:ParallelTransformer"):
                r = reshape(src, os.path.join(tmp, "unused"), "--target-tp", str(tp), "--target-pp", str(pp), "--partition-method", method, "--dry-run", "--json")
                exp, _ = expected_stages(layers, pp, method, per_layer)
                if any(not any(3 <= l <= 10 for l in s) for s in exp):
                    check(r.returncode == 1 and "no transformer layer" in r.stderr, f"{method} pp{pp}: a stage without blocks: {r.returncode} {r.stderr}")
                    continue
                if not check(r.returncode == 0, f"{method} pp{pp}: {r.stderr}"):
                    continue
                got = [s["layers"] for s in json.loads(r.stdout)["target"]["stages"]]
                check(got == exp, f"stages tp{tp} pp{pp} '{method}': {got} != DeepSpeed's {exp}")
                n += 1
    # BLOOM-era boundaries: DeepSpeed 0.6.5's recorded cut of the same spec list.
    for method, weights in (("type:transformer", [0, 0, 0] + [1] * 8 + [0, 0, 0, 0]),
                            ("type:transformer|embedding", [0, 1, 0] + [1] * 8 + [0, 0, 1, 0])):
        for case in golden:
            if case["weights"] != weights or case["boundaries"] is None:
                continue
            r = reshape(src, os.path.join(tmp, "unused"), "--target-tp", "1", "--target-pp", str(case["parts"]),
                        "--partition-method", method, "--partition-algorithm", "bisect", "--dry-run", "--json")
            b = case["boundaries"]
            if any(not any(3 <= i <= 10 for i in range(b[s], b[s + 1])) for s in range(len(b) - 1)):
                check(r.returncode == 1 and "no transformer layer" in r.stderr, f"bisect pp{case['parts']} '{method}': {r.returncode} {r.stderr}")
                continue
            got = [(s["first_spec"], s["end_spec"]) for s in json.loads(r.stdout)["target"]["stages"]] if r.returncode == 0 else r.stderr
            check(got == [(b[i], b[i + 1]) for i in range(len(b) - 1)], f"bisect pp{case['parts']} '{method}': {got} != v0.6.5's {b}")
            n += 1
    check(not os.path.exists(os.path.join(tmp, "unused")), "--dry-run wrote something")
    r = reshape(src, os.path.join(tmp, "unused"), "--target-tp", "1", "--target-pp", "2", "--dry-run")
    check(r.returncode == 0 and "stage 1:" in r.stdout and "files (" in r.stdout, f"--dry-run text: {r.stdout}")
    print(f"stage boundaries: {n} dry runs equal DeepSpeed's partition of the spec list")


def check_errors(tmp, bloom_src):
    r = reshape(bloom_src, os.path.join(tmp, "e0"), "--target-tp", "0", "--target-pp", "1")
    check(r.returncode == 2 and "--target-tp" in r.stderr and not os.path.exists(os.path.join(tmp, "e0")), f"--target-tp 0: {r.returncode} {r.stderr}")
    r = reshape(bloom_src, os.path.join(tmp, "e1"), "--target-tp", "3", "--target-pp", "1")
    check(r.returncode == 1 and "num_attention_heads 4" in r.stderr, f"heads: {r.returncode} {r.stderr}")
    # A missing layer file.
    broken = os.path.join(tmp, "broken")
    shutil.copytree(bloom_src, broken)
    os.remove(os.path.join(broken, "global_step10", "layer_04-model_01-model_states.pt"))
    r = reshape(broken, os.path.join(tmp, "e2"), "--target-tp", "1", "--target-pp", "1")
    check(r.returncode == 1 and "layer_04-model_01-model_states.pt" in r.stderr and not os.path.exists(os.path.join(tmp, "e2", "global_step10")),
          f"missing layer file: {r.returncode} {r.stderr}")
    # A missing optimizer file: refused with --with-optimizer, fine without.
    broken2 = os.path.join(tmp, "broken2")
    shutil.copytree(bloom_src, broken2)
    os.remove(os.path.join(broken2, "global_step10", "bf16_zero_pp_rank_1_mp_rank_02_optim_states.pt"))
    dst = os.path.join(tmp, "e3")
    r = reshape(broken2, dst, "--target-tp", "1", "--target-pp", "1", "--with-optimizer")
    check(r.returncode == 1 and "BF16 optimizer files" in r.stderr and not os.path.exists(dst), f"missing optimizer file: {r.returncode} {r.stderr}")
    # A fragment outside its partition is refused up front; one too short fails late, after the layer files were
    # written: either way no tag and no temporary folder is left.
    for name, numel, message in (("e4", 10 ** 6, "outside the partition"), ("e4b", -1, "fragments of")):
        broken3 = os.path.join(tmp, "broken-" + name)
        shutil.copytree(bloom_src, broken3)
        path = os.path.join(broken3, "global_step10", "bf16_zero_pp_rank_1_mp_rank_01_optim_states.pt")
        sd = load(path)
        mapping = sd["optimizer_state_dict"]["param_slice_mappings"][0]
        first = next(iter(mapping))
        mapping[first] = bmd_checkpoint.fragment_address(numel=numel if numel > 0 else mapping[first].numel + numel, start=mapping[first].start)
        torch.save(sd, path)
        dst = os.path.join(tmp, name)
        r = reshape(broken3, dst, "--target-tp", "1", "--target-pp", "1", "--with-optimizer")
        check(r.returncode == 1 and message in r.stderr, f"bad fragment ({message}): {r.returncode} {r.stderr}")
        check(not os.path.exists(dst) or os.listdir(dst) == [], f"bad fragment left {os.listdir(dst) if os.path.exists(dst) else None}")
    # An existing destination tag; the source itself as destination; --universal without optimizer files.
    dst = os.path.join(tmp, "e5")
    check(reshape(bloom_src, dst, "--target-tp", "1", "--target-pp", "1").returncode == 0, "first reshape")
    r = reshape(bloom_src, dst, "--target-tp", "1", "--target-pp", "1")
    check(r.returncode == 1 and "exists; pass --overwrite" in r.stderr, f"existing tag: {r.returncode} {r.stderr}")
    check(reshape(bloom_src, dst, "--target-tp", "1", "--target-pp", "1", "--overwrite").returncode == 0, "--overwrite")
    r = reshape(bloom_src, bloom_src, "--target-tp", "1", "--target-pp", "1", "--overwrite")
    check(r.returncode == 2 and "are the same folder" in r.stderr, f"dst = src: {r.returncode} {r.stderr}")
    r = reshape(dst, os.path.join(tmp, "e6"), "--target-tp", "1", "--target-pp", "1", "--universal")
    check(r.returncode == 1 and "bf16_zero_pp_rank" in r.stderr and not os.path.exists(os.path.join(tmp, "e6")), f"--universal on weights only: {r.stderr}")
    r = reshape(os.path.join(tmp, "nope"), os.path.join(tmp, "e7"), "--target-tp", "1", "--target-pp", "1")
    check(r.returncode == 1 and "nope" in r.stderr, f"missing source: {r.returncode} {r.stderr}")
    print("bad inputs: clear errors, non-zero exits, no output")


def main():
    check_partitions()
    with tempfile.TemporaryDirectory() as tmp:
        bloom_src, _ = check_bloom(tmp)
        check_round_trip(tmp, bloom_src)
        check_fp16(tmp)
        check_drifted_replicas(tmp)
        check_drifted_optimizer(tmp, bloom_src)
        check_glu(tmp)
        check_heads(tmp)
        check_qkv_versions(tmp)
        check_train_resume(tmp)
        check_train_dp_save(tmp)
        check_stage_methods(tmp)
        check_errors(tmp, bloom_src)
    if failures:
        print(f"{len(failures)} FAILURES")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
