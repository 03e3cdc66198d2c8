#!/usr/bin/env python3
"""Writes the hand-made seed inputs of tests/fuzz/corpus/<target>/ (python3 tests/fuzz/make_seeds.py).

Files named regress_* are inputs that once found a bug; they are kept by hand, not written here.
"""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def w(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


# fuzz_json_line: one line each.
J = "fuzz_json_line"
w(J, "valid", '{"text": "Hello world", "id": "doc-1"}')
w(J, "unicode_escapes", '{"id":"x\\u00e9","text":"caf\\u00e9 \\ud83d\\ude00 \\/ \\"q\\" \\\\ \\n\\t"}')
w(J, "utf8_raw", '{"text": "\u00e9t\u00e9 \u4e2d\u6587 \U0001F600", "id": "7"}')
w(J, "nested_extra", '{"meta": {"a": [1, 2.5e-3, -0, null, true, false, NaN, -Infinity, {"b": []}]}, "text": "t", "id": "i"}')
w(J, "duplicate_keys", '{"text": "first", "id": "a", "text": "second"}')
w(J, "duplicate_key_number_then_string", '{"text": 1, "text": "a", "id": "b"}')
w(J, "duplicate_key_surrogate_then_string", '{"text": "\\ud800", "text": "a", "id": "b"}')
w(J, "lone_surrogate", '{"text": "bad \\ud800 here", "id": "s"}')
w(J, "wrong_type", '{"text": 42, "id": "n"}')
w(J, "missing_key", '{"text": "no id"}')
w(J, "not_object", '[{"text": "x", "id": "y"}]')
w(J, "trailing", '{"text": "x", "id": "y"} extra')
w(J, "nul_after_object", b'{"text": "x", "id": "y"}\x00"tail"')
w(J, "empty", "")
w(J, "control_char", '{"text": "tab\there", "id": "c"}')

# fuzz_line_reader: byte 0 = control (bits 0-4 batch size - 1, bits 5-6 case, bit 7 truncate).
L = "fuzz_line_reader"
w(L, "lf", b'\x03{"text": "a"}\n{"text": "b"}\n')
w(L, "crlf", b"\x25line one\r\nline two\r\n\r\nlast without newline")
w(L, "lone_cr", b"\x41a\rb\r\rc\n\r\n\n")
w(L, "empty", b"\x00")
w(L, "long_line", b"\x9f" + b"x" * 300 + b"\n" + b"y" * 5)
w(L, "zstd_magic", b"\x07\x28\xb5\x2f\xfd" + b"\x00" * 8)
w(L, "zstd_two_frames", b'\x2a{"text": "zstd"}\r{"text": "cr"}\n')
w(L, "zstd_truncated", b'\xc5{"text": "one"}\n{"text": "two"}\r\n{"text": "three"}')
w(L, "after_magic_garbage", b"\x63\x24\x00\x00\x08\x00\x00\x00")

# fuzz_tokenizer: text.
T = "fuzz_tokenizer"
w(T, "english", "Hello world! It's a test, isn't it? We'll see 123 times.")
w(T, "spaces", "  leading and   multiple spaces\n\n\ttabs\r\n trailing   ")
w(T, "unicode", "caf\u00e9 na\u00efve \u4e2d\u6587\u6d4b\u8bd5 \U0001F600\U0001F44D \u0661\u0662 \u2026\u3002\uff0c")
w(T, "contractions", "'s 't 're 've 'm 'll 'd 'S 'x ''")
w(T, "invalid_utf8", b"ok \xff\xfe bad \xc3 truncated \xe2\x82 and \xf0\x9f\x98")
w(T, "special", "<|endoftext|> text <|endoftext|>")


# fuzz_idx: Megatron mmap index images (specs/data.md section 1).
def idx(code, sizes, doc_idx, item, modes=False):
    n, d = len(sizes), len(doc_idx)
    out = b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code) + struct.pack("<QQ", n, d)
    out += struct.pack("<%di" % n, *sizes)
    ptrs, p = [], 0
    for s in sizes:
        ptrs.append(p)
        p += s * item
    out += struct.pack("<%dq" % n, *ptrs)
    out += struct.pack("<%dq" % d, *doc_idx)
    if modes:
        out += bytes(n)
    return out


I = "fuzz_idx"
w(I, "uint16_3docs", idx(8, [3, 1, 4], [0, 1, 2, 3], 2))
w(I, "int32_2docs", idx(4, [2, 0, 5], [0, 2, 3], 4))
w(I, "empty", idx(8, [], [0], 2))
w(I, "uint8_modes", idx(1, [1, 2], [0, 2], 1, modes=True))
w(I, "int64", idx(5, [1], [0, 1], 8))
w(I, "tntidx", b"TNTIDX\x00\x00" + bytes(30))
w(I, "truncated", idx(8, [3, 1, 4], [0, 1, 2, 3], 2)[:50])


# fuzz_tokenizer_json: small byte-level BPE tokenizer.json files.
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


b2u = bytes_to_unicode()
vocab = {b2u[b]: b for b in range(256)}
merges = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("o", "r"), ("\u0120w", "or")]
for a, b in merges:
    vocab.setdefault(a + b, len(vocab))
vocab.setdefault("\u0120w", len(vocab))


def tokenizer_json(pre, merges_fmt="str", added=True, extra_model=None):
    m = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
         "merges": [a + " " + b for a, b in merges] if merges_fmt == "str" else [[a, b] for a, b in merges]}
    m.update(extra_model or {})
    j = {"version": "1.0", "truncation": None, "padding": None,
         "added_tokens": [{"id": len(vocab), "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                           "rstrip": False, "normalized": False, "special": True}] if added else [],
         "normalizer": None, "pre_tokenizer": pre,
         "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
         "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
         "model": m}
    return json.dumps(j, ensure_ascii=False, separators=(",", ":"))


bytelevel = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
bloom = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": " ?[^(\\s|[.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c])]+"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
TJ = "fuzz_tokenizer_json"
w(TJ, "gpt2_style", tokenizer_json(bytelevel))
w(TJ, "bloom_style", tokenizer_json(bloom, merges_fmt="pairs"))
w(TJ, "prefix_space_ignore_merges", tokenizer_json(dict(bytelevel, add_prefix_space=True), added=False,
                                                   extra_model={"ignore_merges": True, "unk_token": "!"}))
w(TJ, "no_regex", tokenizer_json(dict(bytelevel, use_regex=False)))
w(TJ, "wordpiece", json.dumps({"model": {"type": "WordPiece", "vocab": {"a": 0}}}))
w(TJ, "minimal_no_byte_symbols", '{"model":{"type":"BPE","vocab":{},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"},"added_tokens":[]}')
w(TJ, "not_json", "not json {")


# fuzz_zip: zip files as torch.save and other writers make them (built with zipfile, no torch needed;
# seed_torch_* and seed_mds_* were written by torch.save and tests/tools/zip_probe).
def zip_seed(records, comment=b"", compression=0, pad_fb=False):
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as z:
        for name, data in records:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = compression
            if pad_fb:
                info.extra = b"FB" + struct.pack("<H", 7) + b"Z" * 7
            z.writestr(info, data)
        z.comment = comment
    return buf.getvalue()


Z = "fuzz_zip"
w(Z, "stored_torch_like", zip_seed([("archive/data.pkl", b"\x80\x02}q\x00."), ("archive/data/0", bytes(range(16))),
                                    ("archive/version", b"3\n"), ("archive/byteorder", b"little")], pad_fb=True))
w(Z, "deflated_with_comment", zip_seed([("a/x", b"hello hello hello hello"), ("a/y", b"")], comment=b"PK\x05\x06 comment",
                                       compression=8))
w(Z, "no_folder", zip_seed([("one", b"1"), ("two", b"22")]))
w(Z, "empty_zip", zip_seed([]))

L = "fuzz_launch"  # first byte: 0 host list, 1 tasks per node, 2 environment (NUL-separated NAME=VALUE)
w(L, "hostlist_jz", b"\x00jz[001-003,007],r2i1n[4-5]")
w(L, "hostlist_groups", b"\x00a[1-2]b[3-4],c[08-11],d")
w(L, "tasks_repeat", b"\x014(x2),2")
w(L, "tasks_one", b"\x018")
w(L, "env_torchrun", b"\x02" + b"\0".join([b"RANK=1", b"WORLD_SIZE=4", b"LOCAL_RANK=1", b"LOCAL_WORLD_SIZE=2",
                                          b"MASTER_ADDR=node1", b"MASTER_PORT=29500"]))
w(L, "env_srun", b"\x02" + b"\0".join([b"SLURM_PROCID=5", b"SLURM_STEP_NUM_TASKS=8", b"SLURM_LOCALID=1", b"SLURM_NODEID=2",
                                      b"SLURM_STEP_TASKS_PER_NODE=2(x4)", b"SLURM_STEP_NODELIST=jz[001-004]"]))
w(L, "env_ompi", b"\x02" + b"\0".join([b"OMPI_COMM_WORLD_RANK=3", b"OMPI_COMM_WORLD_SIZE=4", b"OMPI_COMM_WORLD_LOCAL_RANK=1",
                                      b"OMPI_COMM_WORLD_LOCAL_SIZE=2", b"MASTER_ADDR=h"]))
w(L, "env_pmi", b"\x02" + b"\0".join([b"PMI_RANK=0", b"PMI_SIZE=2", b"MPI_LOCALRANKID=0", b"MPI_LOCALNRANKS=2",
                                     b"MASTER_ADDR=h"]))

# fuzz_train_flags: byte 0 even = a DeepSpeed config, odd = a command line, one argument per line; byte 1 = world size - 1.
T = "fuzz_train_flags"
w(T, "ds_bf16_zero1", b"\x00\x07" + json.dumps({
    "train_micro_batch_size_per_gpu": 1, "train_batch_size": 16, "gradient_clipping": 1.0,
    "zero_optimization": {"stage": 1, "reduce_bucket_size": 5e8},
    "bf16": {"enabled": True}, "steps_per_print": 2000, "wall_clock_breakdown": False}).encode())
w(T, "ds_fp16_curriculum", b"\x00\x00" + json.dumps({
    "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
    "fp16": {"enabled": True, "loss_scale": 0, "loss_scale_window": 500, "hysteresis": 2, "min_loss_scale": 1,
             "initial_scale_power": 12},
    "curriculum_learning": {"enabled": True, "curriculum_type": "seqlen", "min_difficulty": 64, "max_difficulty": 128,
                            "schedule_type": "fixed_linear",
                            "schedule_config": {"total_curriculum_step": 100, "difficulty_step": 8}}}).encode())
w(T, "argv_gpt_small", b"\x01\x03" + b"\n".join([
    b"--num-layers", b"4", b"--hidden-size", b"256", b"--num-attention-heads", b"8", b"--seq-length", b"512",
    b"--max-position-embeddings", b"512", b"--micro-batch-size", b"2", b"--global-batch-size", b"16",
    b"--rampup-batch-size", b"4", b"4", b"1_000", b"--lr", b"6e-4", b"--train-samples", b"5_000_000",
    b"--tensor-model-parallel-size", b"2", b"--pipeline-model-parallel-size", b"2", b"--bf16",
    b"--position-embedding-type", b"alibi", b"--embed-layernorm", b"--lr-decay-style", b"cosine",
    b"--lr-warmup-samples", b"1000", b"--clip-grad", b"1.0"]))
w(T, "argv_ffn_kv", b"\x01\x00" + b"\n".join([
    b"--num-layers", b"2", b"--hidden-size", b"64", b"--num-attention-heads", b"4", b"--seq-length", b"128",
    b"--ffn-hidden-size", b"100", b"--kv-channels", b"32", b"--train-iters", b"10", b"--lr", b"1e-3",
    b"--distributed-timeout-minutes", b"0.5", b"--fp16", b"--loss-scale", b"12"]))
