#!/usr/bin/env bash
# mds-preprocess end to end: exit statuses and messages, no partial outputs after errors or SIGTERM,
# outputs identical across input forms (file, stdin, .zst, CRLF, blank lines), worker counts and
# merge mode, the --json summary, and the bytes of the specs/data.md §1.8 worked example.
# Needs MDS_BIN and MDS_SOURCE_DIR; the GPT-2 files in $MDS_SOURCE_DIR/../shared/data/gpt2 (the
# tests that need them are skipped without them), python3, and the zstd CLI (its test is skipped
# without it).
set -euo pipefail

BIN="${MDS_BIN:?MDS_BIN is not set}/mds-preprocess"
SRC="${MDS_SOURCE_DIR:?MDS_SOURCE_DIR is not set}"
GPT2="${MDS_GPT2_DIR:-$SRC/../shared/data/gpt2}"
[[ -x "$BIN" ]] || { echo "FAIL: $BIN not found or not executable"; exit 1; }
command -v python3 > /dev/null || { echo "FAIL: python3 is needed to generate inputs"; exit 1; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/mds-preprocess-cli.XXXXXX")"
GEN_PID=""
cleanup() {
  [[ -n "$GEN_PID" ]] && kill "$GEN_PID" 2> /dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "--- $*"; }

# run CMD...: runs it with stdout/stderr captured in $TMP/out and $TMP/err; sets RC.
run() {
  set +e
  "$@" > "$TMP/out" 2> "$TMP/err"
  RC=$?
  set -e
}
expect_rc() {  # expect_rc N description
  if [[ "$RC" != "$1" ]]; then
    echo "stdout:" >&2; cat "$TMP/out" >&2
    echo "stderr:" >&2; cat "$TMP/err" >&2
    fail "$2: exit status $RC, expected $1"
  fi
}
expect_err() {  # expect_err FIXED-STRING description
  grep -qF -- "$1" "$TMP/err" || { cat "$TMP/err" >&2; fail "$2: stderr lacks '$1'"; }
}
same() {  # same FILE1 FILE2 description
  cmp -s "$1" "$2" || fail "$3: $1 and $2 differ"
}
same_dataset() {  # same_dataset PREFIX1 PREFIX2 description
  same "$1.bin" "$2.bin" "$3 (.bin)"
  same "$1.idx" "$2.idx" "$3 (.idx)"
}
only_files() {  # only_files DIR NAME... : DIR holds exactly these entries (hidden ones included)
  local dir="$1"; shift
  local want have
  want="$(printf '%s\n' "$@" | sort)"
  have="$(ls -A "$dir" | sort)"
  [[ "$have" == "$want" ]] || fail "$dir holds [$(echo $have)], expected [$(echo $want)]"
}

# ---- flags and usage errors (no tokenizer files needed) ----------------------------------------
step "--help lists every flag"
run "$BIN" --help
expect_rc 0 "--help"
for flag in --input --output-prefix --json-keys --datasets --dataset-impl --tokenizer-type --vocab-file --vocab \
            --merge-file --tokenizer-file --tokenizer-name-or-path --eod-token --append-eod \
            --make-vocab-size-divisible-by --split-sentences --workers --skip-bad-lines --progress \
            --progress-interval --quiet -q --json --help -h --version; do
  grep -qE -- "(^|[ ,])$flag([ ,=]|\$)" "$TMP/out" || fail "--help does not list $flag"
done
[[ ! -s "$TMP/err" ]] || fail "--help wrote to stderr"

step "usage errors exit 2 with 'mds-preprocess: error:'"
echo '{"text": "x"}' > "$TMP/one.jsonl"
usage_case() {  # usage_case description ARGS...
  local what="$1"; shift
  run "$BIN" "$@"
  expect_rc 2 "$what"
  expect_err "mds-preprocess: error:" "$what"
}
usage_case "unknown flag" --no-such-flag
usage_case "unknown flag with a valid command line" --input "$TMP/one.jsonl" --output-prefix "$TMP/u" --bogus
usage_case "missing tokenizer" --input "$TMP/one.jsonl" --output-prefix "$TMP/u"
expect_err "tokenizer" "missing tokenizer"
usage_case "vocab without merges" --input "$TMP/one.jsonl" --output-prefix "$TMP/u" --vocab-file "$TMP/one.jsonl"
usage_case "--workers 0" --input "$TMP/one.jsonl" --output-prefix "$TMP/u" --workers 0
usage_case "--dataset-impl lazy" --input "$TMP/one.jsonl" --output-prefix "$TMP/u" --dataset-impl lazy
usage_case "--split-sentences" --input "$TMP/one.jsonl" --output-prefix "$TMP/u" --split-sentences \
  --vocab-file x --merge-file y
only_files "$TMP" one.jsonl out err

run "$BIN" --version
expect_rc 0 "--version"
grep -q "mds-preprocess" "$TMP/out" || fail "--version does not name the tool"

# ---- everything below tokenizes with the GPT-2 files -------------------------------------------
if [[ ! -f "$GPT2/encoder.json" || ! -f "$GPT2/vocab.bpe" ]]; then
  echo "skipped: GPT-2 files not found in $GPT2 (the usage checks above passed)"
  exit 0
fi
TOK=(--vocab-file "$GPT2/encoder.json" --merge-file "$GPT2/vocab.bpe")

step "a nonexistent input exits 1 naming the file"
run "$BIN" --input "$TMP/does-not-exist.jsonl" --output-prefix "$TMP/u" "${TOK[@]}"
expect_rc 1 "nonexistent input"
expect_err "mds-preprocess: error:" "nonexistent input"
expect_err "$TMP/does-not-exist.jsonl" "nonexistent input"
only_files "$TMP" one.jsonl out err

step "a nonexistent vocabulary exits 1 naming the file"
run "$BIN" --input "$TMP/one.jsonl" --output-prefix "$TMP/u" --vocab-file "$TMP/nope.json" --merge-file "$GPT2/vocab.bpe"
expect_rc 1 "nonexistent vocabulary"
expect_err "$TMP/nope.json" "nonexistent vocabulary"

step "the §1.8 worked example, byte for byte"
mkdir "$TMP/worked"
printf '%s\n' '{"text": "Hello world"}' '{"text": "Megatron-LM!"}' > "$TMP/worked/in.jsonl"
run "$BIN" --input "$TMP/worked/in.jsonl" --output-prefix "$TMP/worked/P" "${TOK[@]}" --append-eod --quiet
expect_rc 0 "worked example"
[[ ! -s "$TMP/err" ]] || fail "--quiet still wrote to stderr: $(cat "$TMP/err")"
only_files "$TMP/worked" in.jsonl P_text_document.bin P_text_document.idx
python3 - "$TMP/worked/P_text_document" << 'EOF' || fail "worked example bytes differ from specs/data.md §1.8"
import sys
p = sys.argv[1]
idx = bytes.fromhex(
    "4d4d 4944 4944 5800 0001 0000 0000 0000"
    "0008 0200 0000 0000 0000 0300 0000 0000"
    "0000 0300 0000 0600 0000 0000 0000 0000"
    "0000 0600 0000 0000 0000 0000 0000 0000"
    "0000 0100 0000 0000 0000 0200 0000 0000"
    "0000".replace(" ", ""))
bin_ = bytes.fromhex("883ce30350c4b0a6bc5b0c00387a000050c4")
got_idx = open(p + ".idx", "rb").read()
got_bin = open(p + ".bin", "rb").read()
ok = True
if got_idx != idx:
    print("idx:", got_idx.hex(), "\nexpected:", idx.hex()); ok = False
if got_bin != bin_:
    print("bin:", got_bin.hex(), "\nexpected:", bin_.hex()); ok = False
sys.exit(0 if ok else 1)
EOF

# A generated corpus: Unicode, escapes (\/, \uXXXX, surrogate pairs), empty texts, long documents,
# other fields; several MB so that it spans many 1 MiB batches.
gen_corpus() {  # gen_corpus FILE N_LINES SEED
  python3 - "$1" "$2" "$3" << 'EOF'
import json, random, sys
path, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
words = ["the", "of", "Megatron", "data", "naïve", "café", "日本語", "😀", "🌍", "Ωμέγα", "١٢٣", "x²", "don't",
         "it's", "\t", "  ", "\u00a0", "\u3000", "e\u0301", "http://a.b/c", "<|endoftext|>", "1234567", "3.14"]
with open(path, "w", encoding="utf-8", newline="") as f:
    for i in range(n):
        k = rng.random()
        if k < 0.02:
            text = ""
        elif k < 0.04:
            text = " ".join(rng.choice(words) for _ in range(rng.randint(2000, 6000)))
        else:
            text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 120)))
            if rng.random() < 0.3:
                text += "\n\n" + str(i)
        rec = {"id": i, "text": text, "meta": {"n": [1, 2.5, None, True]}}
        line = json.dumps(rec, ensure_ascii=rng.random() < 0.5)
        if rng.random() < 0.3:
            line = line.replace("/", "\\/")
        f.write(line + "\n")
EOF
}

mkdir "$TMP/c"
gen_corpus "$TMP/c/corpus.jsonl" 15000 1
LINES=$(wc -l < "$TMP/c/corpus.jsonl")
SIZE=$(wc -c < "$TMP/c/corpus.jsonl")
(( SIZE > 3000000 )) || fail "the generated corpus is only $SIZE bytes"
EMPTY=$(python3 -c 'import json,sys; print(sum(1 for l in open(sys.argv[1], encoding="utf-8") if json.loads(l)["text"] == ""))' "$TMP/c/corpus.jsonl")

step "--json summary ($LINES lines, $SIZE bytes, $EMPTY empty texts)"
run "$BIN" --input "$TMP/c/corpus.jsonl" --output-prefix "$TMP/c/w1" "${TOK[@]}" --append-eod --workers 1 --json
expect_rc 0 "workers 1"
python3 - "$TMP/out" "$LINES" "$EMPTY" "$TMP/c/w1_text_document" "$SIZE" << 'EOF' || fail "--json summary is wrong: $(cat "$TMP/out")"
import json, os, sys
out, lines, empty, prefix, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
text = open(out).read()
assert text.count("\n") == 1, "expected one line of JSON"
j = json.loads(text)
assert j["lines"] == lines, j
assert j["bad_lines"] == 0 and j["blank_lines"] == 0, j
assert j["dtype"] == "uint16", j
assert j["input_bytes"] == size, j
(o,) = j["outputs"]
assert o["key"] == "text" and o["prefix"] == prefix, o
assert o["documents"] == lines - empty, o
assert o["empty_documents"] == empty, o
assert o["tokens"] * 2 == os.path.getsize(prefix + ".bin"), o
assert os.path.getsize(prefix + ".idx") == 34 + 12 * o["documents"] + 8 * (o["documents"] + 1)
EOF

step "progress lines go to stderr, the JSON summary alone to stdout"
run "$BIN" --input "$TMP/c/corpus.jsonl" --output-prefix "$TMP/c/prog" "${TOK[@]}" --append-eod --workers 2 \
  --progress lines --progress-interval 0.001 --json
expect_rc 0 "--progress lines"
[[ $(wc -l < "$TMP/out") == 1 ]] || fail "stdout holds more than the JSON summary: $(head -c 300 "$TMP/out")"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$TMP/out" || fail "stdout is not JSON"
grep -q "^mds-preprocess: .*documents" "$TMP/err" || fail "no progress lines on stderr: $(head -c 300 "$TMP/err")"
same_dataset "$TMP/c/w1_text_document" "$TMP/c/prog_text_document" "with progress"

step "a file name that is not UTF-8 still gives a valid JSON summary"
run "$BIN" --input "$TMP/worked/in.jsonl" --output-prefix "$TMP/c/"$'latin\xe9' "${TOK[@]}" --append-eod --json
expect_rc 0 "non-UTF-8 prefix"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1], encoding="utf-8")); assert j["outputs"][0]["documents"] == 2, j' \
  "$TMP/out" || fail "non-UTF-8 prefix: bad JSON summary: $(cat "$TMP/out")"

step "--workers 1, 2 and 3 give the same bytes"
for w in 2 3; do
  run "$BIN" --input "$TMP/c/corpus.jsonl" --output-prefix "$TMP/c/w$w" "${TOK[@]}" --append-eod --workers "$w" --quiet
  expect_rc 0 "workers $w"
  same_dataset "$TMP/c/w1_text_document" "$TMP/c/w${w}_text_document" "--workers $w vs 1"
done

step "stdin ('-') equals the file"
run bash -c "cat '$TMP/c/corpus.jsonl' | '$BIN' --input - --output-prefix '$TMP/c/stdin' ${TOK[*]@Q} --append-eod --workers 2 --quiet"
expect_rc 0 "stdin"
same_dataset "$TMP/c/w1_text_document" "$TMP/c/stdin_text_document" "stdin vs file"

step ".jsonl.zst equals .jsonl"
if command -v zstd > /dev/null; then
  zstd -q -3 "$TMP/c/corpus.jsonl" -o "$TMP/c/corpus.jsonl.zst"
  run "$BIN" --input "$TMP/c/corpus.jsonl.zst" --output-prefix "$TMP/c/zst" "${TOK[@]}" --append-eod --workers 3 --quiet
  expect_rc 0 ".zst input"
  same_dataset "$TMP/c/w1_text_document" "$TMP/c/zst_text_document" ".zst vs plain"
  # Truncated .zst: exit 1, named, nothing left behind.
  mkdir "$TMP/trunc"
  head -c 200000 "$TMP/c/corpus.jsonl.zst" > "$TMP/trunc/t.jsonl.zst"
  run "$BIN" --input "$TMP/trunc/t.jsonl.zst" --output-prefix "$TMP/trunc/o" "${TOK[@]}" --workers 2
  expect_rc 1 "truncated .zst"
  expect_err "t.jsonl.zst" "truncated .zst"
  only_files "$TMP/trunc" t.jsonl.zst
else
  echo "skipped: no zstd command-line tool"
fi

step "CRLF and lone-CR line ends equal LF"
python3 -c 'import sys; d=open(sys.argv[1],"rb").read(); open(sys.argv[2],"wb").write(d.replace(b"\n", b"\r\n")); open(sys.argv[3],"wb").write(d.replace(b"\n", b"\r"))' \
  "$TMP/c/corpus.jsonl" "$TMP/c/crlf.jsonl" "$TMP/c/cr.jsonl"
for kind in crlf cr; do
  run "$BIN" --input "$TMP/c/$kind.jsonl" --output-prefix "$TMP/c/$kind" "${TOK[@]}" --append-eod --workers 2 --json
  expect_rc 0 "$kind input"
  python3 -c 'import json,os,sys; j=json.load(open(sys.argv[1])); assert j["input_bytes"] == os.path.getsize(sys.argv[2]), j' \
    "$TMP/out" "$TMP/c/$kind.jsonl" || fail "$kind input: input_bytes is not the file size: $(cat "$TMP/out")"
  same_dataset "$TMP/c/w1_text_document" "$TMP/c/${kind}_text_document" "$kind vs LF"
done

step "blank and whitespace-only lines are skipped and counted"
python3 - "$TMP/c/corpus.jsonl" "$TMP/c/blank.jsonl" << 'EOF'
import sys
lines = open(sys.argv[1], "rb").read().split(b"\n")[:-1]
with open(sys.argv[2], "wb") as f:
    f.write(b"\n")
    for i, l in enumerate(lines):
        f.write(l + b"\n")
        if i % 1000 == 0:
            f.write(b"   \t \n\n")
    f.write(b"\r\n \n")
EOF
run "$BIN" --input "$TMP/c/blank.jsonl" --output-prefix "$TMP/c/blank" "${TOK[@]}" --append-eod --workers 2 --json
expect_rc 0 "blank lines"
same_dataset "$TMP/c/w1_text_document" "$TMP/c/blank_text_document" "with blank lines vs without"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["blank_lines"] == 2*15 + 3, j' "$TMP/out" \
  || fail "blank_lines count: $(cat "$TMP/out")"

step "merge mode (--datasets) equals one run"
python3 - "$TMP/c/corpus.jsonl" "$TMP/c" << 'EOF'
import sys
lines = open(sys.argv[1], "rb").read().split(b"\n")[:-1]
cuts = [0, 7000, 7001, 19000, len(lines)]
for i in range(4):
    open(f"{sys.argv[2]}/part{i}.jsonl", "wb").write(b"".join(l + b"\n" for l in lines[cuts[i]:cuts[i + 1]]))
EOF
parts=()
for i in 0 1 2 3; do
  run "$BIN" --input "$TMP/c/part$i.jsonl" --output-prefix "$TMP/c/part$i" "${TOK[@]}" --append-eod --quiet
  expect_rc 0 "part $i"
  parts+=("$TMP/c/part${i}_text_document")
done
run "$BIN" --datasets "${parts[@]}" --output-prefix "$TMP/c/merged"
expect_rc 0 "merge"
same_dataset "$TMP/c/w1_text_document" "$TMP/c/merged" "merged vs one run"
# Several --input files are concatenated in order: the same bytes again.
run "$BIN" --input "$TMP/c/part0.jsonl" --input "$TMP/c/part1.jsonl" --input "$TMP/c/part2.jsonl" \
  --input "$TMP/c/part3.jsonl" --output-prefix "$TMP/c/multi" "${TOK[@]}" --append-eod --workers 3 --quiet
expect_rc 0 "several --input"
same_dataset "$TMP/c/w1_text_document" "$TMP/c/multi_text_document" "several --input vs one file"
run "$BIN" --datasets "${parts[0]}" --input "$TMP/c/part0.jsonl" --output-prefix "$TMP/c/x"
expect_rc 2 "--datasets with --input"
run "$BIN" --datasets "${parts[0]}" "$TMP/c/no-such-dataset" --output-prefix "$TMP/c/bad-merge"
expect_rc 1 "merge of a missing dataset"
expect_err "$TMP/c/no-such-dataset" "merge of a missing dataset"
[[ ! -e "$TMP/c/bad-merge.bin" && ! -e "$TMP/c/bad-merge.idx" ]] || fail "a failed merge left outputs"

step "a malformed line stops the run: exit 1, file:3:, no outputs, no temporaries"
mkdir "$TMP/bad"
{
  echo '{"text": "first"}'
  echo '{"text": "second"}'
  echo '{"text": "third" oops}'
  head -n 10000 "$TMP/c/corpus.jsonl"
} > "$TMP/bad/in.jsonl"
for w in 1 3; do
  run "$BIN" --input "$TMP/bad/in.jsonl" --output-prefix "$TMP/bad/out" "${TOK[@]}" --workers "$w"
  expect_rc 1 "malformed line, --workers $w"
  expect_err "mds-preprocess: error:" "malformed line"
  expect_err "$TMP/bad/in.jsonl:3:" "malformed line, --workers $w"
  only_files "$TMP/bad" in.jsonl
done
# From standard input the message says <stdin>.
run bash -c "cat '$TMP/bad/in.jsonl' | '$BIN' --input - --output-prefix '$TMP/bad/out' ${TOK[*]@Q} --workers 2"
expect_rc 1 "malformed line on stdin"
expect_err "<stdin>:3:" "malformed line on stdin"
only_files "$TMP/bad" in.jsonl
# Other kinds of bad lines, each reported with its line number.
bad_line_case() {  # bad_line_case DESCRIPTION LINE
  printf '%s\n' '{"text": "ok"}' "$2" '{"text": "ok"}' > "$TMP/bad/kind.jsonl"
  run "$BIN" --input "$TMP/bad/kind.jsonl" --output-prefix "$TMP/bad/out" "${TOK[@]}"
  expect_rc 1 "$1"
  expect_err "kind.jsonl:2:" "$1"
  only_files "$TMP/bad" in.jsonl kind.jsonl
}
bad_line_case "missing key" '{"body": "x"}'
bad_line_case "non-string text" '{"text": 12}'
bad_line_case "lone surrogate" '{"text": "a\ud800b"}'
bad_line_case "raw control character" $'{"text": "a\tb"}'
bad_line_case "invalid UTF-8" $'{"text": "a\xff"}'
bad_line_case "extra data" '{"text": "a"} {"text": "b"}'
rm "$TMP/bad/kind.jsonl"

step "--skip-bad-lines skips and counts"
for w in 1 3; do
  run "$BIN" --input "$TMP/bad/in.jsonl" --output-prefix "$TMP/bad/skip$w" "${TOK[@]}" --workers "$w" --skip-bad-lines --json
  expect_rc 0 "--skip-bad-lines --workers $w"
  expect_err "in.jsonl:3:" "--skip-bad-lines warning"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["bad_lines"] == 1 and j["lines"] == 10002, j' \
    "$TMP/out" || fail "--skip-bad-lines summary: $(cat "$TMP/out")"
done
same_dataset "$TMP/bad/skip1_text_document" "$TMP/bad/skip3_text_document" "--skip-bad-lines workers 1 vs 3"

step "empty input and empty texts give an empty dataset (42-byte .idx)"
mkdir "$TMP/empty"
: > "$TMP/empty/none.jsonl"
printf '%s\n' '{"text": ""}' '' '{"text": "", "x": 1}' > "$TMP/empty/blank-texts.jsonl"
for f in none blank-texts; do
  run "$BIN" --input "$TMP/empty/$f.jsonl" --output-prefix "$TMP/empty/$f" "${TOK[@]}" --append-eod --json
  expect_rc 0 "empty input $f"
  [[ $(wc -c < "$TMP/empty/${f}_text_document.idx") == 42 && ! -s "$TMP/empty/${f}_text_document.bin" ]] \
    || fail "$f: expected a 42-byte .idx and an empty .bin"
done
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); o=j["outputs"][0]; assert (j["lines"], o["documents"], o["empty_documents"], j["blank_lines"]) == (2, 0, 2, 1), j' \
  "$TMP/out" || fail "empty texts summary: $(cat "$TMP/out")"

step "several --json-keys: one dataset per key, each as a run with that key alone"
mkdir "$TMP/keys"
python3 -c '
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(500):
        f.write(json.dumps({"title": "Title %d" % i if i % 7 else "", "text": "Body of document %d. " % i * (i % 13)}) + "\n")
' "$TMP/keys/in.jsonl"
run "$BIN" --input "$TMP/keys/in.jsonl" --output-prefix "$TMP/keys/both" --json-keys title text "${TOK[@]}" --append-eod --workers 2 --quiet
expect_rc 0 "two keys"
for key in title text; do
  run "$BIN" --input "$TMP/keys/in.jsonl" --output-prefix "$TMP/keys/one" --json-keys "$key" "${TOK[@]}" --append-eod --quiet
  expect_rc 0 "key $key alone"
  same_dataset "$TMP/keys/both_${key}_document" "$TMP/keys/one_${key}_document" "--json-keys title text: $key"
done
run "$BIN" --input "$TMP/keys/in.jsonl" --output-prefix "$TMP/keys/dup" --json-keys text text "${TOK[@]}"
expect_rc 2 "--json-keys text text"
run "$BIN" --input "$TMP/keys/in.jsonl" --output-prefix "$TMP/keys/missing" --json-keys text body "${TOK[@]}"
expect_rc 1 "a key no line has"
expect_err "in.jsonl:1:" "a key no line has"
expect_err "'body'" "a key no line has"
[[ -z "$(compgen -G "$TMP/keys/missing*")" && -z "$(compgen -G "$TMP/keys/.missing*")" ]] || fail "a failed two-key run left files"

step "an existing dataset is replaced only by a successful run"
cp "$TMP/worked/P_text_document.idx" "$TMP/worked/keep.idx"
cp "$TMP/worked/P_text_document.bin" "$TMP/worked/keep.bin"
printf '%s\n' '{"text": "Hello world"}' 'not json' > "$TMP/worked/bad.jsonl"
run "$BIN" --input "$TMP/worked/bad.jsonl" --output-prefix "$TMP/worked/P" "${TOK[@]}" --append-eod
expect_rc 1 "failing rerun"
same "$TMP/worked/P_text_document.idx" "$TMP/worked/keep.idx" "the old .idx after a failed run"
same "$TMP/worked/P_text_document.bin" "$TMP/worked/keep.bin" "the old .bin after a failed run"
only_files "$TMP/worked" in.jsonl bad.jsonl keep.idx keep.bin P_text_document.bin P_text_document.idx

step "SIGTERM during a long run leaves no outputs and no temporaries"
mkdir "$TMP/sig"
# Up to 2 GB generated on the fly into a pipe (~5 s of work per 400 MB with 2 workers), far more
# than gets done in the second before the signal.
python3 -c '
import sys
line = ("{\"text\": \"" + "The quick brown fox jumps over the lazy dog. " * 40 + "\"}\n").encode()
out = sys.stdout.buffer
try:
    for i in range(2_000_000_000 // len(line)):
        out.write(line)
except BrokenPipeError:
    pass
' 2> /dev/null | "$BIN" --input - --output-prefix "$TMP/sig/out" "${TOK[@]}" --workers 2 --quiet 2> "$TMP/sig.err" &
PIPE_PID=$!
GEN_PID=$PIPE_PID
seen=""
for _ in $(seq 1 100); do
  if compgen -G "$TMP/sig/.out_text_document.bin.tmp-*" > /dev/null; then seen=1; break; fi
  sleep 0.1
done
[[ -n "$seen" ]] || fail "no temporary output appeared within 10 s"
sleep 1
kill -TERM "$PIPE_PID" 2> /dev/null || fail "mds-preprocess ended before SIGTERM (input too small?)"
set +e
wait "$PIPE_PID"
SIG_RC=$?
set -e
GEN_PID=""
[[ "$SIG_RC" == 143 ]] || fail "after SIGTERM the exit status is $SIG_RC, expected 143 (128 + SIGTERM)"
only_files "$TMP/sig"

echo "all mds-preprocess CLI checks passed"
