# -DMDS_SANITIZE=address,undefined builds everything with those sanitizers; undefined behaviour aborts.
if(MDS_SANITIZE)
  add_compile_options(-fsanitize=${MDS_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${MDS_SANITIZE})
endif()
# -DMDS_FUZZ=ON (clang only): every target gets libFuzzer's coverage instrumentation, so that the
# fuzz targets in tests/fuzz see the branches inside libcore, not only their own.
if(MDS_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "mds: MDS_FUZZ needs clang (configure with CC=clang CXX=clang++)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
  add_link_options(-fsanitize=fuzzer-no-link)
endif()
