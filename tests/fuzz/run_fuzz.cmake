# Runs one libFuzzer target for a bounded time on a working copy of its seed corpus (ctest -L fuzz).
#   cmake -DFUZZER=<binary> -DSEEDS=<seed dir> -DWORK=<dir in the build tree> -DSECONDS=<n>
#         [-DDICT=<libFuzzer dictionary>] -P run_fuzz.cmake
# The environment variable MDS_FUZZ_SECONDS overrides SECONDS. The full log is WORK/fuzz.log; a
# crashing input is saved under WORK/artifacts/ and the test fails with the end of the log.
if(DEFINED ENV{MDS_FUZZ_SECONDS})
  set(SECONDS $ENV{MDS_FUZZ_SECONDS})
endif()
if(NOT SECONDS MATCHES "^[0-9]+$" OR SECONDS EQUAL 0)
  message(FATAL_ERROR "run_fuzz: MDS_FUZZ_SECONDS must be a positive whole number, got '${SECONDS}'")
endif()

# New inputs found by earlier runs stay in WORK/corpus; the seeds are copied over them each time.
file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/artifacts)
file(GLOB seeds ${SEEDS}/*)
file(COPY ${seeds} DESTINATION ${WORK}/corpus)

set(args ${WORK}/corpus -max_total_time=${SECONDS} -rss_limit_mb=2048 -timeout=25
         -print_final_stats=1 -artifact_prefix=${WORK}/artifacts/)
if(DICT)
  list(APPEND args -dict=${DICT})
endif()
list(JOIN args " " shown)
message("run_fuzz: ${FUZZER} ${shown}")
math(EXPR limit "${SECONDS} * 2 + 120")
execute_process(COMMAND ${FUZZER} ${args} RESULT_VARIABLE rc
                OUTPUT_FILE ${WORK}/fuzz.log ERROR_FILE ${WORK}/fuzz.log TIMEOUT ${limit})

# The log is read as one string: its lines hold brackets and semicolons, which CMake lists mangle.
file(READ ${WORK}/fuzz.log log)
string(REGEX MATCHALL "#[0-9]+[ \t]+(INITED|DONE)[^\n]*|stat::[^\n]*|mds-fuzz: skipped[^\n]*" summary "${log}")
string(REPLACE ";" "\n" summary "${summary}")
message("${summary}")
if(NOT rc STREQUAL "0")
  string(LENGTH "${log}" n)
  if(n GREATER 8000)
    math(EXPR from "${n} - 8000")
    string(SUBSTRING "${log}" ${from} -1 log)
  endif()
  file(GLOB crashes ${WORK}/artifacts/*)
  message("${log}")
  message(FATAL_ERROR "run_fuzz: ${FUZZER} failed (${rc}); full log: ${WORK}/fuzz.log; saved inputs: ${crashes}")
endif()
