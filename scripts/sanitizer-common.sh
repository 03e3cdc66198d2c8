# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: the one instrumented build both use.
# clang, AddressSanitizer + UBSan, and libFuzzer's coverage instrumentation (MDS_FUZZ=ON) in one tree,
# build-asan/: the sanitizer tests and the fuzz targets share every object, so the suite compiles
# mds twice (main and instrumented), not three times. clang also builds these -O1 objects about 1.4x
# faster than gcc. Both scripts configure it with the same arguments, so whichever runs second
# rebuilds nothing it does not need.
# run CMD...: prints the command, then runs it.
run() {
  echo "+ $*" >&2
  "$@"
}
instrumented_build=${MDS_ASAN_BUILD_DIR:-build-asan}
# Debug keeps assert(); -O1 (what the sanitizer docs advise) and line tables only (-g1, enough for
# symbolized stack traces) build about 2.5x faster than -O2 -g, most of all the CLI11 mains.
# No LibTorch, no nvcc, no benchmarks: this build checks mds's own code.
# configure_instrumented: configures $instrumented_build (MDS_CMAKE_ARGS: more arguments, e.g. -DMDS_WERROR=ON).
configure_instrumented() {
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  if ! command -v clang++ >/dev/null; then
    echo "$(basename "$0"): clang++ is needed (Debian: apt-get install clang libclang-rt-dev)" >&2
    return 1
  fi
  local cache=$instrumented_build/CMakeCache.txt
  if [[ -f $cache ]] && ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$cache"; then
    echo "$(basename "$0"): $instrumented_build was configured with another compiler: configuring it afresh" >&2
    rm -rf "$cache" "$instrumented_build/CMakeFiles"
  fi
  # shellcheck disable=SC2086  # MDS_CMAKE_ARGS is a list of words
  run env CC=clang CXX=clang++ cmake -S . -B "$instrumented_build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" "-DCMAKE_C_FLAGS_DEBUG=-O1 -g1" \
    -DMDS_SANITIZE=address,undefined -DMDS_FUZZ=ON -DMDS_TORCH=OFF -DMDS_BENCH=OFF ${MDS_CMAKE_ARGS:-}
}
