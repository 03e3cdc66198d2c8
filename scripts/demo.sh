#!/usr/bin/env bash
# The README's main job, offline on a fresh machine after scripts/setup.sh: train a byte-level BPE
# tokenizer (vocabulary 8192) on the bundled corpus (data/sample: Python 3.11 standard-library
# docstrings, PSF License), tokenize the corpus with it into a Megatron indexed dataset, check
# that the dataset decodes back to the text, prebuild the sample index, and train a small GPT on it
# with mds-train (300 iterations of 16 x 128 tokens: a few minutes on 2 CPU cores, seconds on a GPU),
# with TensorBoard events and a codecarbon emissions.csv; the loss must fall well below its start.
#   scripts/demo.sh [WORK_DIR]     outputs under WORK_DIR (default ./demo-out, or $MDS_DEMO_DIR)
#   MDS_BUILD_DIR=dir              binaries from dir/bin (default: build, as scripts/setup.sh)
#   MDS_WORKERS=N                  threads (default: nproc)
#   MDS_DEMO_ITERS=N               training iterations (default 300; at least 100 for the loss check to be
#                                  meaningful: tests/integration/test_demo.sh runs 100)
# Builds nothing and needs no network; python3 (standard library only) reads the outputs back.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MDS_BUILD_DIR:-build}
[[ $build == /* ]] || build=$root/$build
bin=$build/bin
work=${1:-${MDS_DEMO_DIR:-demo-out}}
workers=${MDS_WORKERS:-$(nproc)}
corpus=$root/data/sample/corpus.jsonl.zst
python=${MDS_DEMO_PYTHON:-python3}
iters=${MDS_DEMO_ITERS:-300}
[[ $iters =~ ^[1-9][0-9]*$ ]] || { echo "demo: MDS_DEMO_ITERS=$iters is not a positive whole number" >&2; exit 2; }

for exe in mds-tokenizer-train mds-preprocess mds-sample-index; do
  if [[ ! -x $bin/$exe ]]; then
    echo "demo: $bin/$exe not found: run scripts/setup.sh first (or set MDS_BUILD_DIR)" >&2
    exit 1
  fi
done
for cmd in zstd "$python"; do
  command -v "$cmd" >/dev/null || { echo "demo: $cmd is needed" >&2; exit 1; }
done
[[ -f $corpus ]] || { echo "demo: $corpus is missing" >&2; exit 1; }
mkdir -p "$work"

echo "demo: training a tokenizer (vocabulary 8192) on $(basename "$corpus") with $workers workers" >&2
"$bin/mds-tokenizer-train" --input "$corpus" --vocab-size 8192 --output-dir "$work/tokenizer" \
    --workers "$workers" --progress off --json > "$work/tokenizer-train.json"

echo "demo: tokenizing the corpus into a Megatron dataset" >&2
"$bin/mds-preprocess" --input "$corpus" --output-prefix "$work/sample" \
    --vocab-file "$work/tokenizer/vocab.json" --merge-file "$work/tokenizer/merges.txt" \
    --append-eod --workers "$workers" --progress off --json > "$work/preprocess.json"

# The training below: 300 iterations (MDS_DEMO_ITERS) of 16 samples of 128 tokens, validation every 100.
data_flags=(--data-path "$work/sample_text_document" --seq-length 128 --train-iters "$iters" --global-batch-size 16
            --split 90,8,2 --eval-interval 100 --eval-iters 5)
echo "demo: building the GPT sample index Megatron would build for $iters iterations of 16 x 128 tokens" >&2
"$bin/mds-sample-index" "${data_flags[@]}" 2> "$work/sample-index.txt"

# The summary, and the first document read back from the .bin/.idx (specs/data.md §1) and decoded
# with vocab.json (§3.2), compared with the first record of the corpus.
"$python" - "$work" "$corpus" <<'EOF'
import json, os, struct, subprocess, sys

work, corpus = sys.argv[1], sys.argv[2]
train = json.load(open(os.path.join(work, "tokenizer-train.json")))
pre = json.load(open(os.path.join(work, "preprocess.json")))
out = pre["outputs"][0]
prefix = out["prefix"]

with open(prefix + ".idx", "rb") as f:
    idx = f.read()
assert idx[:9] == b"MMIDIDX\x00\x00", "not a Megatron mmap index"
_, code, n, _ = struct.unpack_from("<QBQQ", idx, 9)
size, = struct.unpack_from("<i", idx, 34)          # tokens of sequence 0
pointer, = struct.unpack_from("<q", idx, 34 + 4 * n)  # its byte offset in the .bin
fmt, width = {8: ("H", 2), 4: ("i", 4)}[code]     # uint16 or int32
with open(prefix + ".bin", "rb") as f:
    f.seek(pointer)
    ids = list(struct.unpack(f"<{size}{fmt}", f.read(size * width)))

vocab = json.load(open(os.path.join(work, "tokenizer", "vocab.json"), encoding="utf-8"))
token = {i: t for t, i in vocab.items()}
bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs = bs[:] + [256 + k for k in range(256 - len(bs))]
bs += [b for b in range(256) if b not in bs]
byte_of = {chr(c): b for b, c in zip(bs, cs)}
eod = vocab["<|endoftext|>"]
assert ids[-1] == eod, "the first document does not end with <|endoftext|>"
text = bytes(byte_of[ch] for i in ids[:-1] for ch in token[i]).decode("utf-8")

zstd = subprocess.Popen(["zstd", "-dc", corpus], stdout=subprocess.PIPE)
first = json.loads(zstd.stdout.readline())["text"]
zstd.kill()
zstd.wait()

mb = pre["input_bytes"] / 1e6
print(f"corpus      data/sample/{os.path.basename(corpus)}: {pre['lines']} documents, {mb:.1f} MB of jsonl")
print(f"tokenizer   {train['vocab_size']} tokens ({train['merges']} merges) learned in "
      f"{train['train_seconds']:.2f} s after {train['count_seconds']:.2f} s of counting")
print(f"dataset     {out['documents']} documents, {out['tokens']} tokens ({pre['dtype']}), "
      f"{mb / pre['seconds']:.1f} MB/s ({pre['seconds']:.2f} s)")
print("files")
for path in train["files"] + [prefix + ".bin", prefix + ".idx"]:
    print(f"  {path}  ({os.path.getsize(path):,} bytes)")
shown = text if len(text) <= 400 else text[:400] + " ..."
print(f"first document, decoded from {os.path.basename(prefix)}.bin ({size} tokens):")
print("  | " + shown.replace("\n", "\n  | "))
if text != first:
    sys.exit("demo: FAIL: the first document does not decode to the first record of the corpus")
print("check       decoded text == first record of the corpus: OK")
print("sample index (mds-sample-index):")
print("  " + open(os.path.join(work, "sample-index.txt")).read().strip().replace("\n", "\n  "))
EOF

# Train a small GPT (4 layers, hidden 128, 4 heads) on it: Megatron's flags, Megatron's log lines.
if [[ ! -x $bin/mds-train ]]; then
  echo "demo: $bin/mds-train not built (this build has no LibTorch): skipping training" >&2
  exit 0
fi
echo "demo: training a 4-layer GPT for $iters iterations (log: $work/train.log)" >&2
rm -rf "$work/tensorboard" "$work/codecarbon"
"$bin/mds-train" "${data_flags[@]}" --num-layers 4 --hidden-size 128 --num-attention-heads 4 \
    --max-position-embeddings 128 --micro-batch-size 8 --lr 2e-3 --min-lr 2e-4 --lr-decay-style cosine \
    --lr-warmup-iters 30 --weight-decay 0.1 --clip-grad 1.0 --hidden-dropout 0.0 --attention-dropout 0.0 \
    --log-interval 20 --vocab-file "$work/tokenizer/vocab.json" --merge-file "$work/tokenizer/merges.txt" \
    --tensorboard-dir "$work/tensorboard" --codecarbon-dir "$work/codecarbon" --log-validation-ppl-to-tensorboard \
    2> "$work/train.err" | tee "$work/train.log" | cut -c1-200 >&2

"$python" - "$work" "$iters" <<'EOF'
import csv, glob, os, re, sys

work, iters = sys.argv[1], int(sys.argv[2])
log = open(os.path.join(work, "train.log")).read()
losses = [float(x) for x in re.findall(r"\| lm loss: (\S+) \|", log)]
val = re.findall(r"valid loss at (iteration \d+) \| lm loss value: (\S+) \| lm loss PPL: (\S+)", log)
if len(losses) != iters // 20 or len(losses) < 2:  # --log-interval 20
    sys.exit(f"demo: FAIL: mds-train printed {len(losses)} iteration lines, expected {iters // 20} (at least 2); "
             "see train.err")
print(f"training    lm loss {losses[0]:.3f} at iteration 20 -> {losses[-1]:.3f} at iteration {20 * len(losses)}")
for it, loss, ppl in val:
    print(f"            validation at {it}: lm loss {float(loss):.3f}, PPL {float(ppl):.1f}")
if not losses[-1] < losses[0] - 1.0:
    sys.exit(f"demo: FAIL: the loss did not fall ({losses[0]} -> {losses[-1]})")
print("check       the training loss fell by more than 1 nat: OK")
events = glob.glob(os.path.join(work, "tensorboard", "events.out.tfevents.*"))
rows = list(csv.DictReader(open(os.path.join(work, "codecarbon", "emissions.csv"))))
if not events or not rows:
    sys.exit("demo: FAIL: TensorBoard events or emissions.csv missing")
r = rows[-1]
print(f"tensorboard {events[0]} ({os.path.getsize(events[0]):,} bytes): tensorboard --logdir {work}/tensorboard")
print(f"carbon      {float(r['energy_consumed']) * 1000:.3f} Wh, {float(r['emissions']) * 1000:.3f} g CO2eq in "
      f"{float(r['duration']):.0f} s ({r['country_name']}, CPU {r['cpu_power'][:5]} W, RAM {r['ram_power'][:5]} W)")
EOF
