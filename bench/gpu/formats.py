"""The input files bench/gpu writes for each implementation, in each one's own format, from the same random
tokens (numpy only, no torch):
  - Megatron's indexed dataset (.bin/.idx, MMIDIDX version 1, uint16 tokens) for mds-train, with a GPT-2 style
    vocab.json / merges.txt of the same vocabulary size (mds-train sizes its embedding from the tokenizer);
  - llm.c's token files (llmc/dataloader.h: a header of 256 int32 — magic 20240520, version 1, token count —
    then the tokens as uint16);
  - llm.c's fp32 model file for its CPU trainer (train_gpt2.c gpt2_build_from_checkpoint: 256 int32 — magic
    20240326, version 3, max_seq_len, vocab_size, num_layers, num_heads, channels, padded_vocab_size — then every
    parameter tensor in fill_in_parameter_sizes order), initialized as GPT-2 (normal 0.02, residual projections
    0.02/sqrt(2L), LayerNorm weights 1, biases 0)."""
import json
import os
import struct

import numpy as np


def random_tokens(count, vocab, seed):
    return np.random.default_rng(seed).integers(0, vocab, size=count, dtype=np.int64).astype(np.uint16)


def write_megatron_dataset(prefix, tokens, doc_len=4096):
    """One document per doc_len tokens (the last one shorter), as tools/preprocess_data.py would lay them out."""
    sizes = np.array([min(doc_len, len(tokens) - i) for i in range(0, len(tokens), doc_len)], dtype="<i4")
    pointers = np.concatenate([[0], np.cumsum(sizes.astype(np.int64))[:-1] * 2]).astype("<i8")
    doc_idx = np.arange(len(sizes) + 1, dtype="<i8")
    with open(prefix + ".bin", "wb") as f:
        f.write(tokens.astype("<u2").tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(sizes), len(sizes) + 1))
        f.write(sizes.tobytes() + pointers.tobytes() + doc_idx.tobytes())


def _byte_symbols():
    """GPT-2's printable stand-ins for the 256 bytes (openai/gpt-2 encoder.py bytes_to_unicode)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def write_gpt2_tokenizer(folder, vocab_size):
    """vocab.json with exactly vocab_size entries (the 256 byte symbols, filler tokens, <|endoftext|> last) and a
    merges.txt with one merge. Only its size matters: the data is already token ids."""
    if vocab_size < 258:
        raise ValueError("a GPT-2 style vocabulary needs at least 258 entries")
    symbols = _byte_symbols()
    vocab = {s: i for i, s in enumerate(symbols)}
    vocab["Ġt"] = 256
    for i in range(257, vocab_size - 1):
        vocab[f"tok{i}"] = i
    vocab["<|endoftext|>"] = vocab_size - 1
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\nĠ t\n")
    return os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")


def write_llmc_tokens(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(header.tobytes() + tokens.astype("<u2").tobytes())


def write_llmc_model(path, layers, channels, heads, max_seq, vocab, padded_vocab, seed):
    L, C, Vp, T = layers, channels, padded_vocab, max_seq
    rng = np.random.default_rng(seed)
    proj_std = 0.02 / np.sqrt(2 * L)

    def normal(n, std):
        return rng.normal(0.0, std, n).astype("<f4")

    wte = np.zeros((Vp, C), dtype="<f4")
    wte[:vocab] = normal(vocab * C, 0.02).reshape(vocab, C)
    tensors = [wte.ravel(), normal(T * C, 0.02),                               # wte, wpe
               np.ones(L * C, "<f4"), np.zeros(L * C, "<f4"),                 # ln1w, ln1b
               normal(L * 3 * C * C, 0.02), np.zeros(L * 3 * C, "<f4"),       # qkvw, qkvb
               normal(L * C * C, proj_std), np.zeros(L * C, "<f4"),           # attprojw, attprojb
               np.ones(L * C, "<f4"), np.zeros(L * C, "<f4"),                 # ln2w, ln2b
               normal(L * 4 * C * C, 0.02), np.zeros(L * 4 * C, "<f4"),       # fcw, fcb
               normal(L * C * 4 * C, proj_std), np.zeros(L * C, "<f4"),       # fcprojw, fcprojb
               np.ones(C, "<f4"), np.zeros(C, "<f4")]                         # lnfw, lnfb
    header = np.zeros(256, dtype="<i4")
    header[:8] = [20240326, 3, T, vocab, L, heads, C, Vp]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for t in tensors:
            f.write(t.tobytes())
    return sum(t.size for t in tensors)
