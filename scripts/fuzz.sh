#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, AddressSanitizer and UBSan into build-asan/
# (the tree scripts/sanitize.sh builds and tests: scripts/sanitizer-common.sh), then runs each for a
# bounded time: ctest -L fuzz.
#   scripts/fuzz.sh [SECONDS]     seconds per target (default: $MDS_FUZZ_SECONDS, else 20)
#   MDS_ASAN_BUILD_DIR=dir ...    build somewhere else
#   MDS_JOBS=n ...                parallel build jobs and fuzz targets run at once (default: nproc)
# A crash leaves its input in build-asan/tests/fuzz/work/fuzz_<name>/artifacts/; the exit status is
# non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-${MDS_FUZZ_SECONDS:-20}}
jobs=${MDS_JOBS:-$(nproc)}
if [[ ! $seconds =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: usage: scripts/fuzz.sh [SECONDS]  (a positive whole number, got '$seconds')" >&2
  exit 2
fi
export MDS_FUZZ_SECONDS=$seconds

source scripts/sanitizer-common.sh  # the working directory is the repository root
build=$instrumented_build

start=$SECONDS
configure_instrumented
run cmake --build "$build" -j "$jobs" --target mds_fuzz
build_s=$((SECONDS - start))

# libFuzzer stops at the first crash or leak; UBSan findings abort (-fno-sanitize-recover=all).
status=0
rm -f "$build"/tests/fuzz/work/fuzz_*/fuzz.log
run env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$build" -L fuzz -j "$jobs" --no-tests=error --output-on-failure || status=$?

# One line per target: coverage, features, corpus and speed at the end of its run.
for log in "$build"/tests/fuzz/work/fuzz_*/fuzz.log; do
  [[ -f $log ]] || continue
  name=$(basename "$(dirname "$log")")
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)
  execs=$(grep -E '^stat::number_of_executed_units:' "$log" | awk '{print $2}' || true)
  echo "fuzz.sh: $name: ${done_line:-no DONE line (crashed or skipped)} execs: ${execs:-?}" >&2
done
echo "fuzz.sh: build ${build_s}s, total $((SECONDS - start))s, ${seconds}s per target; exit $status" >&2
exit "$status"
