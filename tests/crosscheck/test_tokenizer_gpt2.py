"""Cross-check: mds-preprocess --vocab-file/--merge-file (Megatron's GPT2BPETokenizer) against two independent GPT-2
BPE implementations on a multi-script corpus (tests/crosscheck/corpus.py):
  * tiktoken, its "gpt2" encoding built offline from the local encoder.json (encode_ordinary: '<|endoftext|>' in
    the text is ordinary text, as in Megatron);
  * Hugging Face tokenizers (ByteLevelBPETokenizer from the same vocab/merges, no special tokens).
Also: empty documents are skipped, --append-eod appends 50256, dtype is uint16, --workers 1 and 2 give the same
bytes, and a .jsonl.zst (one frame, and several frames concatenated) gives the same bytes as the .jsonl.
Needs $MDS_BIN/mds-preprocess and $MDS_SOURCE_DIR/../shared/data/gpt2; exit 77 (skipped) without the GPT-2 files
or the Python packages.
"""
import filecmp
import json
import os
import shutil
import sys
import tempfile
import time
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus as C  # noqa: E402

try:
    import numpy  # noqa: F401
    import regex
    import tiktoken  # noqa: F401
    import tokenizers
except ImportError as e:  # pragma: no cover
    C.skip(f"missing Python package: {e}")


def compare(name, texts, seqs, reference, eod, decode, pieces):
    """Compares the sequences of an output with reference(text) (+eod) for the non-empty texts."""
    nonempty = [i for i, t in enumerate(texts) if reference[i]]
    if len(seqs) != len(nonempty):
        raise SystemExit(f"FAIL [{name}]: {len(seqs)} sequences, expected {len(nonempty)} (one per non-empty document; "
                         f"{len(texts) - len(nonempty)} empty documents must be skipped)")
    tokens = 0
    for k, i in enumerate(nonempty):
        want = reference[i] + ([eod] if eod is not None else [])
        if seqs[k] != want:
            raise SystemExit(f"FAIL [{name}]: ids differ\n" + C.describe_mismatch(
                i, texts[i], seqs[k], want, decode, ("mds", name.split()[0]), pieces))
        tokens += len(want)
    return len(nonempty), tokens


def main():
    exe, _, gpt2 = C.test_env()
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="mds-xcheck-gpt2-")
    try:
        records = C.generate(seed=20240601, target_bytes=4_000_000)
        texts = C.texts(records)
        src = os.path.join(tmp, "corpus.jsonl")
        C.write_jsonl(records, src, seed=20240601)
        n_empty = sum(1 for t in texts if not t)
        print(f"corpus: {len(records)} documents ({n_empty} empty), {os.path.getsize(src)} bytes of jsonl")

        # References.
        tk = C.tiktoken_gpt2(gpt2)
        ref_tk = [tk.encode_ordinary(t) for t in texts]
        hf = tokenizers.ByteLevelBPETokenizer(os.path.join(gpt2, "encoder.json"), os.path.join(gpt2, "vocab.bpe"),
                                              add_prefix_space=False)
        ref_hf = [e.ids for e in hf.encode_batch(texts)]
        assert all(not r for r, t in zip(ref_tk, texts) if not t)
        assert all(r for r, t in zip(ref_tk, texts) if t), "a non-empty text gave no tokens"
        ref_disagree = [i for i in range(len(texts)) if ref_tk[i] != ref_hf[i]]
        print(f"references: tiktoken and tokenizers disagree on {len(ref_disagree)} documents")

        def decode(ids):
            return tk.decode_bytes(ids).decode("utf-8", errors="replace")

        pat = regex.compile(C.GPT2_PATTERN)

        def pieces(s):
            return pat.findall(s)

        def prefix(p):
            return os.path.join(tmp, p)

        common = ["--vocab-file", os.path.join(gpt2, "encoder.json"), "--merge-file", os.path.join(gpt2, "vocab.bpe")]

        # 1. Plain run, no EOD.
        s = C.mds_preprocess(exe, ["--input", src, "--output-prefix", prefix("plain"), "--workers", 1] + common)
        out = C.read_indexed(prefix("plain_text_document"))
        assert out["code"] == 8 and out["dtype"].itemsize == 2, f"dtype code {out['code']}, expected 8 (uint16)"
        assert (out["doc_idx"] == list(range(len(out["seqs"]) + 1))).all(), "doc_idx is not 0..N"
        assert s["outputs"][0]["empty_documents"] == n_empty, s
        docs, toks = compare("tiktoken", texts, out["seqs"], ref_tk, None, decode, pieces)
        compare("tokenizers", texts, out["seqs"], ref_hf, None, decode, pieces)
        print(f"no EOD, --workers 1: {docs} documents, {toks} tokens equal to tiktoken and tokenizers; "
              f"{n_empty} empty documents skipped")

        # 2. --append-eod, workers 1 and 2.
        for w in (1, 2):
            C.mds_preprocess(exe, ["--input", src, "--output-prefix", prefix(f"eod{w}"), "--workers", w,
                                   "--append-eod"] + common)
        out = C.read_indexed(prefix("eod1_text_document"))
        assert out["code"] == 8
        docs, toks = compare("tiktoken +EOD", texts, out["seqs"], ref_tk, C.GPT2_EOD, decode, pieces)
        compare("tokenizers +EOD", texts, out["seqs"], ref_hf, C.GPT2_EOD, decode, pieces)
        for ext in (".bin", ".idx"):
            a, b = prefix("eod1_text_document" + ext), prefix("eod2_text_document" + ext)
            if not filecmp.cmp(a, b, shallow=False):
                raise SystemExit(f"FAIL: --workers 1 and --workers 2 outputs differ ({ext})")
        print(f"--append-eod: {docs} documents, {toks} tokens (EOD {C.GPT2_EOD} included) equal; "
              f"--workers 1 and 2 byte-identical")

        # 3. zstd input: one frame, and two frames concatenated.
        if shutil.which("zstd") is None:
            print("zstd CLI not found: .jsonl.zst not checked")
        else:
            zst = src + ".zst"
            C.run(["zstd", "-q", "-f", "-3", src, "-o", zst])
            with open(src, "rb") as f:
                lines = f.readlines()
            half = len(lines) // 2
            parts = [os.path.join(tmp, "a.jsonl"), os.path.join(tmp, "b.jsonl")]
            for p, chunk in zip(parts, (lines[:half], lines[half:])):
                with open(p, "wb") as f:
                    f.writelines(chunk)
                C.run(["zstd", "-q", "-f", "-19" if p.endswith("a.jsonl") else "-1", p, "-o", p + ".zst"])
            multi = os.path.join(tmp, "multi.jsonl.zst")
            with open(multi, "wb") as f:
                for p in parts:
                    with open(p + ".zst", "rb") as g:
                        f.write(g.read())
            for name, path in (("zst", zst), ("zstmulti", multi)):
                C.mds_preprocess(exe, ["--input", path, "--output-prefix", prefix(name), "--workers", 2,
                                       "--append-eod"] + common)
                for ext in (".bin", ".idx"):
                    if not filecmp.cmp(prefix("eod1_text_document" + ext), prefix(f"{name}_text_document{ext}"),
                                       shallow=False):
                        raise SystemExit(f"FAIL: output from {os.path.basename(path)} differs from the .jsonl one ({ext})")
            print(".jsonl.zst (one frame; two frames concatenated) with --workers 2: byte-identical to the .jsonl output")
        # 4. Every code point assigned in this Python's Unicode (14.0 for 3.11), one document each, in the
        #    contexts where the pre-tokenizer's classes matter (letter/number/other runs, after ' ', before and
        #    after whitespace, before a contraction): checks mds's Unicode tables against tiktoken's.
        cps = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
        cp_texts = [f"a{c}{c}b {c}1{c} {c}\u00a0{c}\n{c}'s" for c in cps]
        cp_src = os.path.join(tmp, "codepoints.jsonl")
        with open(cp_src, "w", encoding="utf-8") as f:
            for t in cp_texts:
                f.write(json.dumps({"text": t}) + "\n")
        C.mds_preprocess(exe, ["--input", cp_src, "--output-prefix", prefix("cp"), "--workers", 2] + common)
        cp_ref = [tk.encode_ordinary(t) for t in cp_texts]
        docs, toks = compare("tiktoken", cp_texts, C.read_indexed(prefix("cp_text_document"))["seqs"], cp_ref, None,
                             decode, pieces)
        print(f"every assigned code point of Unicode {unicodedata.unidata_version}: {docs} documents, {toks} tokens "
              "equal to tiktoken")
        print(f"PASS ({time.time() - t0:.1f} s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
