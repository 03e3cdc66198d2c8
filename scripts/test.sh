#!/usr/bin/env bash
# Runs the whole test suite on this machine: unit, integration and cross-check tests of the main
# build; gpu tests where a GPU is present; then the sanitizer build (ASan + UBSan) and short
# libFuzzer runs of every parser. Prints one closing line "tests: N passed, N failed, N skipped".
#   MDS_TEST_SANITIZE=0   skip the sanitizer build      MDS_TEST_FUZZ=0   skip fuzzing
#   MDS_FUZZ_SECONDS=N    seconds per fuzz target (default 20)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${MDS_BUILD_DIR:-build}
if [[ "${CI:-}" == true ]]; then export MDS_CMAKE_ARGS="${MDS_CMAKE_ARGS:-} -DMDS_WERROR=ON"; fi
bash scripts/setup.sh || { echo "tests: setup failed"; exit 1; }

logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT
passed=0 failed=0 skipped=0 status=0

# run_ctest NAME DIR [ctest args...]: runs ctest and adds its counts to the totals.
run_ctest() {
  local name=$1 dir=$2; shift 2
  echo "== $name: ctest $*" >&2
  ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" "$@" 2>&1 | tee "$logdir/$name.log"
  local rc=${PIPESTATUS[0]}
  local line total nfail nskip
  line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$logdir/$name.log" | tail -n 1)
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line"); nfail=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$line")
  nskip=$(grep -cE "\(Skipped\)$" "$logdir/$name.log")
  if [[ -z "$line" ]]; then
    if grep -q "No tests were found" "$logdir/$name.log"; then return 0; fi
    echo "tests: $name: ctest did not report results" >&2; status=1; failed=$((failed + 1)); return
  fi
  passed=$((passed + total - nfail - nskip)); failed=$((failed + nfail)); skipped=$((skipped + nskip))
  [[ $rc -ne 0 ]] && status=1
}

labels_exclude=gpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then labels_exclude='^$'; fi
run_ctest main "$build" -LE "$labels_exclude|fuzz"

if [[ "${MDS_TEST_SANITIZE:-1}" != 0 ]]; then
  if bash scripts/sanitize.sh --build-only; then
    run_ctest sanitize "${MDS_ASAN_BUILD_DIR:-build-asan}" -L 'unit|integration'
  else
    echo "tests: sanitizer build failed" >&2; status=1; failed=$((failed + 1))
  fi
fi
if [[ "${MDS_TEST_FUZZ:-1}" != 0 ]]; then
  if bash scripts/fuzz.sh --build-only; then
    run_ctest fuzz "${MDS_FUZZ_BUILD_DIR:-build-fuzz}" -L fuzz -j 1
  else
    echo "tests: fuzz build failed" >&2; status=1; failed=$((failed + 1))
  fi
fi

echo "tests: $passed passed, $failed failed, $skipped skipped"
exit $status
