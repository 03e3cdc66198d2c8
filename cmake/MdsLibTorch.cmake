# LibTorch comes with the torch Python package in the checkout's virtual environment (.venv), found
# through torch.utils.cmake_prefix_path. Only areas that need tensors link it (libcore/README.md);
# data preprocessing, the watchdog and the uploader never do. Sets MDS_HAVE_TORCH and MDS_TORCH_CUDA.
set(MDS_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH "Python of the virtual environment")
set(MDS_HAVE_TORCH OFF)
set(MDS_TORCH_CUDA OFF)
option(MDS_TORCH "Look for LibTorch" ON)
if(MDS_TORCH AND EXISTS "${MDS_PYTHON}")
  execute_process(
    COMMAND "${MDS_PYTHON}" -c "import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(int(torch.version.cuda is not None))"
    OUTPUT_VARIABLE _mds_torch_out RESULT_VARIABLE _mds_torch_rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_mds_torch_rc EQUAL 0)
    string(REPLACE "\n" ";" _mds_torch_lines "${_mds_torch_out}")
    list(GET _mds_torch_lines 0 MDS_TORCH_PREFIX)
    list(GET _mds_torch_lines 1 MDS_TORCH_VERSION)
    list(GET _mds_torch_lines 2 _mds_torch_has_cuda)
    set(MDS_HAVE_TORCH ON)
    if(_mds_torch_has_cuda)
      set(MDS_TORCH_CUDA ON)
    endif()
    message(STATUS "mds: LibTorch ${MDS_TORCH_VERSION} at ${MDS_TORCH_PREFIX} (CUDA build: ${MDS_TORCH_CUDA})")
  else()
    message(STATUS "mds: ${MDS_PYTHON} has no torch; building without LibTorch")
  endif()
else()
  message(STATUS "mds: no virtual environment at ${MDS_PYTHON}; building without LibTorch (run scripts/setup.sh)")
endif()

# Called by areas that need tensors; finds Torch lazily so tools that need none configure fast.
macro(mds_find_torch)
  if(NOT MDS_HAVE_TORCH)
    message(FATAL_ERROR "mds: this target needs LibTorch; run scripts/setup.sh")
  endif()
  if(NOT TARGET torch)
    list(APPEND CMAKE_PREFIX_PATH "${MDS_TORCH_PREFIX}")
    find_package(Torch REQUIRED)
  endif()
endmacro()
