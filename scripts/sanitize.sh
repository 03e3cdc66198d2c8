#!/usr/bin/env bash
# Builds everything with AddressSanitizer + UBSan into build-asan/ and runs the unit and
# integration tests there: ctest -L 'unit|integration'. Leaks are errors, and so is any undefined
# behaviour (MDS_SANITIZE builds with -fno-sanitize-recover=all).
#   scripts/sanitize.sh            gcc (the default compiler); CC/CXX in the environment are honoured
#   MDS_ASAN_BUILD_DIR=dir ...     build somewhere else
#   MDS_CMAKE_ARGS="..." ...       more configure arguments (e.g. -DMDS_TORCH=ON)
#   MDS_JOBS=n ...                 parallel build and test jobs (default: nproc)
# LibTorch is left out by default (-DMDS_TORCH=OFF): it is not instrumented, its CUDA runtime and
# ASan's shadow memory get in each other's way, and what these runs check is mds's own code.
# The exit status is non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MDS_ASAN_BUILD_DIR:-build-asan}
jobs=${MDS_JOBS:-$(nproc)}

source scripts/sanitizer-common.sh  # the working directory is the repository root

start=$SECONDS
# shellcheck disable=SC2086  # MDS_CMAKE_ARGS is a list of words
run cmake -S . -B "$build" "${generator[@]}" "${sanitizer_build_type[@]}" \
  "${sanitizer_common_args[@]}" ${MDS_CMAKE_ARGS:-}
run cmake --build "$build" -j "$jobs"
build_s=$((SECONDS - start))

status=0
run env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$build" -L 'unit|integration' -j "$jobs" --no-tests=error --output-on-failure || status=$?
echo "sanitize.sh: build ${build_s}s, total $((SECONDS - start))s; exit $status" >&2
exit "$status"
