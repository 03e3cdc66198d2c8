"""Cross-check: supervised fine-tuning data against BigScience's Megatron-DeepSpeed (the third_party tree), the
code BLOOMZ was fine-tuned with.

1. Preprocessing: the same jsonl of (inputs, targets) pairs through `mds-preprocess --sft --prompt-key inputs
   --answer-key targets` and through BMD's own tools/preprocess_data.py --json-keys inputs targets (run in this
   process with stand-ins for `nltk` and Megatron's package __init__): the four .bin/.idx files are byte-identical
   - without --append-eod;
   - with --append-eod: mds's targets equal BMD's --append-eod targets, mds's inputs BMD's inputs without it
     (mds puts the EOD after answers only, as xP3's preprocessing ran BMD twice);
   - with --prepend-space: BMD run on the pairs with a space put before each target;
   - chat message lists (--messages-key, ChatML default) against BMD on the (prompt, answer) pairs rendered here in
     Python, with a tokenizer.json (PretrainedFromHF through transformers) whose <|im_start|>/<|im_end|> are added
     special tokens.
2. Packing: BMD's DecoderPackedMTFDataset, imported from the tree (megatron/data/decoder_packed_mtf_dataset.py,
   mtf_dataset.py, indexed_dataset.py, blendable_dataset.py, dataset_utils.py unchanged; stand-ins for
   megatron/__init__ (print_rank_0, mpu, get_args), torch.distributed and torch.cuda.LongTensor in those modules,
   and megatron.data.helpers = megatron-core's compiled helpers for the blending index), against mds's
   PackedSftDatasets (tests/tools/packed_sft_probe) on copies of the same files: --data-path with --split (valid and
   test splits not starting at document 0), blended --data-path, --*-weighted-split-paths groups; several seeds and
   sequence lengths, examples too long for a row, several epochs. Equal: the dataset sizes, the .npy index files
   (byte for byte, same names), every packed row (tokens, segment ids, is_inputs), the examples BMD warns it skips.
   Also: a second mds run reuses the files, --verify agrees, a cache made for a longer --seq-length is refused, and
   read_split_documents=True gives BMD's rows for a pair holding only that split's documents.
Exit 77 (skipped) without the third_party tree, the GPT-2 files, numpy / torch / transformers / regex, or the probe.
"""
import copy
import filecmp
import glob
import importlib.util
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import types
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus as C  # noqa: E402

warnings.filterwarnings("ignore")
try:
    import numpy as np
    import regex  # noqa: F401  (BMD's gpt2_tokenization)
    import torch
    import transformers  # BMD's tokenizer module imports it
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
except Exception as e:  # pragma: no cover
    C.skip(f"missing Python package: {e!r}")

SOURCE = os.environ.get("MDS_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TREE = os.path.normpath(os.path.join(SOURCE, "..", "shared", "third_party", "bigscience-megatron-deepspeed"))
BIN = os.environ.get("MDS_BIN") or os.path.join(SOURCE, "build", "bin")
PROBE = os.path.join(BIN, "packed_sft_probe")

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


# ---------------------------------------------------------------------------------------------------------------
# Megatron-DeepSpeed in this process

def load_core_helpers():
    spec = importlib.util.find_spec("megatron.core")
    roots = spec.submodule_search_locations if spec is not None and spec.submodule_search_locations else []
    for root in roots:
        for path in glob.glob(os.path.join(root, "datasets", "helpers_cpp*.so")):
            s = importlib.util.spec_from_file_location("helpers_cpp", path)
            module = importlib.util.module_from_spec(s)
            s.loader.exec_module(module)
            return module
    return None


class _Distributed:
    """torch.distributed as rank 0 of one process sees it (BMD's barrier is an all_reduce of a ones tensor)."""
    @staticmethod
    def get_rank(group=None):
        return 0

    @staticmethod
    def get_world_size(group=None):
        return 1

    @staticmethod
    def is_initialized():
        return True

    @staticmethod
    def all_reduce(tensor, group=None):
        return None


class _TorchView(types.ModuleType):
    """The `torch` global of BMD's data modules: real torch, with the stand-ins above and a CPU LongTensor."""
    def __init__(self):
        super().__init__("torch")
        self.distributed = _Distributed()
        self.cuda = types.SimpleNamespace(LongTensor=torch.LongTensor)

    def __getattr__(self, name):
        return getattr(torch, name)


def install_bmd(core_helpers):
    """Makes the third_party tree importable without running megatron/__init__.py (which needs DeepSpeed, args,
    a GPU); the modules used are imported unchanged from the tree."""
    if "float" not in np.__dict__:
        np.float = float  # removed from numpy; indexed_dataset maps dtype code 6 to it
    sys.path.insert(0, TREE)
    megatron = types.ModuleType("megatron")
    megatron.__path__ = [os.path.join(TREE, "megatron")]
    megatron.print_rank_0 = lambda message: None

    def get_args():
        raise RuntimeError("test_packed_sft: megatron.get_args is not available here")
    megatron.get_args = get_args
    mpu = types.ModuleType("megatron.mpu")
    mpu.get_data_parallel_group = mpu.get_pipeline_model_parallel_group = lambda: None
    mpu.get_tensor_model_parallel_group = lambda: None
    megatron.mpu = mpu
    sys.modules["megatron"] = megatron
    sys.modules["megatron.mpu"] = mpu
    # tools/preprocess_data.py subclasses nltk's PunktLanguageVars at import time (used for --split-sentences only).
    nltk = types.ModuleType("nltk")
    punkt = types.ModuleType("nltk.tokenize.punkt")
    punkt.PunktLanguageVars = type("PunktLanguageVars", (), {})
    nltk.tokenize = types.SimpleNamespace(punkt=punkt)
    sys.modules["nltk"] = nltk
    # megatron.data.helpers: BMD's helpers.cpp is not compiled here; megatron-core's build_blending_indices is the
    # same loop (specs/data.md 4.8) but takes an int16 dataset_index, where BMD passes uint8 (pybind11 would
    # convert a copy and leave BMD's array untouched): filled through an int16 array and copied back.
    helpers = types.ModuleType("megatron.data.helpers")

    def build_blending_indices(dataset_index, dataset_sample_index, weights, num_datasets, size, verbose):
        wide = np.zeros(dataset_index.shape, dtype=np.int16)
        core_helpers.build_blending_indices(wide, dataset_sample_index, weights, num_datasets, size, False)
        dataset_index[:] = wide
    helpers.build_blending_indices = build_blending_indices
    sys.modules["megatron.data.helpers"] = helpers
    import megatron.data.blendable_dataset as blendable
    import megatron.data.decoder_packed_mtf_dataset as packed
    view = _TorchView()
    packed.torch = view
    blendable.torch = view
    import megatron.data as data_pkg
    data_pkg.helpers = helpers
    return packed


def bmd_preprocess(argv):
    """BMD's tools/preprocess_data.py main() with these arguments, in this process (its Pool forks from here)."""
    module = sys.modules.get("bmd_preprocess_data")
    if module is None:  # a module by name, so that the Pool can pickle its Encoder's bound method
        spec = importlib.util.spec_from_file_location("bmd_preprocess_data",
                                                      os.path.join(TREE, "tools", "preprocess_data.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules["bmd_preprocess_data"] = module
        spec.loader.exec_module(module)
    transformers.utils.logging.set_verbosity = lambda level: None  # BMD sets INFO: a config dump per tokenizer load
    saved = sys.argv, sys.stdout, sys.stderr
    sys.argv = ["preprocess_data.py"] + [str(a) for a in argv]
    try:
        with open(os.devnull, "w") as devnull:
            sys.stdout = sys.stderr = devnull  # its progress lines
            module.main()
    finally:
        sys.argv, sys.stdout, sys.stderr = saved


class SkipLog(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.ids = []

    def emit(self, record):
        msg = record.getMessage()
        if msg.startswith("Skipping sample id="):
            self.ids.append(int(msg.split("=", 1)[1].split(".", 1)[0]))


# ---------------------------------------------------------------------------------------------------------------
# Data

def make_pairs(seed, n, long_share=0.06):
    """(inputs, targets) text pairs cut from the shared test corpus: multilingual, emoji, odd spaces."""
    rng = random.Random(seed)
    texts = [t for t in C.texts(C.generate(seed=seed, target_bytes=400_000, dense=0)) if len(t) > 40]
    pairs = []
    for i in range(n):
        t = texts[i % len(texts)]
        long = rng.random() < long_share
        a = rng.randint(1, min(len(t) - 1, 2000 if long else 250))
        b = rng.randint(1, 1200 if long else 120)
        pairs.append({"id": i, "inputs": t[:a], "targets": t[a:a + b] or "."})
    return pairs


def write_pairs(pairs, path):
    with open(path, "w", encoding="utf-8") as f:
        for p in pairs:
            f.write(json.dumps(p, ensure_ascii=(p["id"] % 2 == 0)) + "\n")


def same_dataset(a, b):
    return all(filecmp.cmp(a + ext, b + ext, shallow=False) for ext in (".bin", ".idx"))


def sizes_of(prefix):
    return np.asarray(C.read_indexed(prefix)["sizes"], dtype=np.int64)


def tokenizer_folder(gpt2, folder):
    """A Hugging Face tokenizer folder: GPT-2's BPE with <|endoftext|> (eos), <|im_start|>, <|im_end|>, <pad> added
    as special tokens (50256 .. 50259)."""
    os.makedirs(folder, exist_ok=True)
    t = Tokenizer(models.BPE.from_file(os.path.join(gpt2, "encoder.json"), os.path.join(gpt2, "vocab.bpe")))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.add_special_tokens([AddedToken(s, special=True) for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>")])
    t.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "pad_token": "<pad>",
                   "model_max_length": 1 << 30}, f)
    return folder


def render_chatml(messages):
    """The ChatML rendering mds documents as its default, restated: the prompt is every message before the last
    one (the assistant's answer) as <|im_start|>{role}\\n{content}<|im_end|>\\n, then <|im_start|>assistant\\n; the
    answer is its content and <|im_end|>."""
    prompt = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages[:-1])
    return prompt + "<|im_start|>assistant\n", messages[-1]["content"] + "<|im_end|>"


def check_preprocess(tmp, exe, gpt2):
    t0 = time.time()
    pairs = make_pairs(11, 700)
    src = os.path.join(tmp, "pairs.jsonl")
    write_pairs(pairs, src)
    gpt2_files = ["--vocab-file", os.path.join(gpt2, "encoder.json"), "--merge-file", os.path.join(gpt2, "vocab.bpe")]
    bmd_common = ["--tokenizer-type", "GPT2BPETokenizer", *gpt2_files, "--dataset-impl", "mmap", "--workers", 2]
    mds_common = ["--sft", "--prompt-key", "inputs", "--answer-key", "targets", *gpt2_files, "--workers", 3]

    def both(name, mds_flags, bmd_runs):
        """bmd_runs: {"key key ...": (jsonl, flags)}, one BMD run per entry."""
        mds = os.path.join(tmp, "mds_" + name)
        C.mds_preprocess(exe, ["--input", src, "--output-prefix", mds, *mds_common, *mds_flags])
        for keys, (jsonl, flags) in bmd_runs.items():
            bmd = os.path.join(tmp, f"bmd_{name}_{keys.replace(' ', '_')}")
            bmd_preprocess(["--input", jsonl, "--output-prefix", bmd, "--json-keys", *keys.split(), *bmd_common, *flags])
            for key in keys.split():
                check(same_dataset(f"{mds}_{key}_document", f"{bmd}_{key}_document"),
                      f"preprocess {name}: mds {key} differs from BMD's tools/preprocess_data.py")
        return mds

    mds = both("plain", [], {"inputs targets": (src, [])})
    both("eod", ["--append-eod"], {"inputs": (src, []), "targets": (src, ["--append-eod"])})
    spaced = os.path.join(tmp, "spaced.jsonl")
    write_pairs([dict(p, targets=" " + p["targets"]) for p in pairs], spaced)
    both("space", ["--append-eod", "--prepend-space"], {"inputs": (src, []), "targets": (spaced, ["--append-eod"])})
    n = len(C.read_indexed(mds + "_targets_document")["sizes"])
    check(n == len(pairs), f"preprocess: {n} examples written, expected {len(pairs)}")

    # Chat lists with a tokenizer.json whose ChatML markers are special tokens.
    folder = tokenizer_folder(gpt2, os.path.join(tmp, "hf-tok"))
    rng = random.Random(5)
    chats, rendered = [], []
    for p in pairs[:300]:
        msgs = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": p["targets"][:30]})
        for _ in range(rng.randrange(0, 3)):
            msgs += [{"role": "user", "content": p["inputs"][:40]}, {"role": "assistant", "content": p["targets"][:20]}]
        msgs += [{"role": "user", "content": p["inputs"]}, {"role": "assistant", "content": p["targets"]}]
        chats.append({"messages": msgs, "extra": [1, {"role": 2}]})
        prompt, answer = render_chatml(msgs)
        rendered.append({"inputs": prompt, "targets": answer})
    chat_src, pairs_src = os.path.join(tmp, "chats.jsonl"), os.path.join(tmp, "rendered.jsonl")
    with open(chat_src, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(c) + "\n" for c in chats)
    write_pairs([dict(r, id=i) for i, r in enumerate(rendered)], pairs_src)
    chat_mds = os.path.join(tmp, "mds_chat")
    C.mds_preprocess(exe, ["--input", chat_src, "--output-prefix", chat_mds, "--messages-key", "messages",
                           "--tokenizer-file", os.path.join(folder, "tokenizer.json"), "--append-eod"])
    for key, flags in (("inputs", []), ("targets", ["--append-eod"])):
        bmd = os.path.join(tmp, "bmd_chat_" + key)
        bmd_preprocess(["--input", pairs_src, "--output-prefix", bmd, "--json-keys", key, "--tokenizer-type",
                        "PretrainedFromHF", "--tokenizer-name-or-path", folder, "--workers", 1, *flags])
        check(same_dataset(f"{chat_mds}_{key}_document", f"{bmd}_{key}_document"),
              f"chat ({key}): mds --messages-key differs from BMD PretrainedFromHF on the ChatML-rendered pairs")
    ids = C.read_indexed(chat_mds + "_inputs_document")["seqs"][0]
    check(50257 in ids and 50258 in ids, f"chat: <|im_start|>/<|im_end|> are not single special tokens in {ids[:12]}")
    print(f"preprocess: {len(pairs)} pairs (plain, --append-eod, --prepend-space) and {len(chats)} chats: "
          f"mds == BMD's tools/preprocess_data.py byte for byte ({time.time() - t0:.1f} s)", flush=True)
    return mds


# ---------------------------------------------------------------------------------------------------------------
# Packing

def num_samples(cfg):
    """BMD training.py: [train, valid, test] samples (no ramp-up)."""
    gbs = cfg["global_batch_size"]
    train_iters = cfg["train_samples"] // gbs
    return [cfg["train_samples"], (train_iters // cfg["eval_interval"] + 1) * cfg["eval_iters"] * gbs,
            cfg["eval_iters"] * gbs]


def bmd_groups(packed, cfg, prefixes):
    """BMD's datasets for the configuration, as finetune_t0_non_causal_decoder.py builds them: [(split, name, ds)]."""
    seq, pad, seed = cfg["seq_length"] + 1, cfg["pad"], cfg["seed"]
    ns = num_samples(cfg)

    def prefix(p):
        return prefixes[p] if p in prefixes else p
    out = []
    if "data_path" in cfg:
        dp = [prefix(x) for x in cfg["data_path"]]
        ds = packed.build_train_valid_test_datasets(data_prefix=dp, data_impl="mmap", splits_string=cfg["split"],
                                                    seq_length=seq, pad_token=pad, eos_token=pad,
                                                    train_valid_test_num_samples=ns, seed=seed, skip_warmup=True)
        for k, name in enumerate(("train", "valid", "test")):
            if ds[k] is not None:
                out.append((k, name, ds[k]))
        return out
    for k, s in enumerate(("train", "valid", "test")):
        for v in cfg.get(s, []):  # arguments.py parse_data_paths, restated
            name = v.split(":")[0]
            body = ":".join(v.split(":")[1:]).strip()
            weights = [d.split()[0] for d in body.split(",")]
            splits = [d.split()[1] for d in body.split(",")]
            paths = [prefix(d.split()[2]) for d in body.split(",")]
            out.append((k, name, packed.build_dataset_group(
                dataset_group_name=name, paths=paths, weights=weights, splits=splits, data_impl="mmap",
                seq_length=seq, pad_token=pad, eos_token=pad, train_valid_test_num_samples=ns, seed=seed,
                skip_warmup=True, train_valid_test=s)))
    return out


def row_of(item):
    return [item["decoder_token_ids"].tolist(), item["decoder_segment_ids"].tolist(),
            item["decoder_is_inputs"].astype(np.int64).tolist()]


def bmd_row(ds, i):
    """ds[i] as [tokens, segment ids, is_inputs], or None where BMD fails: a blended dataset's late indices can point
    past the end of one of its datasets (BlendableDataset sizes itself as the sum of their lengths)."""
    try:
        return row_of(ds[i])
    except IndexError:
        return None


def run_probe(cfg, prefixes, expect_fail=False):
    c = copy.deepcopy(cfg)
    if "data_path" in c:
        c["data_path"] = [prefixes.get(x, x) for x in c["data_path"]]
    for s in ("train", "valid", "test"):
        if s in c:
            vals = []
            for v in c[s]:
                for name, path in prefixes.items():
                    v = v.replace(" " + name, " " + path)
                vals.append(v)
            c[s] = vals
    p = subprocess.run([PROBE, json.dumps(c)], capture_output=True, text=True)
    if expect_fail:
        return p
    if p.returncode != 0:
        raise SystemExit(f"FAIL: packed_sft_probe exited {p.returncode}: {p.stderr[-2000:]}")
    return json.loads(p.stdout)


def copy_pairs(names, src_dir, dst_dir):
    os.makedirs(dst_dir, exist_ok=True)
    out = {}
    for name in names:
        for key in ("inputs", "targets"):
            for ext in (".bin", ".idx"):
                shutil.copy(os.path.join(src_dir, f"{name}_{key}_document{ext}"), dst_dir)
        out[name] = os.path.join(dst_dir, name)
    return out


def npy_files(folder):
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(folder, "*.npy")))


def check_packing(tmp, packed, data_dir, cfg, label, skip_log):
    work = os.path.join(tmp, "pack_" + "".join(ch if ch.isalnum() else "_" for ch in label))
    bmd_dir, mds_dir = os.path.join(work, "bmd"), os.path.join(work, "mds")
    names = ["A", "B"]
    bmd_prefixes = copy_pairs(names, data_dir, bmd_dir)
    mds_prefixes = copy_pairs(names, data_dir, mds_dir)
    skip_log.ids.clear()
    bmd = bmd_groups(packed, cfg, bmd_prefixes)
    got = run_probe(cfg, mds_prefixes)
    check(got["num_samples"] == num_samples(cfg), f"{label}: num_samples {got['num_samples']} vs {num_samples(cfg)}")
    check(len(got["groups"]) == len(bmd), f"{label}: {len(got['groups'])} datasets, BMD builds {len(bmd)}")
    rows = 0
    for g, (k, name, ds) in zip(got["groups"], bmd):
        what = f"{label} {name}"
        check(g["split"] == k and g["name"] == name, f"{what}: mds group {g['split']} {g['name']}")
        if not check(g["size"] == len(ds), f"{what}: {g['size']} samples, BMD has {len(ds)}"):
            continue
        bad = [i for i in range(len(ds)) if bmd_row(ds, i) != g["rows"][i]]
        if bad:
            i = bad[0]
            check(False, f"{what}: {len(bad)} of {len(ds)} rows differ; first {i}:\n  mds {g['rows'][i]}\n"
                         f"  BMD {bmd_row(ds, i)}")
        unreadable = sum(r is None for r in g["rows"])
        rows += len(ds) - unreadable
    bmd_npy, mds_npy = npy_files(bmd_dir), npy_files(mds_dir)
    check(bmd_npy == mds_npy, f"{label}: index files differ in name:\n  mds {mds_npy}\n  BMD {bmd_npy}")
    for f in set(bmd_npy) & set(mds_npy):
        check(filecmp.cmp(os.path.join(bmd_dir, f), os.path.join(mds_dir, f), shallow=False),
              f"{label}: {f} differs from BMD's np.save")
    skipped = sorted({e for g in got["groups"] for m in g["members"] for e in m["too_long"]})
    if "data_path" in cfg and len(cfg["data_path"]) == 1:
        check(skipped == sorted(set(skip_log.ids)),
              f"{label}: mds skips examples {skipped[:10]}..., BMD warns about {sorted(set(skip_log.ids))[:10]}...")
    epochs = max(m["epochs"] for g in got["groups"] for m in g["members"])
    print(f"{label}: {len(bmd)} datasets, {rows} packed rows of {cfg['seq_length'] + 1} tokens, up to {epochs} epochs, "
          f"{len(skipped)} examples too long, {len(mds_npy)} index files: equal to BMD", flush=True)
    return mds_prefixes, got


def check_reuse(cfg, prefixes, first, label):
    c = dict(cfg, verify=False)
    again = run_probe(c, prefixes)
    statuses = {m["status"] for g in again["groups"] for m in g["members"]}
    check(statuses == {"existing"}, f"{label}: second run statuses {statuses}, expected existing")
    check([g["rows"] for g in again["groups"]] == [g["rows"] for g in first["groups"]],
          f"{label}: rows read from the existing index files differ")
    verified = run_probe(dict(cfg, verify=True, dump=False), prefixes)
    statuses = {m["status"] for g in verified["groups"] for m in g["members"]}
    check(statuses == {"verified"}, f"{label}: --verify statuses {statuses}")
    # The cache names hold no sequence length: a shorter one must not take rows made for this one.
    shorter = run_probe(dict(cfg, seq_length=cfg["seq_length"] // 2, dump=False), prefixes, expect_fail=True)
    check(shorter.returncode == 1 and "longer --seq-length" in shorter.stderr,
          f"{label}: a cache built for --seq-length {cfg['seq_length']} read with {cfg['seq_length'] // 2}: exit "
          f"{shorter.returncode}, {shorter.stderr[-300:]}")
    print(f"{label}: second run reuses the files, --verify agrees, a shorter --seq-length is refused", flush=True)


def check_own_documents(tmp, packed, exe, gpt2, data_dir, cfg):
    """read_split_documents=True: the valid split's rows are BMD's rows for a pair of exactly those documents."""
    work = os.path.join(tmp, "own_docs")
    mds_prefixes = copy_pairs(["A"], data_dir, os.path.join(work, "mds"))
    c = dict(cfg, data_path=["A"], read_split_documents=True)
    got = run_probe(c, mds_prefixes)
    valid = next(g for g in got["groups"] if g["name"] == "valid")
    m = valid["members"][0]
    b, e = m["doc_begin"], m["doc_end"]
    check(m["first_example"] == b and "_docs" in m["sample_idx"], f"own documents: member {m}")
    with open(os.path.join(data_dir, "A.jsonl"), encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")[b:e]  # not splitlines(): raw U+2028 and U+0085 stay inside the JSON strings
    sub_src = os.path.join(work, "sub.jsonl")
    with open(sub_src, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)
    sub = os.path.join(work, "bmd", "sub")
    os.makedirs(os.path.dirname(sub))
    C.mds_preprocess(exe, ["--input", sub_src, "--output-prefix", sub, "--sft", "--prompt-key", "inputs",
                           "--answer-key", "targets", "--vocab-file", os.path.join(gpt2, "encoder.json"),
                           "--merge-file", os.path.join(gpt2, "vocab.bpe"), "--append-eod"])
    ds = packed.DecoderPackedMTFDataset(name="valid", data_prefix=sub, data_impl="mmap", skip_warmup=True,
                                        documents=np.arange(0, e - b, dtype=np.int32), num_samples=m["num_samples"],
                                        seq_length=cfg["seq_length"] + 1, pad_token=cfg["pad"], eos_token=cfg["pad"],
                                        seed=cfg["seed"])
    check(len(ds) == valid["size"] and all(row_of(ds[i]) == valid["rows"][i] for i in range(len(ds))),
          f"own documents: valid rows differ from BMD's on a pair of documents [{b}, {e}) ({len(ds)} vs {valid['size']})")
    theirs = sorted(glob.glob(sub + "_valid_indexmap_*.npy"))
    ours = [m["sample_idx"], m["shuffle_idx"]]
    check(len(theirs) == 2 and all(np.array_equal(np.load(t), np.load(o)) for t, o in zip(theirs, sorted(ours))),
          "own documents: the index arrays differ from BMD's for that pair")
    print(f"read_split_documents: valid documents [{b}, {e}) packed as BMD packs a pair of just those documents "
          f"({valid['size']} rows)", flush=True)


def main():
    exe, _, gpt2 = C.test_env()
    if not os.path.isdir(os.path.join(TREE, "megatron", "data")):
        C.skip(f"{TREE} not found")
    if not os.access(PROBE, os.X_OK):
        C.skip(f"{PROBE} not built")
    core_helpers = load_core_helpers()
    if core_helpers is None:
        C.skip("megatron-core's helpers_cpp (the blending index) is not available")
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="mds-xcheck-packed-sft-")
    try:
        packed = install_bmd(core_helpers)
        skip_log = SkipLog()
        lg = logging.getLogger("megatron.data.decoder_packed_mtf_dataset")
        lg.addHandler(skip_log)
        lg.propagate = False
        lg.setLevel(logging.WARNING)
        check_preprocess(tmp, exe, gpt2)

        # Two pairs for the packing checks.
        data_dir = os.path.join(tmp, "data")
        os.makedirs(data_dir)
        for name, seed, n in (("A", 21, 420), ("B", 22, 260)):
            src = os.path.join(data_dir, name + ".jsonl")
            write_pairs(make_pairs(seed, n), src)
            C.mds_preprocess(exe, ["--input", src, "--output-prefix", os.path.join(data_dir, name), "--sft",
                                   "--prompt-key", "inputs", "--answer-key", "targets", "--append-eod",
                                   "--vocab-file", os.path.join(gpt2, "encoder.json"),
                                   "--merge-file", os.path.join(gpt2, "vocab.bpe")])
        tokens = sizes_of(os.path.join(data_dir, "A_inputs_document")) + sizes_of(os.path.join(data_dir, "A_targets_document"))
        print(f"pair A: {len(tokens)} examples of {tokens.min()} to {tokens.max()} tokens (median {int(np.median(tokens))})")

        def samples_for(seq, epochs):
            fits = tokens[tokens <= seq + 1]
            return max(8, int(epochs * fits.sum() / (seq + 1)))
        base = {"global_batch_size": 4, "eval_interval": 10, "eval_iters": 2, "pad": 50257}
        configs = []
        for seed, seq in ((1234, 32), (42, 128), (7, 512)):
            configs.append((f"split seed {seed} seq {seq}",
                            dict(base, data_path=["A"], split="90,7,3", seed=seed, seq_length=seq,
                                 train_samples=samples_for(seq, 2.6))))
        configs.append(("blended 0.3 A 0.7 B seq 64",
                        dict(base, data_path=["0.3", "A", "0.7", "B"], split="80,15,5", seed=99, seq_length=64,
                             train_samples=samples_for(64, 1.7))))
        configs.append(("weighted split paths seq 96",
                        dict(base, seed=3, seq_length=96, train_samples=samples_for(96, 1.5),
                             train=["tr: 0.6 0:0.9 A, 0.4 0:0.85 B"], valid=["va: 1 0.9:1 A", "vb: 1 0.85:1 B"],
                             test=["te: 0.5 0.5:1 A, 0.5 0.2:0.6 B"])))
        results = {}
        for label, cfg in configs:
            results[label] = check_packing(tmp, packed, data_dir, cfg, label, skip_log)
        label, cfg = configs[1]
        check_reuse(cfg, *results[label], label)
        check_own_documents(tmp, packed, exe, gpt2, data_dir, configs[1][1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print(f"PASS ({time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()
