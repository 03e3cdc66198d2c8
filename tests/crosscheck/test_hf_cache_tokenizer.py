#!/usr/bin/env python3
"""--tokenizer-type PretrainedFromHF --tokenizer-name-or-path ORG/NAME (BMD: AutoTokenizer.from_pretrained(NAME)) found
offline in the local Hugging Face cache where huggingface_hub itself finds it:
  - for each way of naming the cache (HOME only, XDG_CACHE_HOME, HF_HOME with '~', the legacy HUGGINGFACE_HUB_CACHE,
    HF_HUB_CACHE with a $VAR), a cache in huggingface_hub's layout (blobs/, snapshots/<commit>/ links, refs/main) is
    built at EVERY candidate folder, each with a tokenizer of a different size: huggingface_hub's own
    try_to_load_from_cache and transformers' AutoTokenizer.from_pretrained(NAME) with HF_HUB_OFFLINE=1 pick one, and
    `mds-train --dry-run --json` reports vocab_size == len(that tokenizer) (BMD's vocab size), with tr11's real name;
  - a local folder of the same name wins over the cache (as in transformers);
  - absent: exit 2, the message names the local path and the cache folder searched and how to download it;
    a snapshot with vocab.json + merges.txt but no tokenizer.json: exit 2 saying so;
  - mds-ckpt-to-hf on a checkpoint whose args name the tokenizer (PretrainedFromHF + the Hub name) writes the cached
    tokenizer files (not the rest of the snapshot) into the export, which AutoTokenizer loads; absent from the cache,
    it fails (exit 1) naming the cache, --tokenizer-dir and --no-tokenizer, and writes nothing.
Exits 77 without the binaries or without transformers / tokenizers / huggingface_hub."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

BIN = os.environ.get("MDS_BIN", "build/bin")
TRAIN = os.path.join(BIN, "mds-train")
TO_HF = os.path.join(BIN, "mds-ckpt-to-hf")
if not os.path.exists(TRAIN):
    print("SKIP: mds-train not built")
    sys.exit(77)
try:
    import huggingface_hub  # noqa: F401
    import tokenizers
    import transformers  # noqa: F401
except Exception as e:  # noqa: BLE001
    print(f"SKIP: huggingface_hub / tokenizers / transformers not importable: {e}")
    sys.exit(77)

NAME = "bigscience-catalogue-data-dev/byte-level-bpe-tokenizer-no-norm-250k-whitespace-and-eos-regex-alt-v2-pre_nfkc"
COMMIT = "a3c9f1e0b2d4c6e8f0a1b3c5d7e9f1a3b5c7d9e1"
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Megatron-DeepSpeed trained BLOOM on 384 GPUs.",
         "Ünïcode text, numbers 12345 and    spaces!", "Le modèle a été entraîné à Paris."] * 20
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def tokenizer_folder(folder, extra):
    """A fast tokenizer (byte-level BPE + special tokens + `extra` added tokens) saved with save_pretrained."""
    t = tokenizers.ByteLevelBPETokenizer()
    t.train_from_iterator(TEXTS, vocab_size=300, min_frequency=1, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
                          show_progress=False)
    if extra:
        t.add_tokens([f"<extra_{i}>" for i in range(extra)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=t._tokenizer, unk_token="<unk>", bos_token="<s>",
                                                eos_token="</s>", pad_token="<pad>")
    fast.save_pretrained(folder)
    return len(fast)


def cache_repo(cache, files_from, name=NAME, ref=True, only=None):
    """huggingface_hub's layout: blobs/<hash>, snapshots/<commit>/<file> -> ../../blobs/<hash>, refs/main,
    .no_exist/<commit>/config.json."""
    repo = os.path.join(cache, "models--" + name.replace("/", "--"))
    snap = os.path.join(repo, "snapshots", COMMIT)
    os.makedirs(os.path.join(repo, "blobs"), exist_ok=True)
    os.makedirs(snap, exist_ok=True)
    for i, f in enumerate(sorted(os.listdir(files_from))):
        if only is not None and f not in only:
            continue
        blob = f"{i:040x}"
        shutil.copy(os.path.join(files_from, f), os.path.join(repo, "blobs", blob))
        os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snap, f))
    # A tokenizer repository has no config.json: huggingface_hub records that on the first (online) load, and
    # transformers' offline AutoTokenizer relies on the record.
    os.makedirs(os.path.join(repo, ".no_exist", COMMIT), exist_ok=True)
    open(os.path.join(repo, ".no_exist", COMMIT, "config.json"), "w").close()
    if ref:
        os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
        with open(os.path.join(repo, "refs", "main"), "w") as fd:
            fd.write(COMMIT)
    return snap


PY_PROBE = """
import json, os, sys
from huggingface_hub import constants, try_to_load_from_cache
from transformers import AutoTokenizer
name = sys.argv[1]
out = {"cache": constants.HF_HUB_CACHE, "file": try_to_load_from_cache(name, "tokenizer.json")}
out["len"] = len(AutoTokenizer.from_pretrained(name)) if isinstance(out["file"], str) else None
print(json.dumps(out))
"""


def real_libraries(env, cwd, name=NAME):
    r = subprocess.run([sys.executable, "-c", PY_PROBE, name], env={**env, "HF_HUB_OFFLINE": "1"}, cwd=cwd,
                       capture_output=True, text=True)
    if not check(r.returncode == 0, f"huggingface_hub / transformers failed: {r.stderr[-800:]}"):
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def dry_run(env, cwd, name=NAME):
    return subprocess.run([os.path.abspath(TRAIN), "--dry-run", "--json", "--lr", "1e-3", "--num-layers", "2", "--hidden-size",
                           "32", "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
                           "--micro-batch-size", "1", "--global-batch-size", "2", "--train-iters", "1",
                           "--tokenizer-type", "PretrainedFromHF", "--tokenizer-name-or-path", name],
                          env=env, cwd=cwd, capture_output=True, text=True)


def base_env(tmp):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.path.join(tmp, "home")}
    for k in ("LD_LIBRARY_PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
        if k in os.environ:
            env[k] = os.environ[k]
    return env


def precedence(tmp, folders):
    home = os.path.join(tmp, "home")
    cases = {
        "HOME only": {},
        "XDG_CACHE_HOME": {"XDG_CACHE_HOME": f"{tmp}/xdg"},
        "HF_HOME with ~": {"XDG_CACHE_HOME": f"{tmp}/xdg", "HF_HOME": "~/hfhome"},
        "legacy HUGGINGFACE_HUB_CACHE": {"HF_HOME": f"{tmp}/hfhome2", "HUGGINGFACE_HUB_CACHE": f"{tmp}/legacy"},
        "HF_HUB_CACHE with $VAR": {"SCRATCH": f"{tmp}/scratch", "HF_HUB_CACHE": "$SCRATCH/hub",
                                   "HUGGINGFACE_HUB_CACHE": f"{tmp}/legacy", "HF_HOME": f"{tmp}/hfhome2"},
    }
    # Every folder any case could pick, each with a tokenizer of another size.
    candidates = [f"{home}/.cache/huggingface/hub", f"{tmp}/xdg/huggingface/hub", f"{home}/hfhome/hub",
                  f"{tmp}/hfhome2/hub", f"{tmp}/legacy", f"{tmp}/scratch/hub"]
    sizes = {}
    for i, c in enumerate(candidates):
        shutil.rmtree(os.path.join(c, "models--" + NAME.replace("/", "--")), ignore_errors=True)
        cache_repo(c, folders[i])
        sizes[c] = folders[i]
    seen = set()
    for label, extra in cases.items():
        env = {**base_env(tmp), **extra}
        ref = real_libraries(env, tmp)
        if ref is None:
            continue
        if not check(isinstance(ref["file"], str) and ref["len"] is not None, f"{label}: huggingface_hub did not find the file: {ref}"):
            continue
        seen.add(ref["cache"])
        r = dry_run(env, tmp)
        if not check(r.returncode == 0, f"{label}: mds-train --dry-run failed: {r.stderr[-600:]}"):
            continue
        got = json.loads(r.stdout)["model"]["vocab_size"]
        check(got == ref["len"], f"{label}: mds vocab_size {got}, transformers len(tokenizer) {ref['len']} (cache {ref['cache']})")
        print(f"{label}: huggingface_hub uses {ref['cache']}; mds finds the same tokenizer ({got} tokens)")
    check(len(seen) == len(cases), f"the cases did not exercise distinct caches: {seen}")


def local_folder_wins(tmp, folders):
    env = {**base_env(tmp), "HF_HUB_CACHE": f"{tmp}/scratch/hub"}
    work = os.path.join(tmp, "work")
    shutil.copytree(folders[-1], os.path.join(work, NAME))
    ref = real_libraries(env, work)
    r = dry_run(env, work)
    if check(r.returncode == 0 and ref is not None, f"local folder: {r.stderr[-400:]}"):
        got = json.loads(r.stdout)["model"]["vocab_size"]
        check(got == ref["len"] == tokenizer_len[-1], f"local folder: mds {got}, transformers {ref['len']}, folder {tokenizer_len[-1]}")
        print("a local folder of the same name wins over the cache, as in transformers")


def errors(tmp, folders):
    empty = os.path.join(tmp, "empty-cache")
    os.makedirs(empty)
    env = {**base_env(tmp), "HF_HUB_CACHE": empty}
    r = dry_run(env, tmp, "bigscience/not-cached")
    check(r.returncode == 2, f"absent: exit {r.returncode}, expected 2")
    for part in (os.path.join(tmp, "bigscience", "not-cached"), os.path.join(empty, "models--bigscience--not-cached"),
                 "HF_HUB_CACHE", "hf download bigscience/not-cached"):
        check(part in r.stderr, f"absent: the message lacks {part!r}: {r.stderr}")
    # A slow tokenizer only: vocab.json + merges.txt, no tokenizer.json.
    slow = os.path.join(tmp, "slow")
    t = tokenizers.ByteLevelBPETokenizer()
    t.train_from_iterator(TEXTS, vocab_size=300, min_frequency=1, show_progress=False)
    os.makedirs(slow)
    t.save_model(slow)
    cache_repo(empty, slow, name="org/slow-only")
    r = dry_run(env, tmp, "org/slow-only")
    check(r.returncode == 2 and "no tokenizer.json" in r.stderr and "vocab.json and merges.txt" in r.stderr
          and "save_pretrained" in r.stderr, f"slow-only snapshot: exit {r.returncode}: {r.stderr[-500:]}")
    # refs/main missing: huggingface_hub does not find it offline, neither does mds; the snapshot is named.
    cache_repo(empty, folders[0], name="org/no-ref", ref=False)
    r = dry_run(env, tmp, "org/no-ref")
    check(r.returncode == 2 and "refs/main" in r.stderr and COMMIT in r.stderr, f"no refs/main: exit {r.returncode}: {r.stderr[-500:]}")
    print("absent tokenizer, slow-only snapshot, missing refs/main: exit 2 naming what was searched")


def ckpt_to_hf(tmp, folders):
    if not os.path.exists(TO_HF):
        print("mds-ckpt-to-hf not built: its case is skipped")
        return
    try:
        import torch
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import bmd_checkpoint
    except Exception as e:  # noqa: BLE001
        print(f"torch / bmd_checkpoint not importable ({e}): the mds-ckpt-to-hf case is skipped")
        return
    root = os.path.join(tmp, "ckpt")
    bmd_checkpoint.make_checkpoint(root, bmd_checkpoint.ModelShape(padded_vocab=384), tp=1, pp=1, iteration=10)
    f = os.path.join(root, "global_step10", "mp_rank_00_model_states.pt")
    sd = torch.load(f, weights_only=False)
    sd["args"].tokenizer_name_or_path = NAME
    torch.save(sd, f)
    cache = os.path.join(tmp, "ckpt-cache")
    snap = cache_repo(cache, folders[0])
    # A snapshot of a whole model repository: its weights must not be copied.
    with open(os.path.join(snap, "pytorch_model.bin"), "wb") as fd:
        fd.write(b"not a tokenizer")
    env = {**base_env(tmp), "HF_HUB_CACHE": cache}
    out = os.path.join(tmp, "ckpt-hf")
    r = subprocess.run([os.path.abspath(TO_HF), root, out, "--quiet"], env=env, capture_output=True, text=True)
    if not check(r.returncode == 0, f"mds-ckpt-to-hf: {r.stderr[-600:]}"):
        return
    files = sorted(os.listdir(out))
    check("tokenizer.json" in files and "pytorch_model.bin" not in files, f"mds-ckpt-to-hf: exported files {files}")
    n = len(transformers.AutoTokenizer.from_pretrained(out))
    check(n == tokenizer_len[0], f"mds-ckpt-to-hf: exported tokenizer has {n} tokens, the cached one {tokenizer_len[0]}")
    # Absent from the cache: an error naming the cache searched and the ways out, before anything is written (as
    # for GPT-2 files the args name but that exist nowhere).
    env2 = {**base_env(tmp), "HF_HUB_CACHE": os.path.join(tmp, "nowhere")}
    r = subprocess.run([os.path.abspath(TO_HF), root, out + "2"], env=env2, capture_output=True, text=True)
    check(r.returncode == 1 and os.path.join(tmp, "nowhere") in r.stderr and "--no-tokenizer" in r.stderr
          and "--tokenizer-dir" in r.stderr and not os.path.exists(out + "2"),
          f"mds-ckpt-to-hf, tokenizer absent: exit {r.returncode}: {r.stderr[-600:]}")
    print("mds-ckpt-to-hf: the checkpoint's PretrainedFromHF tokenizer comes from the cache (tokenizer files only)")


def preprocess(tmp, folders):
    """mds-preprocess takes the same Hub name from the cache: its documents are the ids transformers' offline
    AutoTokenizer gives; an absent name is a usage error naming the cache folder."""
    cache = os.path.join(tmp, "pre-cache")
    cache_repo(cache, folders[2])
    env = {**base_env(tmp), "HF_HUB_CACHE": cache}
    docs = os.path.join(tmp, "pre.jsonl")
    with open(docs, "w") as f:
        for t in TEXTS[:4]:
            f.write(json.dumps({"text": t}) + "\n")
    out = os.path.join(tmp, "pre-out")
    r = subprocess.run([os.path.abspath(os.path.join(BIN, "mds-preprocess")), "--input", docs, "--output-prefix", out,
                        "--tokenizer-name-or-path", NAME, "--workers", "1", "--quiet"], env=env, capture_output=True, text=True)
    if not check(r.returncode == 0, f"mds-preprocess --tokenizer-name-or-path {NAME}: exit {r.returncode}: {r.stderr[-600:]}"):
        return
    probe = ("import json, sys\nfrom transformers import AutoTokenizer\nt = AutoTokenizer.from_pretrained(sys.argv[1])\n"
             "print(json.dumps([t.encode(x, add_special_tokens=False) for x in sys.argv[2:]]))")
    want = subprocess.run([sys.executable, "-c", probe, NAME, *TEXTS[:4]], env={**env, "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True)
    if not check(want.returncode == 0, f"transformers: {want.stderr[-600:]}"):
        return
    want = json.loads(want.stdout.strip().splitlines()[-1])
    import numpy as np
    idx = open(out + "_text_document.idx", "rb").read()
    count = int.from_bytes(idx[18:26], "little")
    dtype = {1: np.uint8, 8: np.uint16, 4: np.int32}.get(idx[17], np.int32)
    sizes = np.frombuffer(idx, np.int32, count, 34)
    flat = np.fromfile(out + "_text_document.bin", dtype)
    got, pos = [], 0
    for n in sizes:
        got.append(flat[pos:pos + n].tolist())
        pos += int(n)
    check(got == want, f"mds-preprocess ids {got[:1]} differ from transformers' {want[:1]}")
    r = subprocess.run([os.path.abspath(os.path.join(BIN, "mds-preprocess")), "--input", docs, "--output-prefix", out + "x",
                        "--tokenizer-name-or-path", "nobody/absent"], env=env, capture_output=True, text=True)
    check(r.returncode == 2 and cache in r.stderr and "nobody/absent" in r.stderr,
          f"mds-preprocess, absent Hub name: exit {r.returncode}: {r.stderr[-600:]}")
    print("mds-preprocess: the Hub name's tokenizer from the cache gives transformers' ids")


tokenizer_len = []
with tempfile.TemporaryDirectory() as tmp:
    folders = []
    for k in range(7):
        folder = os.path.join(tmp, f"tok{k}")
        tokenizer_len.append(tokenizer_folder(folder, extra=k * 3))
        folders.append(folder)
    precedence(tmp, folders)
    local_folder_wins(tmp, folders)
    errors(tmp, folders)
    ckpt_to_hf(tmp, folders)
    preprocess(tmp, folders)

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
