"""Cross-check: mds-preprocess outputs against megatron-core's own indexed dataset code
(megatron.core.datasets.indexed_dataset):
  1. IndexedDataset (megatron-core's reader) reads mds's .bin/.idx and gives the expected documents: sequence
     lengths, document indices, the tokens of every sequence (= tiktoken gpt2 ids + EOD), and slices with get().
  2. IndexedDatasetBuilder fed with tiktoken's ids (+EOD 50256, empty documents skipped as BS preprocess_data.py
     does, one add_item + end_document per document) writes files byte-identical to mds-preprocess's.
  3. Merge: the corpus split into 3 chunks (plus one chunk of only empty documents), each preprocessed, then
     `mds-preprocess --datasets A E B C --output-prefix M`: M is byte-identical to a single run over the whole corpus,
     and to megatron-core's IndexedDatasetBuilder.add_index over the same chunks.
Exit 77 (skipped) without megatron-core/torch/tiktoken or the GPT-2 files.
"""
import filecmp
import os
import shutil
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus as C  # noqa: E402

warnings.filterwarnings("ignore")
try:
    import numpy as np
    import tiktoken  # noqa: F401
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
except Exception as e:  # pragma: no cover - ImportError, or megatron-core failing to import
    C.skip(f"cannot import megatron-core / torch / tiktoken: {e!r}")


def same_files(a, b):
    return all(filecmp.cmp(a + ext, b + ext, shallow=False) for ext in (".bin", ".idx"))


def first_difference(a, b):
    for ext in (".bin", ".idx"):
        x, y = open(a + ext, "rb").read(), open(b + ext, "rb").read()
        if x != y:
            k = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            return f"{ext}: sizes {len(x)} vs {len(y)}, first differing byte at offset {k}"
    return "identical"


def build_with_megatron(prefix, docs):
    """megatron-core's builder, as BS tools/preprocess_data.py uses it (add_item + end_document per document)."""
    b = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for ids in docs:
        if not ids:
            continue
        b.add_item(torch.IntTensor(ids))
        b.end_document()
    b.finalize(prefix + ".idx")


def main():
    exe, _, gpt2 = C.test_env()
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="mds-xcheck-megatron-")
    try:
        seed = 777
        records = C.generate(seed=seed, target_bytes=3_000_000)
        texts = C.texts(records)
        src = os.path.join(tmp, "corpus.jsonl")
        C.write_jsonl(records, src, seed=seed)
        tk = C.tiktoken_gpt2(gpt2)
        docs = [tk.encode_ordinary(t) + [C.GPT2_EOD] if t else [] for t in texts]
        expected = [d for d in docs if d]
        common = ["--vocab-file", os.path.join(gpt2, "encoder.json"), "--merge-file", os.path.join(gpt2, "vocab.bpe"),
                  "--append-eod"]
        whole = os.path.join(tmp, "whole")
        C.mds_preprocess(exe, ["--input", src, "--output-prefix", whole, "--workers", 2] + common)
        whole += "_text_document"
        print(f"corpus: {len(records)} documents ({len(records) - len(expected)} empty), "
              f"{sum(map(len, expected))} tokens with EOD")

        # 1. megatron-core's reader on mds's output.
        ds = IndexedDataset(whole)
        n = len(expected)
        if len(ds) != n:
            raise SystemExit(f"FAIL: IndexedDataset has {len(ds)} sequences, expected {n}")
        lengths = np.array([len(d) for d in expected], dtype=np.int32)
        if not np.array_equal(ds.sequence_lengths, lengths):
            k = int(np.nonzero(ds.sequence_lengths != lengths)[0][0])
            raise SystemExit(f"FAIL: sequence_lengths[{k}] = {ds.sequence_lengths[k]}, expected {lengths[k]}")
        if not np.array_equal(ds.document_indices, np.arange(n + 1)):
            raise SystemExit(f"FAIL: document_indices {ds.document_indices[:10]}..., expected 0..{n}")
        if ds.index.dtype != np.uint16:
            raise SystemExit(f"FAIL: dtype {ds.index.dtype}, expected uint16")
        for i, want in enumerate(expected):
            got = ds[i]
            if got.dtype != np.uint16 or got.tolist() != want:
                raise SystemExit("FAIL: IndexedDataset[i] differs from tiktoken+EOD\n" + C.describe_mismatch(
                    i, "", got.tolist(), want, None, ("megatron", "tiktoken")))
        rng = np.random.default_rng(seed)
        for i in rng.integers(0, n, 500):
            size = len(expected[i])
            off = int(rng.integers(0, size))
            length = int(rng.integers(1, size - off + 1))
            if ds.get(int(i), offset=off, length=length).tolist() != expected[i][off:off + length]:
                raise SystemExit(f"FAIL: IndexedDataset.get({i}, offset={off}, length={length}) differs")
        del ds
        print(f"megatron-core IndexedDataset reads mds's output: {n} sequences, document_indices 0..{n}, "
              f"{int(lengths.sum())} tokens equal to tiktoken+EOD; 500 get() slices equal")

        # 2. megatron-core's builder writes the same bytes.
        meg = os.path.join(tmp, "megatron_whole")
        build_with_megatron(meg, docs)
        if not same_files(whole, meg):
            raise SystemExit("FAIL: megatron-core IndexedDatasetBuilder output differs from mds-preprocess's: "
                             + first_difference(whole, meg))
        print("megatron-core IndexedDatasetBuilder (tiktoken ids + EOD, empty documents skipped) "
              "== mds-preprocess, byte for byte")

        # 3. Merge of chunk outputs.
        cuts = [0, len(records) // 5, len(records) * 3 // 5, len(records)]
        chunks = [records[cuts[i]:cuts[i + 1]] for i in range(3)]
        empty_chunk = [{"id": -1, "text": ""}, {"id": -2, "text": ""}]
        prefixes = []
        for name, recs in (("A", chunks[0]), ("E", empty_chunk), ("B", chunks[1]), ("C", chunks[2])):
            path = os.path.join(tmp, f"chunk{name}.jsonl")
            C.write_jsonl(recs, path, seed=seed + ord(name))
            C.mds_preprocess(exe, ["--input", path, "--output-prefix", os.path.join(tmp, name), "--workers", 1] + common)
            prefixes.append(os.path.join(tmp, name + "_text_document"))
        assert os.path.getsize(prefixes[1] + ".bin") == 0 and os.path.getsize(prefixes[1] + ".idx") == 42
        merged = os.path.join(tmp, "M")
        C.run([exe, "--quiet", "--datasets"] + prefixes + ["--output-prefix", merged])
        if not same_files(merged, whole):
            raise SystemExit("FAIL: mds-preprocess --datasets (merge of 3 chunks + an empty one) differs from the "
                             "single run: " + first_difference(merged, whole))
        meg_merged = os.path.join(tmp, "megatron_merged")
        b = IndexedDatasetBuilder(meg_merged + ".bin", dtype=np.uint16)
        for p in prefixes:
            b.add_index(p)
        b.finalize(meg_merged + ".idx")
        if not same_files(meg_merged, merged):
            raise SystemExit("FAIL: megatron-core add_index merge differs from mds-preprocess --datasets: "
                             + first_difference(meg_merged, merged))
        print(f"merge: chunks of {[len(c) for c in chunks]} documents + one of 2 empty documents: "
              "mds --datasets == single run == megatron-core add_index, byte for byte")
        print(f"PASS ({time.time() - t0:.1f} s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
