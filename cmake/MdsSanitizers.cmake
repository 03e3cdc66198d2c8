# -DMDS_SANITIZE=address,undefined builds everything with those sanitizers; undefined behaviour aborts.
if(MDS_SANITIZE)
  add_compile_options(-fsanitize=${MDS_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${MDS_SANITIZE})
endif()
