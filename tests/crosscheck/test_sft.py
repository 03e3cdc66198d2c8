"""Cross-check: supervised fine-tuning (mds-train --sft) against Hugging Face transformers, token by token.

1. The model on packed rows (bin/model_probe): rows packed from examples of random lengths, with their segment ids
   (attention within each example), position ids restarting at each example and the loss mask (labels in the same
   example; with --loss-on-targets-only answers only). mds's logits at every real position equal transformers'
   logits of the same example run ALONE (GPT2LMHeadModel, absolute positions from 0; BloomForCausalLM, ALiBi), and
   the loss and every parameter gradient equal those of the per-example reference (mean over the counted tokens).
   A control: the same rows without segment ids give other logits (the test can tell).
2. The whole path: a question / answer jsonl -> mds-preprocess --sft -> a random GPT2LMHeadModel saved by
   transformers -> mds-hf-to-ckpt -> mds-train --load --finetune --sft --loss-on-targets-only, with the batches
   dumped (MDS_DUMP_BATCHES): every dumped row holds whole examples of the pair files (prompt then answer, in
   segments 1, 2, ..., padding after), its position ids and loss mask are those the rule above gives, iteration
   1's lm loss (before any update) equals transformers' loss on the dumped rows' examples, and the loss on answers
   falls (training and validation). The same run on two pipeline stages (processes over Gloo) prints the same
   losses. Then mds-ckpt-to-hf exports the fine-tuned model and transformers itself finds the answers' loss
   fallen.
Exits 77 without torch / transformers or the binaries.
"""
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile

try:
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
except Exception as e:  # noqa: BLE001
    print(f"SKIP: torch / transformers / safetensors not importable: {e}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import corpus  # noqa: E402
from testkit import check, finish, free_port, skip  # noqa: E402

transformers.logging.set_verbosity_error()
BIN = os.environ.get("MDS_BIN", "build/bin")
SRC = os.environ.get("MDS_SOURCE_DIR", os.path.join(HERE, "..", ".."))
PROBE = os.path.join(BIN, "model_probe")
for tool in ("model_probe", "mds-train", "mds-preprocess", "mds-tokenizer-train", "mds-hf-to-ckpt", "mds-ckpt-to-hf"):
    if not os.path.exists(os.path.join(BIN, tool)):
        skip(f"{tool} not built in {BIN}")


def close(what, ours, ref, rtol):
    ours, ref = ours.double(), ref.double()
    if not check(ours.shape == ref.shape, f"{what}: shape {tuple(ours.shape)} != {tuple(ref.shape)}"):
        return
    scale = ref.abs().max().item()
    err = (ours - ref).abs().max().item()
    check(err <= rtol * scale + 1e-7, f"{what}: max |mds - hf| = {err:.3e} for max |hf| = {scale:.3e}")


# ---- packing rule (what mds-train --sft feeds the model), written from the definition ----

def pack(examples, seq, pad):
    """Greedy rows of seq + 1 tokens from (prompt, answer) lists, in order: tokens, segment ids, is_input."""
    rows, cur = [], None
    for prompt, answer in examples:
        n = len(prompt) + len(answer)
        assert n <= seq + 1
        if cur is None or len(cur[0]) + n > seq + 1:
            cur = ([], [], [])
            rows.append(cur)
        k = (cur[1][-1] if cur[1] else 0) + 1
        cur[0].extend(prompt + answer)
        cur[1].extend([k] * n)
        cur[2].extend([1] * len(prompt) + [0] * len(answer))
    for t, s, i in rows:
        fill = seq + 1 - len(t)
        t.extend([pad] * fill)
        s.extend([0] * fill)
        i.extend([0] * fill)
    return rows


def model_inputs(rows, seq, targets_only):
    """tokens, labels, position ids, segment ids [b, seq] and the loss mask, by the rule of docs/finetuning.md."""
    tok, lab, pos, seg, mask = [], [], [], [], []
    for t, s, i in rows:
        start = 0
        p, m = [], []
        for k in range(seq):
            if k > 0 and s[k] != s[k - 1]:
                start = k
            p.append(k - start)
            counts = s[k + 1] != 0 and s[k + 1] == s[k] and (not targets_only or i[k + 1] == 0)
            m.append(1.0 if counts else 0.0)
        tok.append(t[:seq])
        lab.append(t[1:seq + 1])
        pos.append(p)
        seg.append(s[:seq])
        mask.append(m)
    as_long = lambda x: torch.tensor(x, dtype=torch.long)  # noqa: E731
    return as_long(tok), as_long(lab), as_long(pos), as_long(seg), torch.tensor(mask)


def reference(model, rows, seq, targets_only, padded_vocab=None):
    """transformers on each packed example ALONE: the logits at every real position of the rows, the mean loss over
    the counted positions, and its gradients. padded_vocab: Megatron's padded vocabulary, whose extra rows (zeros
    from mds-hf-to-ckpt) add logits of 0 to the softmax."""
    model.zero_grad()
    logits = {}
    total, count = 0.0, 0
    for r, (t, s, i) in enumerate(rows):
        k = 0
        while k < seq and s[k] != 0:
            e = k
            while e < seq + 1 and s[e] == s[k]:
                e += 1
            ids = torch.tensor([t[k:e]])
            out = model(input_ids=ids).logits[0].float()  # [e - k, V]
            if padded_vocab and padded_vocab > out.shape[1]:
                out = torch.cat([out, out.new_zeros(out.shape[0], padded_vocab - out.shape[1])], 1)
            for j in range(e - k):
                if k + j < seq:
                    logits[(r, k + j)] = out[j]
            for j in range(e - k - 1):  # position k + j predicts t[k + j + 1], in the same example
                if k + j < seq and (not targets_only or i[k + j + 1] == 0):
                    total = total + torch.nn.functional.cross_entropy(out[j:j + 1], torch.tensor([t[k + j + 1]]), reduction="sum")
                    count += 1
            k = e
    loss = total / count
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return logits, loss.detach(), grads


def run_probe(tmp, weights, inputs, flags, tag):
    w, i, o = (os.path.join(tmp, f"{tag}-{x}.safetensors") for x in ("w", "in", "out"))
    save_file(weights, w)
    save_file(inputs, i)
    r = subprocess.run([PROBE, "--weights", w, "--inputs", i, "--out", o] + flags, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: model_probe: {r.stderr}")
    return load_file(o)


def model_case(tmp, kind, seed, targets_only):
    import test_model_hf as hf  # its weight mappings (HF names and layouts -> Megatron's)
    L, h, n, V, seq = 2, 48, 4, 200, 40
    g = random.Random(seed)
    examples = [([g.randrange(1, V) for _ in range(g.randint(2, 9))], [g.randrange(1, V) for _ in range(g.randint(1, 7))])
                for _ in range(14)]
    rows = pack(examples, seq, pad=0)
    torch.manual_seed(seed)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=256, n_positions=64, n_embd=h, n_layer=L, n_head=n, n_inner=4 * h,
                                      activation_function="gelu_fast", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                      layer_norm_epsilon=1e-5)
        cfg._attn_implementation = "eager"
        model = transformers.GPT2LMHeadModel(cfg).float().eval()
    else:
        cfg = transformers.BloomConfig(vocab_size=256, hidden_size=h, n_layer=L, n_head=n, layer_norm_epsilon=1e-5,
                                       hidden_dropout=0.0, attention_dropout=0.0)
        cfg._attn_implementation = "eager"
        model = transformers.BloomForCausalLM(cfg).float().eval()
    hf.randomize(model, seed)
    ref_logits, ref_loss, grads = reference(model, rows, seq, targets_only)
    if kind == "gpt2":
        weights = hf.gpt2_to_megatron(model.state_dict(), L, n, h // n)
        meg_grads = hf.gpt2_to_megatron(grads, L, n, h // n)
        flags = ["--max-position-embeddings", "64"]
    else:
        weights = hf.bloom_to_megatron(model.state_dict(), L)
        meg_grads = hf.bloom_to_megatron(grads, L)
        flags = ["--alibi", "--embed-layernorm"]
    flags += ["--num-layers", str(L), "--hidden-size", str(h), "--ffn-hidden-size", str(4 * h), "--num-attention-heads", str(n),
              "--seq-length", str(seq), "--padded-vocab-size", "256"]
    tokens, labels, positions, segments, mask = model_inputs(rows, seq, targets_only)
    tag = f"{kind}-{'targets' if targets_only else 'all'}"
    out = run_probe(tmp, weights, {"tokens": tokens, "labels": labels, "loss_mask": mask, "position_ids": positions,
                                   "segment_ids": segments}, flags, tag)
    real = sorted(ref_logits)
    ours = torch.stack([out["logits"][r, k] for r, k in real])
    close(f"{tag}: logits at {len(real)} packed positions vs each example alone", ours, torch.stack([ref_logits[x] for x in real]), 5e-5)
    close(f"{tag}: loss", out["loss"].reshape(()), ref_loss.reshape(()), 1e-5)
    for name, gr in meg_grads.items():
        close(f"{tag}: grad {name}", out["grad." + name], gr, 2e-4)
    # Control: without the segment ids the later examples of a row see the earlier ones.
    plain = run_probe(tmp, weights, {"tokens": tokens, "labels": labels, "loss_mask": mask, "position_ids": positions},
                      flags, tag + "-plain")
    diff = (torch.stack([plain["logits"][r, k] for r, k in real]) - ours).abs().max().item()
    check(diff > 1e-3, f"{tag}: logits without segment ids differ by only {diff:.2e} (the check cannot see attention across examples)")
    print(f"{tag}: {len(examples)} examples in {len(rows)} rows of {seq + 1}; logits at {len(real)} positions, loss "
          f"{out['loss'].item():.6f} vs {ref_loss.item():.6f}, {len(meg_grads)} gradients equal; without segment ids the "
          f"logits move by {diff:.2e}")


# ---- the whole path ----

COUNTRIES = [("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Portugal", "Lisbon"),
             ("Austria", "Vienna"), ("Poland", "Warsaw"), ("Greece", "Athens"), ("Norway", "Oslo"), ("Sweden", "Stockholm"),
             ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Ireland", "Dublin"), ("Hungary", "Budapest"),
             ("Egypt", "Cairo"), ("Japan", "Tokyo"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Chile", "Santiago"),
             ("Canada", "Ottawa"), ("Cuba", "Havana"), ("Iceland", "Reykjavik"), ("Latvia", "Riga"), ("Nepal", "Kathmandu")]
SEQ = 64


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(cmd[:3])} ... exit {r.returncode}: {r.stderr[-3000:]}")
    return r


def losses(text, what="lm loss"):
    return {int(m.group(1)): float(m.group(2))
            for m in re.finditer(r"iteration\s+(\d+)/.*?" + what + r": ([0-9.Ee+-]+)", text)}


def valid_losses(text):
    return [float(m.group(1)) for m in re.finditer(r"valid loss at [^|]*\| lm loss value: ([0-9.Ee+-]+)", text)]


def train_flags(data, ckpt, tokenizer, iters, extra=()):
    return ["--load", ckpt, "--finetune", "--sft", "--loss-on-targets-only", "--data-path", data, "--split", "90,10,0",
            *tokenizer, "--num-layers", "2", "--hidden-size", "64",
            "--num-attention-heads", "4", "--seq-length", str(SEQ), "--max-position-embeddings", str(SEQ),
            "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", str(iters), "--lr", "3e-3",
            "--min-lr", "3e-4", "--lr-decay-style", "cosine", "--lr-warmup-iters", "5", "--weight-decay", "0.0",
            "--clip-grad", "1.0", "--hidden-dropout", "0", "--attention-dropout", "0", "--log-interval", "1",
            "--eval-interval", str(max(1, iters // 3)), "--eval-iters", "2", "--seed", "1234", "--no-async-save", *extra]


def rank_env(rank, world, port):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))}
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    return env


def answer_loss_hf(folder, examples):
    """transformers' mean loss over the answer tokens of `examples`, each run alone."""
    model = transformers.GPT2LMHeadModel.from_pretrained(folder).float().eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for prompt, answer in examples:
            ids = torch.tensor([prompt + answer])
            logits = model(input_ids=ids).logits[0]
            for j in range(len(prompt), len(prompt) + len(answer)):
                total += torch.nn.functional.cross_entropy(logits[j - 1:j], ids[0, j:j + 1], reduction="sum").item()
                count += 1
    return total / count


def path_case(tmp):
    # A byte-level BPE of 400 tokens trained on the bundled corpus (Megatron pads the vocabulary to 512), and the
    # question / answer set.
    run([os.path.join(BIN, "mds-tokenizer-train"), "--input", os.path.join(SRC, "data", "sample", "corpus.jsonl.zst"),
         "--vocab-size", "400", "--output-dir", tmp + "/tok", "--quiet"])
    vocab, merges = tmp + "/tok/vocab.json", tmp + "/tok/merges.txt"
    with open(tmp + "/qa.jsonl", "w") as f:
        for k in range(4):  # the same facts, asked four ways
            for country, capital in COUNTRIES:
                q = [f"Q: What is the capital of {country}?\nA:", f"The capital of {country} is",
                     f"{country}'s capital city:", f"Capital of {country}?"][k]
                f.write(json.dumps({"prompt": q, "answer": f" {capital}."}) + "\n")
    run([os.path.join(BIN, "mds-preprocess"), "--sft", "--input", tmp + "/qa.jsonl", "--output-prefix", tmp + "/qa",
         "--vocab-file", vocab, "--merge-file", merges, "--append-eod", "--quiet"])
    prompts = corpus.read_indexed(tmp + "/qa_inputs_document")["seqs"]
    answers = corpus.read_indexed(tmp + "/qa_targets_document")["seqs"]
    examples = list(zip(prompts, answers))
    check(len(examples) == 4 * len(COUNTRIES), f"pair files hold {len(examples)} examples, expected {4 * len(COUNTRIES)}")
    eod = json.load(open(vocab))["<|endoftext|>"]
    check(all(a[-1] == eod and eod not in p for p, a in examples), "the EOD token ends every answer and no prompt")

    # A random GPT2LMHeadModel saved by transformers, converted for mds-train.
    vocab_size = len(json.load(open(vocab)))
    cfg = transformers.GPT2Config(vocab_size=vocab_size, n_positions=SEQ, n_embd=64, n_layer=2, n_head=4, n_inner=256,
                                  activation_function="gelu_fast", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  layer_norm_epsilon=1e-5, initializer_range=0.02)
    cfg._attn_implementation = "eager"
    torch.manual_seed(5)
    base = transformers.GPT2LMHeadModel(cfg).float().eval()
    base.save_pretrained(tmp + "/hf-base")
    # The folder's tokenizer: a tokenizer.json of the same BPE (byte-level, <|endoftext|> an added special token),
    # saved with transformers' files around it.
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    tj = Tokenizer(models.BPE.from_file(vocab, merges))
    tj.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tj.decoder = decoders.ByteLevel()
    tj.post_processor = processors.ByteLevel(trim_offsets=False)
    tj.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    transformers.PreTrainedTokenizerFast(tokenizer_object=tj, eos_token="<|endoftext|>").save_pretrained(tmp + "/hf-base")
    run([os.path.join(BIN, "mds-hf-to-ckpt"), tmp + "/hf-base", tmp + "/ckpt", "--quiet"])
    # That tokenizer.json, used as is, tokenizes the set as the BPE files did.
    run([os.path.join(BIN, "mds-preprocess"), "--sft", "--input", tmp + "/qa.jsonl", "--output-prefix", tmp + "/qa-json",
         "--tokenizer-file", tmp + "/ckpt/hf_tokenizer/tokenizer.json", "--append-eod", "--quiet"])
    for part in ("inputs", "targets"):
        for ext in (".bin", ".idx"):
            same = open(f"{tmp}/qa_{part}_document{ext}", "rb").read() == open(f"{tmp}/qa-json_{part}_document{ext}", "rb").read()
            check(same, f"qa-json_{part}_document{ext} (tokenizer.json) differs from the BPE files' output")
    run([os.path.join(BIN, "mds-hf-to-ckpt"), tmp + "/hf-base", tmp + "/ckpt-pp2", "--target-pp", "2", "--quiet"])

    # Fine-tuning, the batches dumped.
    iters = 60
    env = dict(os.environ, MDS_DUMP_BATCHES=tmp + "/dump", OMP_NUM_THREADS="2")
    bpe = ["--vocab-file", vocab, "--merge-file", merges]
    r = run([os.path.join(BIN, "mds-train"),
             *train_flags(tmp + "/qa", tmp + "/ckpt", bpe, iters, ["--save", tmp + "/tuned", "--save-interval", str(iters)])], env=env)
    log = r.stdout + r.stderr
    curve = losses(log)
    check(len(curve) == iters, f"{len(curve)} iteration lines of {iters}")
    lines = [json.loads(x) for x in open(tmp + "/dump.rank0")]
    check(len(lines) == 2 * iters, f"{len(lines)} dumped micro batches, expected {2 * iters}")
    by_tokens = {tuple(p + a): (p, a) for p, a in examples}  # the same fact asked alike may repeat: one entry

    def row_examples(row, seg):
        """The examples of a dumped row (seq + 1 tokens, seq segment ids), or None when a segment is not one."""
        out, k = [], 0
        while k < SEQ and seg[k] != 0:
            e = k
            while e < SEQ and seg[e] == seg[k]:
                e += 1
            # The segment of the row's last token is not dumped: a segment reaching the end may include it.
            ex = by_tokens.get(tuple(row[k:e])) or (by_tokens.get(tuple(row[k:e + 1])) if e == SEQ else None)
            if ex is None or seg[k] != len(out) + 1:
                return None
            out.append(ex)
            k = e
        return out

    bad = []
    for line in lines:
        for b, row in enumerate(line["tokens"]):
            where = f"iteration {line['iteration']} micro batch {line['micro_batch']} row {b}"
            seg, pos, mask = line["segment_ids"][b], line["position_ids"][b], line["loss_mask"][b]
            ex = row_examples(row, seg)
            if ex is None:
                bad.append(f"{where}: a segment is not an example of the pair files")
                continue
            want = pack(ex, SEQ, pad=eod)
            if len(want) != 1 or want[0][0] != row:
                bad.append(f"{where}: the tokens are not its examples followed by padding")
                continue
            _, _, p_want, s_want, m_want = model_inputs(want, SEQ, True)
            if seg != s_want[0].tolist() or pos != p_want[0].tolist() or [float(x) for x in mask] != m_want[0].tolist():
                bad.append(f"{where}: segment / position / loss-mask rows differ from the rule")
    check(not bad, f"{len(bad)} dumped rows wrong: {bad[:3]}")
    # Iteration 1's loss is computed before any update: transformers on its rows' examples, each alone.
    ref = []
    for line in lines[:2]:
        rows = [pack(row_examples(row, line["segment_ids"][b]) or [], SEQ, eod)[0] for b, row in enumerate(line["tokens"])]
        _, loss, _ = reference(base, rows, SEQ, True, padded_vocab=(vocab_size + 127) // 128 * 128)
        ref.append(loss.item())
    first = sum(ref) / len(ref)
    check(abs(curve.get(1, math.nan) - first) <= 1e-5 * first, f"iteration 1 lm loss {curve.get(1)} vs transformers {first:.6f}")
    head = sum(curve[i] for i in range(1, 6)) / 5
    tail = sum(curve[i] for i in range(iters - 4, iters + 1)) / 5
    check(tail < 0.5 * head, f"the answers' loss did not fall by half: {head:.3f} (iterations 1-5) -> {tail:.3f} (last 5)")
    valid = valid_losses(log)
    check(len(valid) >= 3 and valid[-1] < valid[0], f"validation losses {valid}: expected three or more, falling")
    print(f"fine-tuning: {len(examples)} examples, {len(lines)} micro batches dumped and checked row by row; iteration 1 lm loss "
          f"{curve.get(1):.6f} vs transformers {first:.6f}; answers' loss {head:.3f} -> {tail:.3f} over {iters} iterations; "
          f"validation {valid}")

    # Two pipeline stages (Gloo): the same losses.
    short = 6
    port = free_port()
    procs = [subprocess.Popen([os.path.join(BIN, "mds-train"),
                               *train_flags(tmp + "/qa", tmp + "/ckpt-pp2",
                                            ["--tokenizer-type", "PretrainedFromHF", "--tokenizer-name-or-path",
                                             tmp + "/ckpt/hf_tokenizer"], short,
                                            ["--pipeline-model-parallel-size", "2", "--eval-iters", "0"])],
                              env=rank_env(rank, 2, port), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    check(all(p.returncode == 0 for p in procs), f"PP=2 run failed: {[o[1][-1500:] for o in outs]}")
    pp = losses(outs[1][0] + outs[1][1])
    diffs = [abs(pp.get(i, math.nan) - curve[i]) / curve[i] for i in range(1, short + 1)]
    check(all(d <= 2e-5 for d in diffs), f"PP=2 losses {pp} differ from one process's {[curve[i] for i in range(1, short + 1)]}")
    print(f"PP=2 (the folder's tokenizer.json): iterations 1-{short} lm loss within {max(diffs):.1e} of one process")

    # Export and check with transformers itself.
    tags = sorted(x for x in os.listdir(tmp + "/tuned") if x.startswith("global_step"))
    run([os.path.join(BIN, "mds-ckpt-to-hf"), tmp + "/tuned", tmp + "/hf-tuned", "--quiet"])
    exported = json.load(open(tmp + "/hf-tuned/config.json"))["vocab_size"]
    check(exported == vocab_size, f"the export has vocab_size {exported}, the model fine-tuned had {vocab_size} (padding rows kept)")
    before, after = answer_loss_hf(tmp + "/hf-base", examples), answer_loss_hf(tmp + "/hf-tuned", examples)
    check(after < 0.5 * before, f"transformers: answers' loss {before:.3f} before, {after:.3f} after fine-tuning")
    print(f"export ({tags[-1]}, vocab_size {exported}): transformers' loss on the answers {before:.3f} before, {after:.3f} after")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for kind, seed in (("gpt2", 11), ("bloom", 12)):
            for targets_only in (True, False):
                model_case(tmp, kind, seed, targets_only)
        path_case(tmp)
    finish()


if __name__ == "__main__":
    main()
