#!/usr/bin/env bash
# The README's main job (scripts/demo.sh) runs from the build tree and checks its own output: the whole job,
# with 100 training iterations instead of 300 (the loss falls ~2.2 nats by then; the check asks for 1).
set -euo pipefail
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
out=$(MDS_BUILD_DIR="$MDS_BUILD_DIR" MDS_DEMO_ITERS=100 bash "$MDS_SOURCE_DIR/scripts/demo.sh" "$work/demo")
echo "$out"
grep -q "decoded text == first record of the corpus: OK" <<<"$out"
grep -q "datasets: train" <<<"$out"
for f in tokenizer/vocab.json tokenizer/merges.txt sample_text_document.bin sample_text_document.idx; do
  [[ -s $work/demo/$f ]] || { echo "FAIL: $f missing"; exit 1; }
done
# With LibTorch the main job also trains a small GPT and checks that the loss falls.
if [[ -x $MDS_BUILD_DIR/bin/mds-train ]]; then
  grep -q "check       the training loss fell by more than 1 nat: OK" <<<"$out"
  [[ -s $work/demo/codecarbon/emissions.csv ]] || { echo "FAIL: emissions.csv missing"; exit 1; }
  ls "$work"/demo/tensorboard/events.out.tfevents.* > /dev/null
fi
