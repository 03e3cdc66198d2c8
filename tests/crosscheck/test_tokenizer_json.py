"""Cross-check: mds-preprocess --tokenizer-file (Hugging Face tokenizer.json, BS's PretrainedFromHF) against the
Hugging Face `tokenizers` library itself: for every document of the corpus (tests/crosscheck/corpus.py) the ids
written by mds equal Tokenizer.from_file(tokenizer.json).encode(text).ids. tokenizer.json files built here:
  gpt2          BPE from the local GPT-2 vocab/merges, ByteLevel(add_prefix_space=False) pre-tokenizer, decoder and
                post-processor ByteLevel, '<|endoftext|>' an added special token (so in text it becomes 50256)
  gpt2-prefix   the same with ByteLevel(add_prefix_space=True)
  gpt2-noregex  the same with ByteLevel(use_regex=False): no split, each text (between added tokens) is one piece
  bloom         a BLOOM-style byte-level BPE trained here with tokenizers' BpeTrainer (vocab 2000) on part of the
                corpus: Sequence[Split(BLOOM's regex, isolated), ByteLevel(add_prefix_space=False, use_regex=False)],
                decoder ByteLevel, special tokens <unk> <s> </s> <pad>; merges saved as ["a", "b"] pairs
  bloom-legacy  the same file with merges as "a b" strings (the format of BLOOM's own tokenizer.json)
With --append-eod the EOD is 50256 for gpt2* and the id of "</s>" for bloom*.
Exit 77 (skipped) without `tokenizers` or the GPT-2 files.
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
    import tokenizers
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
except ImportError as e:  # pragma: no cover
    C.skip(f"missing Python package: {e}")

BLOOM_PATTERN = " ?[^(\\s|[.,!?…。，、।۔،])]+"  # as mds expects it (libcore/src/tokenizer/tokenizer.cpp)


def gpt2_json(gpt2, path, add_prefix_space=False, use_regex=True):
    t = Tokenizer(models.BPE.from_file(os.path.join(gpt2, "encoder.json"), os.path.join(gpt2, "vocab.bpe")))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=use_regex)
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    t.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    t.save(path)
    assert t.token_to_id("<|endoftext|>") == C.GPT2_EOD


def bloom_json(path, train_texts):
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(BLOOM_PATTERN), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    t.train_from_iterator(train_texts, trainer)
    t.save(path)
    return t


def check(name, exe, tmp, src, texts, tok_path, eod_token, extra_args=()):
    """Runs mds-preprocess --tokenizer-file with and without --append-eod; compares with tokenizers."""
    hf = Tokenizer.from_file(tok_path)
    ref = [e.ids for e in hf.encode_batch(texts)]
    eod = hf.token_to_id(eod_token)
    assert eod is not None
    nonempty = [i for i, r in enumerate(ref) if r]
    assert len(nonempty) == sum(1 for t in texts if t)

    def decode(ids):
        return hf.decode(ids, skip_special_tokens=False)

    def pieces(s):
        return [p for p, _ in hf.pre_tokenizer.pre_tokenize_str(s)]

    results = {}
    for append in (False, True):
        prefix = os.path.join(tmp, f"{name}{'_eod' if append else ''}")
        summary = C.mds_preprocess(exe, ["--input", src, "--output-prefix", prefix, "--tokenizer-file", tok_path,
                                         "--workers", 2] + (["--append-eod"] if append else []) + list(extra_args))
        out = C.read_indexed(prefix + "_text_document")
        if out["code"] != 8:
            raise SystemExit(f"FAIL [{name}]: dtype code {out['code']}, expected 8 (uint16; vocabulary "
                             f"{hf.get_vocab_size(with_added_tokens=True)})")
        seqs = out["seqs"]
        if len(seqs) != len(nonempty):
            raise SystemExit(f"FAIL [{name}]: {len(seqs)} sequences, expected {len(nonempty)} non-empty documents")
        tokens = 0
        for k, i in enumerate(nonempty):
            want = ref[i] + ([eod] if append else [])
            if seqs[k] != want:
                raise SystemExit(f"FAIL [{name}{' --append-eod' if append else ''}]: ids differ from tokenizers\n"
                                 + C.describe_mismatch(i, texts[i], seqs[k], want, decode, ("mds", "tokenizers"),
                                                       pieces))
            tokens += len(want)
        results[append] = (prefix, summary, tokens)
    n_special = sum(1 for i in nonempty for t in ref[i] if hf.id_to_token(t) in
                    {a.content for a in hf.get_added_tokens_decoder().values()})
    print(f"[{name}] {len(nonempty)} documents, {results[False][2]} tokens ({n_special} of them added special tokens "
          f"matched in the text) == tokenizers; with --append-eod {results[True][2]} tokens, EOD "
          f"{eod_token!r} = {eod}")
    return results


def main():
    exe, _, gpt2 = C.test_env()
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="mds-xcheck-tokjson-")
    try:
        seed = 4242
        records = C.generate(seed=seed, target_bytes=2_000_000)
        texts = C.texts(records)
        src = os.path.join(tmp, "corpus.jsonl")
        C.write_jsonl(records, src, seed=seed)
        print(f"corpus: {len(records)} documents ({sum(1 for t in texts if not t)} empty), tokenizers "
              f"{tokenizers.__version__}")

        # (a) GPT-2 variants.
        for name, kw in (("gpt2", {}), ("gpt2-prefix", {"add_prefix_space": True}),
                         ("gpt2-noregex", {"use_regex": False})):
            path = os.path.join(tmp, f"{name}.json")
            gpt2_json(gpt2, path, **kw)
            check(name, exe, tmp, src, texts, path, "<|endoftext|>")

        # (b) BLOOM-style.
        path = os.path.join(tmp, "bloom.json")
        bloom_json(path, texts[: len(texts) // 3])
        with open(path, encoding="utf-8") as f:
            tj = json.load(f)
        split = tj["pre_tokenizer"]["pretokenizers"][0]
        serialized = split["pattern"]["Regex"]
        print(f"bloom tokenizer.json: {len(tj['model']['vocab'])} tokens, {len(tj['model']['merges'])} merges; "
              f"Split pattern serialized as {json.dumps(serialized, ensure_ascii=False)} (mds expects "
              f"{json.dumps(BLOOM_PATTERN, ensure_ascii=False)}: {'same' if serialized == BLOOM_PATTERN else 'DIFFERENT'})")
        if serialized != BLOOM_PATTERN:
            raise SystemExit("FAIL: tokenizers serialized BLOOM's Split pattern differently from what mds expects")
        res = check("bloom", exe, tmp, src, texts, path, "</s>", ["--tokenizer-type", "PretrainedFromHF"])
        # --eod-token </s> given explicitly gives the same bytes as the default.
        explicit = os.path.join(tmp, "bloom_explicit")
        C.mds_preprocess(exe, ["--input", src, "--output-prefix", explicit, "--tokenizer-file", path,
                               "--append-eod", "--eod-token", "</s>"])
        for ext in (".bin", ".idx"):
            if not filecmp.cmp(explicit + "_text_document" + ext, res[True][0] + "_text_document" + ext,
                               shallow=False):
                raise SystemExit(f"FAIL [bloom]: --eod-token </s> output differs from the default EOD output ({ext})")

        # Every assigned code point (one document each) in the contexts where BLOOM's Split classes matter:
        # inside a match, after ' ', next to excluded punctuation and whitespace.
        cps = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
        cp_texts = [f"x{c} {c}.{c}\u3000{c}" for c in cps]
        cp_src = os.path.join(tmp, "codepoints.jsonl")
        with open(cp_src, "w", encoding="utf-8") as f:
            for t in cp_texts:
                f.write(json.dumps({"text": t}) + "\n")
        cp_prefix = os.path.join(tmp, "bloom_cp")
        C.mds_preprocess(exe, ["--input", cp_src, "--output-prefix", cp_prefix, "--tokenizer-file", path,
                               "--workers", 2])
        hf = Tokenizer.from_file(path)
        cp_ref = [e.ids for e in hf.encode_batch(cp_texts)]
        seqs = C.read_indexed(cp_prefix + "_text_document")["seqs"]
        assert len(seqs) == len(cp_ref)
        for i, (got, want) in enumerate(zip(seqs, cp_ref)):
            if got != want:
                raise SystemExit("FAIL [bloom, per code point]: ids differ from tokenizers\n" + C.describe_mismatch(
                    i, cp_texts[i], got, want, lambda ids: hf.decode(ids), ("mds", "tokenizers"),
                    lambda s: [p for p, _ in hf.pre_tokenizer.pre_tokenize_str(s)]))
        print(f"[bloom] every assigned code point of Unicode {unicodedata.unidata_version}: {len(cp_texts)} documents, "
              f"{sum(map(len, cp_ref))} tokens == tokenizers")

        # (b') the same with merges written as "a b" strings.
        tj["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in tj["model"]["merges"]]
        legacy = os.path.join(tmp, "bloom-legacy.json")
        with open(legacy, "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False)
        res2 = check("bloom-legacy", exe, tmp, src, texts, legacy, "</s>")
        for append in (False, True):
            for ext in (".bin", ".idx"):
                if not filecmp.cmp(res[append][0] + "_text_document" + ext, res2[append][0] + "_text_document" + ext,
                                   shallow=False):
                    raise SystemExit(f"FAIL: bloom and bloom-legacy outputs differ ({ext})")
        print(f"PASS ({time.time() - t0:.1f} s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
