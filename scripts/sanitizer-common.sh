# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: what their instrumented builds share.
# run CMD...: prints the command, then runs it.
run() {
  echo "+ $*" >&2
  "$@"
}
# Debug keeps assert(); -O1 (what the sanitizer docs advise) and line tables only (-g1, enough for
# symbolized stack traces) build about 2.5x faster than -O2 -g, most of all the CLI11 mains.
sanitizer_build_type=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" "-DCMAKE_C_FLAGS_DEBUG=-O1 -g1")
# No LibTorch, no nvcc, no benchmarks: these builds check mds's own code.
sanitizer_common_args=(-DMDS_SANITIZE=address,undefined -DMDS_TORCH=OFF -DMDS_BENCH=OFF)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
