"""Cross-check: a tokenizer trained by mds-tokenizer-train, used by mds-preprocess, against the independent BPE
implementations loading the same files:
  * HF tokenizers ByteLevelBPETokenizer(vocab.json, merges.txt)  (GPT-2's algorithm, merges by pair rank)
  * tiktoken.Encoding built offline from vocab.json (GPT-2 pattern; mergeable_ranks = the byte strings of the
    tokens, whose ids are their ranks; tiktoken merges by the rank of the concatenation, not by pair)
  * HF tokenizers Tokenizer.from_file(tokenizer.json), against mds-preprocess --tokenizer-file
For every document the ids in the .bin written by mds-preprocess (GPT-2 files, --append-eod) equal each reference's
ids plus the EOD, and decoding gives the text back. Two corpora: the bundled data/sample/corpus.jsonl.zst (vocab
8192, the README's main job) and the multi-script corpus of tests/crosscheck/corpus.py (vocab 4000: byte-level
merges inside UTF-8 characters, emoji, every kind of whitespace). Training is also checked to give the same files
with 1 and 2 workers, and the vocabulary layout (byte symbols in GPT-2's order, special token last).
Exit 77 (skipped) without numpy, tokenizers or tiktoken.
"""
import filecmp
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus as C  # noqa: E402

try:
    import numpy  # noqa: F401
    import tiktoken
    from tokenizers import ByteLevelBPETokenizer, Tokenizer
except ImportError as e:  # pragma: no cover
    C.skip(f"missing Python package: {e}")


def train(exe, src, out_dir, vocab_size, workers):
    p = C.run([str(a) for a in (exe, "--input", src, "--vocab-size", vocab_size, "--output-dir", out_dir,
                                "--workers", workers, "--json", "--progress", "off")])
    return json.loads(p.stdout)


def tiktoken_from(vocab):
    dec = C.gpt2_byte_decoder()
    ranks = {bytes(dec[ch] for ch in tok): i for tok, i in vocab.items() if tok != "<|endoftext|>"}
    assert sorted(ranks.values()) == list(range(len(ranks))), "ids of the learned tokens are not 0..N-1"
    return tiktoken.Encoding(name="mds-trained", pat_str=C.GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})


def check_corpus(name, bin_dir, tmp, src, texts, vocab_size):
    out = os.path.join(tmp, name)
    s1 = train(os.path.join(bin_dir, "mds-tokenizer-train"), src, out, vocab_size, 2)
    out1 = os.path.join(tmp, name + "-w1")
    train(os.path.join(bin_dir, "mds-tokenizer-train"), src, out1, vocab_size, 1)
    for f in ("vocab.json", "merges.txt", "tokenizer.json"):
        assert filecmp.cmp(os.path.join(out, f), os.path.join(out1, f), shallow=False), f"{f} depends on --workers"

    vocab_path, merges_path = os.path.join(out, "vocab.json"), os.path.join(out, "merges.txt")
    with open(vocab_path, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(merges_path, encoding="utf-8") as f:
        merges = f.read()
    assert merges.startswith("#version: 0.2\n") and merges.endswith("\n")
    dec = C.gpt2_byte_decoder()
    by_id = sorted(vocab, key=vocab.get)
    assert [vocab[t] for t in by_id] == list(range(len(vocab))), "ids are not 0..N-1"
    assert [dec[t] for t in by_id[:256]] == list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100)) + sorted(set(range(256)) - set(range(0x21, 0x7F)) - set(range(0xA1, 0xAD)) -
                                          set(range(0xAE, 0x100))), "byte symbols not in GPT-2's bs order"
    assert by_id[-1] == "<|endoftext|>"
    assert len(vocab) == s1["vocab_size"] <= vocab_size
    assert len(merges.split("\n")) - 2 == s1["merges"]

    exe = os.path.join(bin_dir, "mds-preprocess")
    prefix = os.path.join(tmp, name + "-gpt2")
    C.mds_preprocess(exe, ["--input", src, "--output-prefix", prefix, "--vocab-file", vocab_path,
                           "--merge-file", merges_path, "--append-eod", "--workers", 2])
    got = C.read_indexed(prefix + "_text_document")["seqs"]
    prefix_hf = os.path.join(tmp, name + "-hf")
    C.mds_preprocess(exe, ["--input", src, "--output-prefix", prefix_hf, "--tokenizer-file",
                           os.path.join(out, "tokenizer.json"), "--workers", 2])
    got_hf = C.read_indexed(prefix_hf + "_text_document")["seqs"]

    eod = vocab["<|endoftext|>"]
    hf = ByteLevelBPETokenizer(vocab_path, merges_path)
    hf_json = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    tt = tiktoken_from(vocab)
    ref_hf = [e.ids for e in hf.encode_batch(texts)]
    ref_tt = tt.encode_ordinary_batch(texts)
    ref_json = [e.ids for e in hf_json.encode_batch(texts)]
    nonempty = [i for i, r in enumerate(ref_hf) if r]
    assert len(got) == len(nonempty), (len(got), len(nonempty))
    assert len(got_hf) == sum(1 for r in ref_json if r)

    def decode(ids):
        return hf.decode(ids)

    failures = []
    for k, i in enumerate(nonempty):
        want = ref_hf[i] + [eod]
        for label, ref in (("HF tokenizers", ref_hf[i]), ("tiktoken", ref_tt[i])):
            if got[k] != ref + [eod] and len(failures) < 5:
                failures.append(f"[{name} vs {label}] " + C.describe_mismatch(i, texts[i], got[k], ref + [eod],
                                                                               decode, ("mds", label)))
        if got[k] == want and hf.decode(got[k][:-1]) != texts[i] and len(failures) < 5:
            failures.append(f"[{name}] document {i} does not decode back to its text")
    for k, ids in enumerate(r for r in ref_json if r):
        if got_hf[k] != ids and len(failures) < 5:
            failures.append(f"[{name} vs tokenizer.json] document {k}: first ids {got_hf[k][:10]} vs {ids[:10]}")
    if failures:
        raise SystemExit("FAIL:\n" + "\n".join(failures))
    tokens = sum(len(g) for g in got)
    print(f"{name}: {len(got)} documents, {tokens} tokens, vocabulary {len(vocab)} ({s1['merges']} merges, "
          f"trained in {s1['train_seconds']:.2f} s): mds-preprocess == HF tokenizers == tiktoken; "
          f"tokenizer.json == HF tokenizers")


def main():
    src_dir = os.environ.get("MDS_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    bin_dir = os.environ.get("MDS_BIN") or os.path.join(src_dir, "build", "bin")
    for exe in ("mds-tokenizer-train", "mds-preprocess"):
        if not os.path.exists(os.path.join(bin_dir, exe)):
            raise SystemExit(f"FAIL: {exe} not found in {bin_dir} (set MDS_BIN)")
    sample = os.path.join(src_dir, "data", "sample", "corpus.jsonl.zst")
    sample_texts = [json.loads(line)["text"] for line in
                    subprocess.run(["zstd", "-dc", sample], check=True, stdout=subprocess.PIPE).stdout
                    .decode("utf-8").split("\n") if line]
    with tempfile.TemporaryDirectory(prefix="mds-xcheck-train-") as tmp:
        check_corpus("sample", bin_dir, tmp, sample, sample_texts, 8192)
        records = C.generate(seed=4242, target_bytes=1_500_000, dense=500)
        mixed = os.path.join(tmp, "mixed.jsonl")
        C.write_jsonl(records, mixed, seed=4242)
        check_corpus("multiscript", bin_dir, tmp, mixed, C.texts(records), 4000)
    print("OK")


if __name__ == "__main__":
    main()
