#include "comm_nccl.h"

#include <cstdlib>

#include "mds/util/error.h"

#ifdef MDS_HAVE_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace mds::trainer::nccl {

#ifdef MDS_HAVE_NCCL

bool available() { return true; }

int device_count() { return static_cast<int>(c10::cuda::device_count()); }

void set_device(c10::Device device) { c10::cuda::set_device(device.index()); }

c10::intrusive_ptr<c10d::Backend> make_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                             const std::vector<int>& global_ranks, std::chrono::milliseconds timeout,
                                             c10::Device device) {
    // NCCL errors (a peer that died, the watchdog's timeout) go to the work, whose wait() rethrows
    // them, rather than tearing the process down from the watchdog thread (torch's default, 3):
    // Communicator then names the rank to blame. A value the user exported wins.
    ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0", 0);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    options->global_ranks_in_group.assign(global_ranks.begin(), global_ranks.end());
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
    // Bound to its device, the group creates its communicator now, over all members, rather than at
    // the first collective: a failure (two ranks on one GPU, an unreachable peer) shows at start-up,
    // and batched point-to-point transfers between two members need it to exist.
    pg->setBoundDeviceId(device);
    pg->eagerConnectSingleDevice(device);
    return pg;
}

#else

namespace {
[[noreturn]] void missing() {
    throw Error("this mds-train was built against a LibTorch without CUDA, so it has no NCCL; use --distributed-backend gloo");
}
}  // namespace

bool available() { return false; }
int device_count() { return 0; }
void set_device(c10::Device) { missing(); }
c10::intrusive_ptr<c10d::Backend> make_group(const c10::intrusive_ptr<c10d::Store>&, int, int, const std::vector<int>&,
                                             std::chrono::milliseconds, c10::Device) {
    missing();
}

#endif

}  // namespace mds::trainer::nccl
