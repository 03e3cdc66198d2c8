#!/usr/bin/env bash
# run.sh of the GPU pack (scripts/gpu-pack.sh copies this file there; docs/gpu.md). On the GPU machine, from the
# repository root the device tool runs in:   bash .gpu-pack/run.sh
# It builds nothing of mds: the packed binaries run against that machine's torch (torch/lib and nvidia/*/lib of
# its python3's site-packages on LD_LIBRARY_PATH; the pack's lib/ through the binaries' RPATH $ORIGIN/../lib, so
# Python, gcc and nvcc started beside them keep the machine's own libz, libzstd and OpenSSL).
#
# Steps, in this order (each one time-limited with `timeout`; a failed or timed-out step is recorded and the next
# one still runs):
#   torch      find python3's torch, put its libraries on LD_LIBRARY_PATH
#   ldd        every packed binary resolves (no "not found", no missing GLIBC_ / GLIBCXX_ version); else print
#              which and exit 2 at once
#   gpu        nvidia-smi (the GPU, driver, memory) and nvidia-smi -L (how many GPUs)              30 s
#   test_kernels_gpu         kernels/'s CUDA kernels against their CPU references (tests/gpu)      180 s
#   llmc-build llm.c's train_gpt2.cu (cuDNN and plain), in the background while the tests run  240 s
#   test_train_gpu           mds-train on the GPU against the CPU, bf16 / fp16, GPU checkpoints    180 s
#   bench-124M   bench/gpu: GPT-2 124M, batch 16 x 4 x 1024 tokens, 30 steps, 4 implementations 200 s
#   bench-1.5B   bench/gpu: GPT-2 1.5B, batch 8 x 2 x 1024 tokens, 12 steps, torch.compile per block 230 s
#   test_train_gpu_parallel  Gloo TP=2 / PP=2 sharing the GPU; NCCL TP / PP / DP = 2 with two GPUs or
#              more; with one GPU only that two NCCL ranks on it are refused up front             180 s
#   (other tests/gpu/test_*.py, if any: 180 s each)
# Budget: MDS_GPU_BUDGET_S (default 540 s = 9 minutes) for all of it, so that the device tool's 600 s command
# limit is not reached: a step gets at most what is left, and none starts with under 20 s left (it is recorded as
# skipped). On an H200 the steps above take about 40 + 60 + 110 + 140 + 40 s, the build overlapping the tests.
#
# Results: $OUT/summary.md (the step table, the GPU, both benchmark tables, the tests' last lines), results-*.json
# (bench/gpu's numbers), logs.tar.gz (every log); with MDS_GPU_PLAN=variants, trace-124M.json.gz and
# trace-124M-all.json.gz (the 124M profiles' traces, each where it is 16 MiB or less gzipped). The device tool
# returns at most 8 files from $OUT.
# Exit status: 0 when every step passed or was skipped for want of hardware, 1 when one failed, 2 when a packed
# binary does not resolve.
#
# Environment: OUT (default /tmp/mds-gpu-out); MDS_GPU_PYTHON (default python3); MDS_GPU_BUDGET_S;
# MDS_GPU_TORCH_LIB_DIRS (colon-separated library folders instead of python3's torch: the pack's own test uses a
# relocated copy); MDS_GPU_PACK_DRY=1: a CPU-only rehearsal (no nvidia-smi, no llm.c GPU build, bench/gpu at its
# toy size on the CPU with MDS_GPU_PACK_IMPLS, default mds,eager,compile,llmc) so this script's logic runs anywhere.
# MDS_GPU_MDS_ARGS="...": mds-train flags for its row of the benchmarks above (bench-124M, bench-1.5B; the dry run's
# bench-toy too), e.g. the fusions the variants plan found correct and faster, to set them against llm.c, PyTorch
# eager and torch.compile in one run; the tables' mds-train row names them.
# MDS_GPU_PLAN=variants: instead of the steps above after test_train_gpu, mds-train's variants beside PyTorch
# eager at both sizes (--cross-entropy-loss-fusion, --adam-step-fusion, --layernorm-backward-fusion,
# --bias-grad-fusion, no timers, its profile, --attention-backend flash, ALiBi; see the plan below), the four
# fusions beside llm.c too (its build overlaps the tests as above): up to 10 minutes. MDS_GPU_VARIANTS="NAME ...":
# only the variants named (v124M, v124M-ce-fusion, v124M-fusions, v124M-profile, v1.5B, v1.5B-fusions,
# v124M-timing0, v124M-flash-attention, v124M-alibi, v1.5B-profile, v124M-grad-acc-fusion, v1.5B-grad-acc-fusion,
# v124M-residual-ln-fusion, v124M-gelu-epilogue, v1.5B-gelu-epilogue, v124M-all-fusions, v1.5B-all-fusions,
# v124M-all-fusions-profile, v1.5B-fusions-profile; test_train_gpu_parallel too, which the variants plan otherwise
# leaves out).
set -uo pipefail
pack=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/mds-gpu-out}
dry=${MDS_GPU_PACK_DRY:-0}
py=${MDS_GPU_PYTHON:-python3}
budget=${MDS_GPU_BUDGET_S:-540}
plan=${MDS_GPU_PLAN:-full}
mkdir -p "$out"
chmod +x "$pack"/bin/* 2>/dev/null  # in case the copy to this machine dropped the mode bits
scratch=$(mktemp -d /tmp/mds-gpu-run.XXXXXX)
logs=$scratch/logs
work=$scratch/work
mkdir -p "$logs" "$work"
start=$(date +%s)
steps=()      # "name|status|seconds|note" rows of the summary
failed=0

elapsed() { echo $(( $(date +%s) - start )); }
record() { steps+=("$1|$2|$3|$4"); echo "run.sh: $1: $2 ($3 s)${4:+ — $4}"; }

# run_step NAME LIMIT_S CMD...: runs CMD under timeout with its output in $logs/NAME.log, records the outcome.
run_step() {
  local name=$1 limit=$2; shift 2
  local left=$(( budget - $(elapsed) ))
  if (( left < 20 )); then record "$name" skipped 0 "out of time (budget $budget s)"; return 0; fi
  (( limit > left )) && limit=$left
  local t0; t0=$(date +%s)
  timeout -k 10 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$? dt=$(( $(date +%s) - t0 ))
  case $rc in
    0) record "$name" ok "$dt" "";;
    77) record "$name" skipped "$dt" "$(grep -m1 '^SKIP' "$logs/$name.log")";;
    3) record "$name" partial "$dt" "$(grep '^bench/gpu: summary' "$logs/$name.log" | tail -n 1 | cut -c1-200)";;
    124|137) record "$name" timeout "$dt" "killed after $limit s"; failed=1;;
    *) record "$name" failed "$dt" "exit $rc: $(grep -E '^FAIL|^bench/gpu: summary|rror' "$logs/$name.log" | tail -n 1 | cut -c1-200)"; failed=1;;
  esac
  return 0
}

finish() {
  local status=$1
  {
    echo "# mds GPU run — $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Pack: $pack ($(du -sh "$pack" | cut -f1)); host $(hostname), $(nproc) cores; python $("$py" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null); torch ${torch_version:-?}; budget $budget s, used $(elapsed) s$([[ $dry == 1 ]] && echo '; DRY RUN (CPU only)')"
    echo
    if [[ -s $logs/gpu.log ]]; then
      echo '```'; grep -E 'NVIDIA-SMI|Driver Version|H100|H200|GPU ' "$logs/gpu.log" | head -n 8; echo '```'; echo
      echo "GPUs: ${gpus:-?}. ${gpu_note:-}"; echo
    fi
    echo "| step | status | seconds | note |"
    echo "| --- | --- | ---: | --- |"
    for s in "${steps[@]}"; do IFS='|' read -r n st sec note <<<"$s"; echo "| $n | $st | $sec | $note |"; done
    for t in "$logs"/*/table.md; do
      [[ -f $t ]] || continue
      echo; cat "$t"
      # mds-train's own notes: the attention kernel, the profiler's summary (--mds-args --profile ...)
      m=$(dirname "$t")/mds.log
      [[ -f $m ]] && grep -qE 'mds-train: (attention|profiler):' "$m" &&
        { echo; echo '```'; grep -E 'mds-train: (attention|profiler):|^mds-train: error' "$m" | cut -c1-220; echo '```'; }
    done
    for t in "$logs"/test_*.log; do
      [[ -f $t ]] || continue
      echo; echo "$(basename "$t" .log), last lines:"; echo '```'; tail -n 6 "$t"; echo '```'
    done
  } >"$logs/summary.md"
  cp "$logs/summary.md" "$out/summary.md"
  for j in "$logs"/bench-*/results.json; do
    [[ -f $j ]] && cp "$j" "$out/results-$(basename "$(dirname "$j")" | sed 's/^bench-//').json"
  done
  tar -C "$scratch" -czf "$out/logs.tar.gz" logs 2>/dev/null
  # The variants plan's 124M profiles (the four default fusions; all seven): LibTorch's trace of their two
  # iterations (every kernel with its launching operator, for a look in Perfetto or a script), when it fits what
  # the device tool brings back (16 MiB a file).
  for name in 124M 124M-all; do
    for t in "$work"/prof-$name/*.pt.trace.json; do
      [[ -f $t ]] || continue
      gzip -c "$t" >"$out/trace-$name.json.gz"
      (( $(stat -c %s "$out/trace-$name.json.gz") <= 16 * 1024 * 1024 )) || rm -f "$out/trace-$name.json.gz"
    done
  done
  cat "$logs/summary.md"
  rm -rf "$scratch"
  exit "$status"
}

# --- torch -------------------------------------------------------------------------------------------------
torch_version=$("$py" -c 'import torch; print(torch.__version__)' 2>"$logs/torch.log")
if [[ -n ${MDS_GPU_TORCH_LIB_DIRS:-} ]]; then
  torch_libs=$MDS_GPU_TORCH_LIB_DIRS
  record torch ok 0 "MDS_GPU_TORCH_LIB_DIRS=$torch_libs"
else
  torch_dir=$("$py" -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>>"$logs/torch.log")
  if [[ -z $torch_dir || ! -d $torch_dir/lib ]]; then
    record torch failed 0 "$py cannot import torch: $(tail -n 1 "$logs/torch.log")"
    failed=1
    finish 1
  fi
  torch_libs=$torch_dir/lib
  for d in "$(dirname "$torch_dir")"/nvidia/*/lib; do [[ -d $d ]] && torch_libs+=":$d"; done
  record torch ok 0 "torch $torch_version at $torch_dir"
fi
export LD_LIBRARY_PATH="$torch_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >"$logs/env.log"

# --- every packed binary resolves --------------------------------------------------------------------------
check_ldd() {
  local bad=0
  : >"$logs/ldd.log"
  local out
  for b in "$pack"/bin/*; do
    # One ldd per binary, its output matched in memory: `ldd | grep -q` under pipefail fails whenever grep stops
    # reading at the first match before ldd has written everything (SIGPIPE), which let a missing libtorch pass.
    out=$(ldd "$b" 2>&1)
    printf '== %s\n%s\n' "$b" "$out" >>"$logs/ldd.log"
    if [[ $out == *"not found"* ]]; then bad=1; fi
  done
  return $bad
}
if ! check_ldd; then
  # The binaries without an RPATH (mds-tokenizer-train, mds-preprocess) use the machine's libzstd; where the
  # machine lacks a library that lib/ has, lib/ joins LD_LIBRARY_PATH for every process of this run.
  missing=$(grep ' => not found' "$logs/ldd.log" | awk '{print $1}' | sort -u)
  if [[ -n $missing ]] && (for m in $missing; do [[ -e $pack/lib/$m ]] || exit 1; done); then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$pack/lib"
    echo "the machine lacks $(echo $missing): lib/ added" >>"$logs/env.log"
  fi
fi
if ! check_ldd; then
  record ldd failed 0 "unresolved libraries (below)"
  echo "run.sh: these libraries of the packed binaries do not resolve:" >&2
  grep -E '^==|not found' "$logs/ldd.log" | grep -B1 'not found' >&2
  failed=1
  finish 2
fi
record ldd ok 0 "$(ls "$pack"/bin | tr '\n' ' ')resolve"

# --- the GPU --------------------------------------------------------------------------------------------------
gpus=0
if [[ $dry == 1 ]]; then
  record gpu skipped 0 "dry run: no nvidia-smi"
else
  run_step gpu 30 bash -c 'nvidia-smi && nvidia-smi -L'
  gpus=$(grep -c '^GPU [0-9]*:' "$logs/gpu.log" || true)
  if (( gpus < 2 )); then
    gpu_note="With $gpus GPU, test_train_gpu_parallel runs Gloo TP=2 / PP=2 on the GPU and checks that two NCCL ranks on one GPU are refused; its NCCL TP / PP / DP = 2 runs and the hung-stage check need 2 GPUs or more."
  else
    gpu_note="With $gpus GPUs, test_train_gpu_parallel runs NCCL TP / PP / DP = 2$( ((gpus >= 4)) && echo ', TP=2 x PP=2')$( ((gpus >= 8)) && echo ', TP=2 x PP=2 x DP=2') and the hung-stage check."
  fi
fi

# --- llm.c, built in the background while the tests run ----------------------------------------------------------
llmc_pid=
if [[ $dry != 1 ]]; then
  (timeout -k 10 240 "$py" "$pack/bench/gpu/bench.py" --build-llmc-only --device cuda --llmc-build "$work/llmc-build" \
     --work "$work/llmc" --out "$logs/llmc-build" >"$logs/llmc-build.log" 2>&1; echo $? >"$work/llmc-build.rc") &
  llmc_pid=$!
  llmc_t0=$(date +%s)
fi

# --- the gpu tests, then the benchmarks ------------------------------------------------------------------------
test_env=(env MDS_SOURCE_DIR="$pack" MDS_BIN="$pack/bin" MDS_PYTHON="$(command -v "$py")" PYTHONUNBUFFERED=1)
run_test() { run_step "$(basename "$1" .py)" 180 "${test_env[@]}" "$py" "$1"; }
# kernels/'s CUDA kernels against their CPU references first: seconds, and what the fused paths below rest on.
[[ -f $pack/tests/gpu/test_kernels_gpu.py ]] && run_test "$pack/tests/gpu/test_kernels_gpu.py"
[[ -f $pack/tests/gpu/test_train_gpu.py ]] && run_test "$pack/tests/gpu/test_train_gpu.py"

if [[ -n $llmc_pid ]]; then
  wait "$llmc_pid"
  rc=$(cat "$work/llmc-build.rc" 2>/dev/null || echo 1)
  case $rc in
    0) record llmc-build ok $(( $(date +%s) - llmc_t0 )) "$(grep '^llm.c ' "$logs/llmc-build.log" | tr '\n' ' ' | cut -c1-300)";;
    3) record llmc-build skipped $(( $(date +%s) - llmc_t0 )) "$(grep '^llm.c ' "$logs/llmc-build.log" | tr '\n' ' ' | cut -c1-300)";;
    124|137) record llmc-build timeout $(( $(date +%s) - llmc_t0 )) "killed after 240 s"; failed=1;;
    *) record llmc-build failed $(( $(date +%s) - llmc_t0 )) "exit $rc: $(tail -n 2 "$logs/llmc-build.log" | tr '\n' ' ' | cut -c1-200)"; failed=1;;
  esac
fi

bench() {  # bench NAME LIMIT ARGS...
  local name=$1 limit=$2; shift 2
  local left=$(( budget - $(elapsed) ))
  (( limit > left )) && limit=$left
  run_step "$name" "$limit" "$py" "$pack/bench/gpu/bench.py" --work "$work/$name" --out "$logs/$name" \
    --llmc-build "$work/llmc-build" --budget $(( limit > 15 ? limit - 15 : 1 )) "$@"
}
# MDS_GPU_PLAN=variants: after the gpu tests, mds-train's variants beside PyTorch eager (no torch.compile), in the
# order of what they decide, since the budget may end the list: the default (LibTorch 2.11 picks cuDNN's attention
# on an H200; the four fusions are on by default on a GPU since 2026-11-30), the fused cross entropy, all four fusions (cross entropy, Adam step, LayerNorm backward, bias
# gradients) beside llm.c (built during the tests: the issue's goal, mds >= llm.c, in the same call), the profile
# with them at 124M (kernels by time, host synchronisations; its trace comes back as trace-124M.json.gz), 1.5B
# without and with them (beside llm.c), no timers (--timing-log-level 0), FlashAttention instead, ALiBi, the 1.5B
# profile; the tables and mds-train's attention and profiler lines in summary.md.
if [[ $plan == variants && $dry != 1 ]]; then
  # MDS_GPU_VARIANTS="v124M-fusions v1.5B-fusions": those variants alone (a rerun spends the lease on what is new).
  vbench() {
    [[ -z ${MDS_GPU_VARIANTS:-} || " $MDS_GPU_VARIANTS " == *" $1 "* ]] || return 0
    bench "$@"
  }
  # MDS_GPU_VARIANTS may name test_train_gpu_parallel too: run first (the fusions, on by default, under TP / PP).
  [[ " ${MDS_GPU_VARIANTS:-} " == *" test_train_gpu_parallel "* && -f $pack/tests/gpu/test_train_gpu_parallel.py ]] &&
    run_test "$pack/tests/gpu/test_train_gpu_parallel.py"
  prof="--profile --use-pytorch-profiler --tensorboard-dir $work/prof"
  prof124="--profile --use-pytorch-profiler --tensorboard-dir $work/prof-124M"
  vbench v124M 150 --size 124M --device cuda --impls mds,eager --timeout 100
  # kernels/cross_entropy.cu instead of ATen's fp32 copy, log-softmax and NLL (25.8 of 177 ms per step on an H200).
  vbench v124M-ce-fusion 60 --size 124M --device cuda --impls mds --timeout 45 --mds-args=--cross-entropy-loss-fusion
  # and kernels/adam.cu's step (bf16 gradients straight into the fp32 masters; 40 of 416 ms at 1.5B unfused) and
  # kernels/layer_norm.cu's backward (ATen's weight gradients of LayerNorm: 7.7 of 177 ms at 124M) and
  # kernels/bias_grad.cu's bias gradients (ATen's column reductions: 7.0 of 177 ms at 124M).
  fusions="--cross-entropy-loss-fusion --adam-step-fusion --layernorm-backward-fusion --bias-grad-fusion"
  vbench v124M-fusions 100 --size 124M --device cuda --impls mds,llmc --llmc-prebuilt --timeout 45 --mds-args "$fusions"
  # Where the time goes with them: the kernels by time, and the trace (trace-124M.json.gz), for the next kernels.
  vbench v124M-profile 60 --size 124M --device cuda --impls mds --steps 12 --warmup 4 --timeout 50 \
    --mds-args "$fusions $prof124 --profile-step-start 6 --profile-step-end 8"
  vbench v1.5B 150 --size 1.5B --device cuda --impls mds,eager --timeout 70
  vbench v1.5B-fusions 120 --size 1.5B --device cuda --impls mds,llmc --llmc-prebuilt --timeout 60 --mds-args "$fusions"
  # No timers in the step (--timing-log-level 0, Megatron-LM's default): none of their 32 device waits per iteration.
  vbench v124M-timing0 60 --size 124M --device cuda --impls mds --timeout 45 --mds-args "$fusions --timing-log-level 0"
  vbench v124M-flash-attention 70 --size 124M --device cuda --impls mds --timeout 45 --mds-args "--attention-backend flash"
  vbench v124M-alibi 70 --size 124M --device cuda --impls mds --timeout 45 \
    --mds-args "--position-embedding-type alibi $prof --profile-step-start 26 --profile-step-end 28"
  vbench v1.5B-profile 70 --size 1.5B --device cuda --impls mds --steps 8 --warmup 3 --timeout 60 \
    --mds-args "$prof --profile-step-start 4 --profile-step-end 6"
  # --gradient-accumulation-fusion (off by default until measured): the Linear weights' products straight into the
  # fp32 main gradients (their 592 adds per iteration: 3.5 of 136 ms at 124M, 15 of 364 ms at 1.5B, 2026-11-30).
  vbench v124M-grad-acc-fusion 60 --size 124M --device cuda --impls mds --timeout 45 \
    --mds-args=--gradient-accumulation-fusion
  vbench v1.5B-grad-acc-fusion 80 --size 1.5B --device cuda --impls mds --timeout 60 \
    --mds-args=--gradient-accumulation-fusion
  # --residual-layernorm-fusion (off by default until measured): each residual sum and the LayerNorm after it in one
  # kernel (bf16 residual adds 3.5 and ATen's LayerNorm forward 3.7 of 136 ms at 124M, 2026-11-30).
  vbench v124M-residual-ln-fusion 60 --size 124M --device cuda --impls mds --timeout 45 \
    --mds-args=--residual-layernorm-fusion
  # --gelu-epilogue-fusion (off by default until measured): the MLP's GeLU and its derivative inside cuBLASLt's
  # products (GeLU forward and backward: 6.5 of 136 ms at 124M, 2026-11-30).
  vbench v124M-gelu-epilogue 60 --size 124M --device cuda --impls mds --timeout 45 --mds-args=--gelu-epilogue-fusion
  vbench v1.5B-gelu-epilogue 80 --size 1.5B --device cuda --impls mds --timeout 60 --mds-args=--gelu-epilogue-fusion
  # Everything together beside llm.c: the four default fusions and the three opt-in ones.
  optin="--gradient-accumulation-fusion --residual-layernorm-fusion --gelu-epilogue-fusion"
  vbench v124M-all-fusions 100 --size 124M --device cuda --impls mds,llmc --llmc-prebuilt --timeout 45 --mds-args "$optin"
  vbench v1.5B-all-fusions 120 --size 1.5B --device cuda --impls mds,llmc --llmc-prebuilt --timeout 60 --mds-args "$optin"
  # Where the time goes with all seven (its trace comes back as trace-124M-all.json.gz).
  prof124all="--profile --use-pytorch-profiler --tensorboard-dir $work/prof-124M-all"
  vbench v124M-all-fusions-profile 60 --size 124M --device cuda --impls mds --steps 12 --warmup 4 --timeout 50 \
    --mds-args "$optin $prof124all --profile-step-start 6 --profile-step-end 8"
  # What is left at 1.5B with the four fusions.
  vbench v1.5B-fusions-profile 70 --size 1.5B --device cuda --impls mds --steps 8 --warmup 3 --timeout 60 \
    --mds-args "$fusions $prof --profile-step-start 4 --profile-step-end 6"
  finish "$failed"
fi
mds_args=()
[[ -n ${MDS_GPU_MDS_ARGS:-} ]] && mds_args=("--mds-args=$MDS_GPU_MDS_ARGS")  # "=": argparse takes a lone "--flag" value for an option
if [[ $dry == 1 ]]; then
  bench bench-toy 240 --size toy --device cpu --impls "${MDS_GPU_PACK_IMPLS:-mds,eager,compile,llmc}" --timeout 150 \
    "${mds_args[@]}"
else
  bench bench-124M 200 --size 124M --device cuda --timeout 120 --llmc-prebuilt "${mds_args[@]}"
  bench bench-1.5B 230 --size 1.5B --device cuda --compile-scope block --timeout 150 --llmc-prebuilt "${mds_args[@]}"
fi

[[ -f $pack/tests/gpu/test_train_gpu_parallel.py ]] && run_test "$pack/tests/gpu/test_train_gpu_parallel.py"
for t in "$pack"/tests/gpu/test_*.py; do
  case $(basename "$t") in test_kernels_gpu.py|test_train_gpu.py|test_train_gpu_parallel.py) continue;; esac
  run_test "$t"
done

finish "$failed"
