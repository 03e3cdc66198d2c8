#!/usr/bin/env bash
# Installs what is missing and runs the whole test suite on this machine: scripts/setup.sh's phases
# (the sanitizer build compiles while pip fills .venv), then the unit, integration and cross-check
# tests of the main build (gpu tests too where a GPU is present), the sanitizer build's unit and
# integration tests (ASan + UBSan) and short libFuzzer runs of every parser. Ends with one line
# "tests: N passed, N failed, N skipped" summing every ctest run.
#   MDS_TEST_SANITIZE=0   skip the sanitizer build      MDS_TEST_FUZZ=0   skip fuzzing
#   MDS_FUZZ_SECONDS=N    seconds per fuzz target (default 20)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${MDS_BUILD_DIR:-build}
if [[ "${CI:-}" == true ]]; then export MDS_CMAKE_ARGS="${MDS_CMAKE_ARGS:-} -DMDS_WERROR=ON"; fi
setup_failed() { echo "tests: setup failed"; echo "tests: 0 passed, 1 failed"; exit 1; }
logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT

# scripts/setup.sh in its three phases, with the sanitizer build (clang, no LibTorch) compiling while pip
# fills .venv: on a fresh machine pip is mostly a download on one core, and the main build needs its torch.
bash scripts/setup.sh system || setup_failed
bash scripts/setup.sh python > "$logdir/python.log" 2>&1 &
python_pid=$!
if [[ "${MDS_TEST_SANITIZE:-1}" != 0 || "${MDS_TEST_FUZZ:-1}" != 0 ]]; then
  # A failure here shows again, and is counted, in the sanitize or fuzz step below.
  bash scripts/sanitize.sh --build-only || echo "tests: the sanitizer build failed (the sanitize step repeats it)" >&2
fi
wait "$python_pid"; python_rc=$?
cat "$logdir/python.log" >&2
[[ $python_rc == 0 ]] || setup_failed
bash scripts/setup.sh build || setup_failed
passed=0 failed=0 skipped=0 status=0

# step NAME COMMAND...: runs a command that runs ctest, adds the counts of ctest's closing line
# ("N% tests passed, F tests failed out of T") to the totals.
step() {
  local name=$1; shift
  echo "== $name: $*" >&2
  "$@" 2>&1 | tee "$logdir/$name.log"
  local rc=${PIPESTATUS[0]}
  local line total nfail nskip
  line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$logdir/$name.log" | tail -n 1)
  if [[ -z "$line" ]]; then
    echo "tests: $name reported no results (exit $rc)" >&2
    failed=$((failed + 1)); status=1; return
  fi
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  nfail=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$line")
  nskip=$(grep -cE "\(Skipped\)$" "$logdir/$name.log")
  passed=$((passed + total - nfail - nskip)); failed=$((failed + nfail)); skipped=$((skipped + nskip))
  if [[ $rc -ne 0 ]]; then status=1; fi
}

exclude='gpu|fuzz'
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then exclude='fuzz'; fi
# One test more than cores: the tests wait too (Python starting, ranks meeting, timeouts they provoke), and at
# -j nproc the 2-core machine idled 6% of the run (1,642 s); at -j nproc+1 0.7% (1,479 s, 2026-11-30).
step main ctest --test-dir "$build" --output-on-failure -j "$(($(nproc) + 1))" -LE "$exclude"
[[ "${MDS_TEST_SANITIZE:-1}" != 0 ]] && step sanitize bash scripts/sanitize.sh
[[ "${MDS_TEST_FUZZ:-1}" != 0 ]] && step fuzz bash scripts/fuzz.sh "${MDS_FUZZ_SECONDS:-20}"

echo "tests: $passed passed, $failed failed, $skipped skipped"
exit $status
