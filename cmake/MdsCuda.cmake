# The CUDA path. MDS_CUDA=AUTO turns it on when LibTorch is a CUDA build and a GPU driver is present
# at configure time. The CUDA language is enabled (nvcc from /usr/local/cuda/bin, CUDA_HOME or PATH)
# on the CUDA path, and wherever LibTorch is a CUDA build and nvcc exists, for LibTorch's CMake.
# kernels/ compiles its CUDA sources wherever the CUDA language is enabled (kernels/README.md).
set(MDS_CUDA_ENABLED OFF)
find_program(MDS_NVCC nvcc HINTS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
if(MDS_CUDA STREQUAL "ON")
  set(MDS_CUDA_ENABLED ON)
elseif(MDS_CUDA STREQUAL "AUTO" AND MDS_TORCH_CUDA AND EXISTS "/dev/nvidiactl")
  set(MDS_CUDA_ENABLED ON)
endif()
# Torch's CMake enables CUDA itself for CUDA builds of LibTorch; nvcc takes C++17 at most here.
set(CMAKE_CUDA_STANDARD 17)
if(MDS_CUDA_ENABLED OR (MDS_TORCH_CUDA AND MDS_NVCC))
  if(NOT MDS_NVCC)
    message(FATAL_ERROR "mds: nvcc not found (set CUDACXX or put /usr/local/cuda/bin on PATH)")
  endif()
  set(CMAKE_CUDA_COMPILER "${MDS_NVCC}")
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)
endif()
message(STATUS "mds: CUDA path ${MDS_CUDA_ENABLED}")
