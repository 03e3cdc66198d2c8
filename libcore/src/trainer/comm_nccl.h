// NCCL process groups for the CUDA tensors of a parallel training (c10d::ProcessGroupNCCL, as
// torch.distributed builds them for backend='nccl'). Only comm_nccl.cpp sees the NCCL and CUDA
// headers; it is compiled against a CUDA build of LibTorch (MDS_HAVE_NCCL), and elsewhere every
// function below except available() throws mds::Error saying NCCL is not in this build.
#pragma once

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <vector>

namespace mds::trainer::nccl {

// Whether this build of mds has NCCL (LibTorch was a CUDA build).
bool available();

// The number of CUDA devices this process sees (0 without a driver).
int device_count();

// Makes `device` the current CUDA device of this process (NCCL's streams and batched transfers use it).
void set_device(c10::Device device);

// One NCCL process group of `size` members, this process being member `rank`, rendezvous through
// `store`; its communicator is created now (all members call this together) on `device`. `timeout`
// bounds NCCL's own watchdog.
c10::intrusive_ptr<c10d::Backend> make_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                             const std::vector<int>& global_ranks, std::chrono::milliseconds timeout,
                                             c10::Device device);

}  // namespace mds::trainer::nccl
