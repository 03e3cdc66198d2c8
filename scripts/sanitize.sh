#!/usr/bin/env bash
# Builds everything with clang, AddressSanitizer + UBSan into build-asan/ (the tree scripts/fuzz.sh
# uses too: scripts/sanitizer-common.sh) and runs the unit and integration tests there:
# ctest -L 'unit|integration'. Leaks are errors, and so is any undefined behaviour (MDS_SANITIZE
# builds with -fno-sanitize-recover=all).
#   scripts/sanitize.sh            configure, build, test
#   scripts/sanitize.sh --build-only   configure and build (scripts/test.sh: while pip installs .venv)
#   MDS_ASAN_BUILD_DIR=dir ...     build somewhere else
#   MDS_CMAKE_ARGS="..." ...       more configure arguments (e.g. -DMDS_WERROR=ON)
#   MDS_JOBS=n ...                 parallel build and test jobs (default: nproc)
# LibTorch is left out (-DMDS_TORCH=OFF): it is not instrumented, its CUDA runtime and ASan's shadow
# memory get in each other's way, and what these runs check is mds's own code.
# The exit status is non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${MDS_JOBS:-$(nproc)}
if (($# > 1)) || [[ $# == 1 && $1 != --build-only ]]; then
  echo "usage: scripts/sanitize.sh [--build-only]" >&2
  exit 2
fi

source scripts/sanitizer-common.sh  # the working directory is the repository root
build=$instrumented_build

start=$SECONDS
configure_instrumented
run cmake --build "$build" -j "$jobs"
build_s=$((SECONDS - start))
if [[ ${1:-} == --build-only ]]; then
  echo "sanitize.sh: build ${build_s}s" >&2
  exit 0
fi

status=0
run env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$build" -L 'unit|integration' -j "$jobs" --no-tests=error --output-on-failure || status=$?
echo "sanitize.sh: build ${build_s}s, total $((SECONDS - start))s; exit $status" >&2
exit "$status"
