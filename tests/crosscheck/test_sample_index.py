"""Cross-check: mds-sample-index against an independent restatement of Megatron-DeepSpeed (BigScience fork)
megatron/data/gpt_dataset.py, dataset_utils.py and blendable_dataset.py, built on numpy's own RandomState and
np.save and on megatron-core's compiled helpers (build_sample_idx with drop_last_partial_sequence=True and
add_extra_token_to_sequence=1, which is BS behaviour; build_blending_indices) -- specs/data.md section 4.

For random datasets (several sizes, dtypes, zero-length sequences, seeds, sequence lengths, single and multi epoch
with and without a separate last epoch, blends of 2-3 datasets) it writes .bin/.idx with numpy (specs/data.md 1.3),
runs mds-sample-index, and checks
  1. the three .npy files of every dataset and split are where BS would write them, np.load gives the reference
     arrays (values and dtypes), and their bytes equal np.save's;
  2. --print-sample N prints the tokens BS's (Blendable|GPT)Dataset[N] returns;
  3. a second run keeps the files ("existing"), --verify recomputes and agrees ("verified"), and a damaged file is
     reported;
  4. configurations where BS fails (the last-epoch assertion) make the tool fail with exit status 1.
Exits 77 (skipped) without numpy or megatron-core's helpers. Binaries come from $MDS_BIN.
"""

import glob
import importlib.util
import io
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not installed")
    sys.exit(77)


def load_helpers():
    """megatron-core's compiled helpers_cpp, loaded directly (importing megatron.core would import torch)."""
    spec = importlib.util.find_spec("megatron")
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            for path in glob.glob(os.path.join(root, "core", "datasets", "helpers_cpp*.so")):
                s = importlib.util.spec_from_file_location("helpers_cpp", path)
                module = importlib.util.module_from_spec(s)
                s.loader.exec_module(module)
                return module
    try:
        from megatron.core.datasets import helpers_cpp  # noqa: PLC0415

        return helpers_cpp
    except Exception:  # noqa: BLE001
        return None


helpers = load_helpers()
if helpers is None:
    print("SKIP: megatron-core's helpers_cpp is not available")
    sys.exit(77)

BIN = os.path.join(os.environ.get("MDS_BIN", os.path.join(os.getcwd(), "bin")), "mds-sample-index")
if not os.path.exists(BIN):
    print(f"FAIL: {BIN} not found (set MDS_BIN)")
    sys.exit(1)

# ---------------------------------------------------------------------------------------------------------------
# Datasets (.bin/.idx written with numpy per specs/data.md 1.3)

DTYPE_CODES = {np.uint16: 8, np.int32: 4}


def write_dataset(prefix, sizes, dtype, rng):
    sizes = np.asarray(sizes, dtype=np.int32)
    high = 65535 if dtype == np.uint16 else 250000
    tokens = [rng.integers(0, high, size=int(n)).astype(dtype) for n in sizes]
    with open(prefix + ".bin", "wb") as f:
        for t in tokens:
            f.write(t.tobytes(order="C"))
    itemsize = np.dtype(dtype).itemsize
    pointers = np.zeros(len(sizes), dtype=np.int64)
    if len(sizes) > 1:
        pointers[1:] = np.cumsum(sizes[:-1].astype(np.int64) * itemsize)
    doc_idx = np.arange(len(sizes) + 1, dtype=np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", DTYPE_CODES[dtype]))
        f.write(struct.pack("<Q", len(sizes)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(sizes.tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(doc_idx.tobytes(order="C"))
    return tokens


# ---------------------------------------------------------------------------------------------------------------
# Reference: BS gpt_dataset.py / dataset_utils.py / blendable_dataset.py / training.py semantics


def get_train_valid_test_split_(splits_string, size):
    if splits_string.find(",") != -1:
        splits = [float(s) for s in splits_string.split(",")]
    elif splits_string.find("/") != -1:
        splits = [float(s) for s in splits_string.split("/")]
    else:
        splits = [float(splits_string)]
    while len(splits) < 3:
        splits.append(0.0)
    splits = splits[:3]
    splits_sum = sum(splits)
    assert splits_sum > 0.0
    splits = [split / splits_sum for split in splits]
    splits_index = [0]
    for index, split in enumerate(splits):
        splits_index.append(splits_index[index] + int(round(split * float(size))))
    diff = splits_index[-1] - size
    for index in range(1, len(splits_index)):
        splits_index[index] -= diff
    return splits_index


def train_valid_test_num_samples(train_samples, train_iters, gbs, eval_interval, eval_iters):
    if train_samples:
        train_iters = train_samples // gbs  # update_train_iters without ramp-up
    else:
        train_samples = train_iters * gbs
    return [train_samples, (train_iters // eval_interval + 1) * eval_iters * gbs, eval_iters * gbs]


def _num_epochs(tokens_per_epoch, seq_length, num_samples):
    num_epochs = 0
    total_tokens = 0
    while True:
        num_epochs += 1
        total_tokens += tokens_per_epoch
        if ((total_tokens - 1) // seq_length) >= num_samples:
            return num_epochs


def _build_doc_idx(documents, num_epochs, np_rng, separate_last_epoch):
    if not separate_last_epoch or num_epochs == 1:
        doc_idx = np.mgrid[0:num_epochs, 0 : len(documents)][1]
        doc_idx[:] = documents
        doc_idx = doc_idx.reshape(-1)
        doc_idx = doc_idx.astype(np.int32)
        np_rng.shuffle(doc_idx)
        return doc_idx
    doc_idx_first = _build_doc_idx(documents, num_epochs - 1, np_rng, False)
    doc_idx_last = _build_doc_idx(documents, 1, np_rng, False)
    return np.concatenate((doc_idx_first, doc_idx_last))


def _build_shuffle_idx(num_samples, total_size, np_rng):
    dtype_ = np.uint32
    if total_size >= (np.iinfo(np.uint32).max - 1):
        dtype_ = np.int64
    shuffle_idx_first = np.arange(start=0, stop=num_samples, step=1, dtype=dtype_)
    np_rng.shuffle(shuffle_idx_first)
    if num_samples == total_size:
        return shuffle_idx_first
    shuffle_idx_last = np.arange(start=num_samples, stop=total_size, step=1, dtype=dtype_)
    np_rng.shuffle(shuffle_idx_last)
    return np.concatenate((shuffle_idx_first, shuffle_idx_last))


def build_index_mappings(documents, sizes, num_samples, seq_length, seed, cutoff_last_epoch):
    tokens_per_epoch = np.sum(sizes[documents])
    num_epochs = _num_epochs(tokens_per_epoch, seq_length, num_samples)
    np_rng = np.random.RandomState(seed=seed)
    if num_epochs == 1:
        separate_last_epoch = False
    else:
        num_samples_from_epochs_minus_one = ((num_epochs - 1) * tokens_per_epoch - 1) // seq_length
        last_epoch_num_samples = num_samples - num_samples_from_epochs_minus_one
        assert last_epoch_num_samples >= 0
        num_samples_per_epoch = (tokens_per_epoch - 1) // seq_length
        assert last_epoch_num_samples <= num_samples_per_epoch, "last epoch number of samples exceeded max value"
        separate_last_epoch = last_epoch_num_samples < int(cutoff_last_epoch * num_samples_per_epoch)
    doc_idx = _build_doc_idx(documents, num_epochs, np_rng, separate_last_epoch)
    assert doc_idx.dtype == np.int32 and sizes.dtype == np.int32
    # megatron-core's helper with BS behaviour: drop the last partial sample, seq_length + 1 tokens per sample.
    sample_idx = helpers.build_sample_idx_int32(sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch, True, 1)
    num_samples_ = num_samples_from_epochs_minus_one if separate_last_epoch else sample_idx.shape[0] - 1
    shuffle_idx = _build_shuffle_idx(num_samples_, sample_idx.shape[0] - 1, np_rng)
    return doc_idx, sample_idx, shuffle_idx, int(num_epochs), separate_last_epoch


class GPTDataset:
    def __init__(self, name, prefix, documents, tokens, sizes, num_samples, seq_length, seed, cutoff):
        self.tokens = tokens
        self.doc_idx, self.sample_idx, self.shuffle_idx, self.epochs, self.separate = build_index_mappings(
            documents, sizes, num_samples, seq_length, seed, cutoff
        )
        base = f"{prefix}_{name}_indexmap_{num_samples}ns_{seq_length}sl_{seed}s"
        self.files = {k: f"{base}_{k}.npy" for k in ("doc_idx", "sample_idx", "shuffle_idx")}
        self.num_samples = num_samples

    def __len__(self):
        return self.sample_idx.shape[0] - 1

    def get(self, i, offset=0, length=None):
        t = self.tokens[i]
        return t[offset:] if length is None else t[offset : offset + length]

    def __getitem__(self, idx):
        idx = self.shuffle_idx[idx]
        doc_index_f = self.sample_idx[idx][0]
        doc_index_l = self.sample_idx[idx + 1][0]
        offset_f = self.sample_idx[idx][1]
        offset_l = self.sample_idx[idx + 1][1]
        if doc_index_f == doc_index_l:
            sample = self.get(self.doc_idx[doc_index_f], offset=offset_f, length=offset_l - offset_f + 1)
        else:
            sample_list = [self.get(self.doc_idx[doc_index_f], offset=offset_f)]
            for i in range(doc_index_f + 1, doc_index_l):
                sample_list.append(self.get(self.doc_idx[i]))
            sample_list.append(self.get(self.doc_idx[doc_index_l], length=offset_l + 1))
            sample = np.concatenate(sample_list)
        return np.array(sample, dtype=np.int64)


class BlendableDataset:
    def __init__(self, datasets, weights):
        self.datasets = datasets
        assert len(datasets) == len(weights)
        self.size = sum(len(d) for d in datasets)
        weights = np.array(weights, dtype=np.float64)
        weights /= np.sum(weights)
        self.dataset_index = np.zeros(self.size, dtype=np.int16)  # uint8 in BS; megatron-core's helper wants int16
        self.dataset_sample_index = np.zeros(self.size, dtype=np.int64)
        helpers.build_blending_indices(
            self.dataset_index, self.dataset_sample_index, weights, len(datasets), self.size, False
        )

    def __len__(self):
        return self.size

    def __getitem__(self, idx):
        return self.datasets[self.dataset_index[idx]][self.dataset_sample_index[idx]]


def build_reference(data_path, tokens_by_prefix, split, num_samples, seq_length, seed, cutoff):
    """BS build_train_valid_test_datasets: returns (train dataset, per-prefix list of 3 GPTDatasets or None)."""
    if len(data_path) == 1:
        prefixes, weights, per_dataset = [data_path[0]], [1.0], [num_samples]
    else:
        prefixes = [p.strip() for p in data_path[1::2]]
        weights = [float(w) for w in data_path[0::2]]
        weight_sum = 0.0
        for w in weights:
            weight_sum += w
        weights = [w / weight_sum for w in weights]
        per_dataset = [[int(math.ceil(val * w * 1.005)) for val in num_samples] for w in weights]
    all_splits = []
    for prefix, n in zip(prefixes, per_dataset):
        tokens = tokens_by_prefix[prefix]
        sizes = np.array([len(t) for t in tokens], dtype=np.int32)
        bounds = get_train_valid_test_split_(split, sizes.shape[0])
        built = []
        for k, name in enumerate(("train", "valid", "test")):
            if bounds[k + 1] > bounds[k]:
                documents = np.arange(start=bounds[k], stop=bounds[k + 1], step=1, dtype=np.int32)
                built.append(GPTDataset(name, prefix, documents, tokens, sizes, n[k], seq_length, seed, cutoff))
            else:
                built.append(None)
        all_splits.append(built)
    if len(data_path) == 1:
        train = all_splits[0][0]
    else:
        train = BlendableDataset([s[0] for s in all_splits if s[0] is not None], weights)
    return train, all_splits


# ---------------------------------------------------------------------------------------------------------------

failures = []
checks = 0
coverage = set()  # (blended, num_epochs > 1, separate_last_epoch) of every index built


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run_tool(args):
    return subprocess.run([BIN] + args, capture_output=True, text=True)


def npy_bytes(a):
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=True)
    return buf.getvalue()


def compare_files(ref_ds, label):
    for key, want in (("doc_idx", ref_ds.doc_idx), ("sample_idx", ref_ds.sample_idx), ("shuffle_idx", ref_ds.shuffle_idx)):
        path = ref_ds.files[key]
        if not os.path.exists(path):
            check(False, f"{label}: {path} missing")
            continue
        got = np.load(path, allow_pickle=True, mmap_mode="r")
        check(got.dtype == want.dtype, f"{label}: {key} dtype {got.dtype} != {want.dtype}")
        check(got.shape == want.shape, f"{label}: {key} shape {got.shape} != {want.shape}")
        check(got.shape == want.shape and np.array_equal(got, want), f"{label}: {key} values differ")
        with open(path, "rb") as f:
            check(f.read() == npy_bytes(want), f"{label}: {key} bytes differ from np.save's")


def run_case(tmp, label, specs, split, seq_length, seed, train_samples=None, train_iters=None, gbs=8,
             eval_interval=1000, eval_iters=100, weights=None, probes=6, rng=None, cutoff=None):
    """specs: list of (name, sizes, dtype). weights: None for a single dataset, else one per spec."""
    tokens_by_prefix = {}
    data_path = []
    for i, (name, sizes, dtype) in enumerate(specs):
        prefix = os.path.join(tmp, f"{label}-{name}")
        tokens_by_prefix[prefix] = write_dataset(prefix, sizes, dtype, rng)
        if weights is not None:
            data_path.append(repr(weights[i]))
        data_path.append(prefix)
    num_samples = train_valid_test_num_samples(train_samples, train_iters, gbs, eval_interval, eval_iters)
    args = ["--data-path", *data_path, "--split", split, "--seq-length", str(seq_length), "--seed", str(seed),
            "--global-batch-size", str(gbs), "--eval-interval", str(eval_interval), "--eval-iters", str(eval_iters)]
    args += ["--train-samples", str(train_samples)] if train_samples else ["--train-iters", str(train_iters)]
    if cutoff is not None:
        args += ["--last-epoch-cutoff", repr(cutoff)]
    try:
        train, per_prefix = build_reference(data_path, tokens_by_prefix, split, num_samples, seq_length, seed,
                                            0.95 if cutoff is None else cutoff)
    except AssertionError as e:
        r = run_tool(args + ["--json"])
        check(r.returncode == 1, f"{label}: BS fails ({e}) but mds-sample-index exited {r.returncode}")
        check("last epoch" in r.stderr or "BlendableDataset" in r.stderr, f"{label}: unexpected message {r.stderr!r}")
        return f"{label}: bs-fails"

    r = run_tool(args + ["--json"])
    if r.returncode != 0:
        check(False, f"{label}: mds-sample-index failed: {r.stderr}")
        return f"{label}: error"
    summary = json.loads(r.stdout)
    check(summary["num_samples"] == dict(zip(("train", "valid", "test"), num_samples)),
          f"{label}: num_samples {summary['num_samples']} != {num_samples}")
    for d, splits in zip(summary["datasets"], per_prefix):
        for name, ref_ds in zip(("train", "valid", "test"), splits):
            js = d["splits"][name]
            if ref_ds is None:
                check(js is None, f"{label}: {d['prefix']} {name} should have no dataset")
                continue
            check(js is not None and js["status"] == "built", f"{label}: {name} status {js and js['status']}")
            check(js["files"] == ref_ds.files, f"{label}: file names {js['files']} != {ref_ds.files}")
            check(js["epochs"] == ref_ds.epochs and js["separate_last_epoch"] == ref_ds.separate,
                  f"{label}: {name} epochs/separate {js['epochs']}/{js['separate_last_epoch']} != "
                  f"{ref_ds.epochs}/{ref_ds.separate}")
            check(js["samples"] == len(ref_ds), f"{label}: {name} samples {js['samples']} != {len(ref_ds)}")
            compare_files(ref_ds, f"{label} {os.path.basename(d['prefix'])} {name}")
            coverage.add((weights is not None, ref_ds.epochs > 1, bool(ref_ds.separate)))

    # --print-sample: first, last and random indices of the (blended) training dataset.
    picks = {0, len(train) - 1} | {rng.integers(0, len(train)).item() for _ in range(probes)}
    for n in sorted(picks):
        try:
            want = train[n]
        except IndexError:
            want = None  # BS: a blended index past one dataset's end
        r = run_tool(args + ["--print-sample", str(n), "--quiet"])
        if want is None:
            check(r.returncode == 1, f"{label}: sample {n}: BS raises IndexError, mds exited {r.returncode}")
            continue
        got = [int(x) for x in r.stdout.split()] if r.returncode == 0 else None
        check(got == want.tolist(), f"{label}: sample {n}: {got} != {want.tolist()} ({r.stderr.strip()})")
        check(len(want) == seq_length + 1, f"{label}: sample {n} has {len(want)} tokens")
    r = run_tool(args + ["--print-sample", str(len(train))])
    check(r.returncode == 1 and "out of range" in r.stderr, f"{label}: sample past the end: {r.returncode} {r.stderr}")

    # Second run keeps the files, --verify agrees, --json carries the sample.
    mtimes = {p: os.stat(p).st_mtime_ns for s in per_prefix for ds in s if ds for p in ds.files.values()}
    r = run_tool(args + ["--json", "--print-sample", "0"])
    check(r.returncode == 0, f"{label}: second run failed: {r.stderr}")
    if r.returncode == 0:
        j = json.loads(r.stdout)
        statuses = {js["status"] for d in j["datasets"] for js in d["splits"].values() if js}
        check(statuses == {"existing"}, f"{label}: second run statuses {statuses}")
        check(j["sample"]["tokens"] == train[0].tolist(), f"{label}: --json sample differs")
    check(all(os.stat(p).st_mtime_ns == t for p, t in mtimes.items()), f"{label}: existing files were rewritten")
    r = run_tool(args + ["--json", "--verify"])
    check(r.returncode == 0 and all(js["status"] == "verified" for d in json.loads(r.stdout)["datasets"]
                                    for js in d["splits"].values() if js), f"{label}: --verify: {r.stderr}")
    return f"{label}: ok"


def main():
    rng = np.random.default_rng(20231207)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="mds-sample-index-") as tmp:
        # Single dataset, one epoch.
        sizes = rng.integers(1, 300, size=200)
        outcomes.append(run_case(tmp, "single", [("a", sizes, np.uint16)], "949,50,1", 64, 1234, train_samples=300,
                                 gbs=8, eval_interval=20, eval_iters=3, rng=rng))
        # Zero-length sequences, int32 tokens, --train-iters, '/' split, another seed.
        sizes = rng.integers(0, 40, size=150)
        sizes[rng.integers(0, 150, size=30)] = 0
        outcomes.append(run_case(tmp, "zeros", [("a", sizes, np.int32)], "90/5/5", 16, 7, train_iters=50, gbs=4,
                                 eval_interval=10, eval_iters=2, rng=rng))
        # Multi-epoch: a small dataset and many samples; several sample counts so both separate_last_epoch
        # outcomes occur (and perhaps the BS assertion).
        sizes = rng.integers(5, 60, size=40)
        for i, samples in enumerate((130, 200, 311, 420, 555, 1000)):
            outcomes.append(run_case(tmp, f"epochs{i}", [("a", sizes, np.uint16)], "969, 30, 1", 32, 1234 + i,
                                     train_samples=samples, gbs=1, eval_interval=1000, eval_iters=1, rng=rng))
        # The pre-2021-11 cutoff (0.80): chosen so that 0.80 and 0.95 disagree on separating the last epoch.
        sizes = np.full(10, 40)  # T = 400, S = 10: 39 samples per epoch; 2 epochs give 79
        outcomes.append(run_case(tmp, "cutoff80", [("a", sizes, np.uint16)], "1", 10, 3, train_samples=79 + 33,
                                 gbs=1, eval_interval=1000, eval_iters=0, rng=rng, cutoff=0.80))
        check(int(0.80 * 39) <= 33 < int(0.95 * 39), "cutoff80 case no longer separates the cutoffs")

        # Blends of 2 and 3 datasets, different weights, seq lengths and seeds.
        specs = [("a", rng.integers(1, 200, size=120), np.uint16), ("b", rng.integers(1, 90, size=300), np.int32)]
        outcomes.append(run_case(tmp, "blend2", specs, "98,1,1", 24, 42, train_samples=700, gbs=10,
                                 eval_interval=30, eval_iters=2, weights=[0.3, 0.7], rng=rng))
        specs = [("a", rng.integers(1, 120, size=90), np.uint16), ("b", rng.integers(1, 50, size=60), np.uint16),
                 ("c", rng.integers(1, 400, size=200), np.int32)]
        outcomes.append(run_case(tmp, "blend3", specs, "80,10,10", 50, 999, train_iters=40, gbs=16,
                                 eval_interval=10, eval_iters=2, weights=[2.0, 1.0, 1.5], rng=rng))
        specs = [("a", rng.integers(1, 30, size=20), np.uint16), ("b", rng.integers(1, 30, size=25), np.uint16)]
        outcomes.append(run_case(tmp, "blend-epochs", specs, "70,20,10", 8, 5, train_samples=400, gbs=4,
                                 eval_interval=25, eval_iters=3, weights=[0.5, 0.5], rng=rng))

        # The BS last-epoch assertion: one sequence of 58031 tokens stands for spec 4.3's valid split.
        outcomes.append(run_case(tmp, "assert", [("a", [58031], np.uint16)], "1,0,0", 512, 1234, train_samples=4080,
                                 gbs=1, eval_interval=10**6, eval_iters=0, rng=rng))
        check(outcomes[-1] == "assert: bs-fails", "the 58031-token case should hit the BS assertion")

        # A damaged existing file is reported, not used.
        prefix = os.path.join(tmp, "single-a")
        victim = glob.glob(prefix + "_train_indexmap_*_sample_idx.npy")[0]
        with open(victim, "r+b") as f:
            f.truncate(os.path.getsize(victim) - 4)
        r = run_tool(["--data-path", prefix, "--split", "949,50,1", "--seq-length", "64", "--train-samples", "300",
                      "--global-batch-size", "8", "--eval-interval", "20", "--eval-iters", "3"])
        check(r.returncode == 1 and os.path.basename(victim) in r.stderr and "truncated" in r.stderr,
              f"damaged file: {r.returncode} {r.stderr}")

    # The cases must have exercised every branch of _build_index_mappings, alone and blended.
    for blended in (False, True):
        for key in ((blended, False, False), (blended, True, False), (blended, True, True)):
            check(key in coverage, f"no case covered (blended, multi-epoch, separate last epoch) = {key}")
    print("outcomes:", ", ".join(outcomes))
    if failures:
        print(f"{len(failures)} of {checks} checks failed")
        return 1
    print(f"all {checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
