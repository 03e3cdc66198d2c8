// The process groups of a parallel training, on torch.distributed's own engines as LibTorch ships
// them (c10d): a TCPStore rendezvous at MASTER_ADDR:MASTER_PORT held by rank 0, then one Gloo
// process group for the world and one per tensor-, data-, pipeline- and embedding-parallel group
// that holds this rank (dist/layout.h). With --distributed-backend nccl on GPUs each of these groups
// also gets an NCCL process group, which moves the CUDA tensors (activations, gradients, ZeRO's
// gathers, pipeline transfers); Gloo keeps the host-side numbers (loss scaler, norms) and the
// barrier. Without NCCL, Gloo moves CUDA tensors too (through host memory).
//
// A rank that dies or hangs must not leave the others waiting until the SLURM time limit: every
// collective waits at most the timeout (--distributed-timeout-minutes), and when one fails, the
// error names the rank responsible. For that each rank publishes, from a background thread, a
// heartbeat and the number of the collective it is in; the failing rank reads them back: a rank
// whose heartbeat stopped died or was stopped, a live rank behind in the collective count hangs.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mds/dist/launch.h"
#include "mds/dist/layout.h"

namespace mds::trainer {

enum class Group { World, Tensor, Data, Pipeline, Embedding };

// Gradients travel in flat buckets of at most this many bytes: DDP's default bucket_cap_mb (bench/dist).
constexpr std::int64_t kGradientBucketBytes = 25ll << 20;
const char* group_name(Group group);  // "data-parallel", ...

// Cuts `tensors`, in the order given, into buckets: runs of one dtype and device of at most
// `max_bytes` (at least one tensor each). Returns each bucket's [begin, end) in `tensors`.
std::vector<std::pair<std::size_t, std::size_t>> cut_buckets(const std::vector<at::Tensor>& tensors, std::int64_t max_bytes);
// The tensors of a bucket as one flat tensor (a copy), and the flat values written back into them.
at::Tensor flatten(const std::vector<at::Tensor>& tensors);
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& into);

struct CommOptions {
    std::chrono::milliseconds timeout{std::chrono::minutes(10)};
    std::chrono::milliseconds heartbeat{std::chrono::seconds(1)};
    // NCCL groups for CUDA tensors on this device (made the process's current one); none: Gloo only.
    std::optional<c10::Device> nccl_device;
};

// Whether this build has NCCL process groups (LibTorch was a CUDA build).
bool nccl_available();

class Communicator {
public:
    // Joins the rendezvous (rank 0 creates the store) and builds the groups. Throws mds::Error when
    // the store cannot be reached within the timeout, naming the address.
    Communicator(const dist::LaunchInfo& launch, const dist::ParallelLayout& layout, const CommOptions& options);
    // The communicator of a training in one process, so that the trainer always has one: no store,
    // no Gloo, no heartbeat; rank 0 of a world of 1, every group is {0}, coordinates are zeros, and
    // the collectives are identities (a sum or maximum returns its value, all_reduce_sum only
    // applies `scale`, all_gather returns the input, barrier and finish do nothing).
    static std::unique_ptr<Communicator> single_process();
    ~Communicator();
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;

    int rank() const;
    int world_size() const;
    const dist::ParallelLayout& layout() const;
    dist::Coordinates coordinates() const;
    // Members of `group` that hold this rank, as global ranks.
    std::vector<int> members(Group group) const;

    // Sums the tensors over the group, in place (nothing to do for a group of one). Tensors of one
    // dtype and device are flattened into buckets of at most 25 MiB (DDP's default; bench/dist), so
    // a model's gradients travel in a few messages; `scale` multiplies the sums (1 / DP for a mean).
    void all_reduce_sum(const std::vector<at::Tensor>& tensors, Group group, double scale = 1.0);
    // Starts summing one contiguous tensor over the group, in place, without waiting (Gloo runs it on
    // its own threads); the returned function waits for the result and reports a failure as the
    // blocking collectives do. Members must start their collectives on a group in the same order.
    std::function<void()> start_all_reduce_sum(const at::Tensor& flat, Group group);
    // Element-wise maximum of one tensor over the group, in place.
    void all_reduce_max(const at::Tensor& tensor, Group group);
    // The sum of one number over the group, computed in fp64.
    double sum(double value, Group group);
    double max(double value, Group group);
    // Element-wise maxima of a few numbers over the group, in one collective (fp64).
    std::vector<double> max(std::vector<double> values, Group group);

    // Every member's `input` (same shape and dtype everywhere), in group order.
    std::vector<at::Tensor> all_gather(const at::Tensor& input, Group group);

    // Point to point, between global ranks of one `group` (a pipeline's activations and their
    // gradients; a data-parallel group's optimizer pieces at a checkpoint save). `exchange`
    // starts all its transfers before waiting for any (Megatron's batched isend/irecv), so that a
    // stage sending forward while its neighbour sends back does not deadlock; messages between two
    // ranks with one tag arrive in order. A received tensor must be contiguous.
    struct Transfer {
        at::Tensor tensor;
        int peer = 0;
        bool send = true;
        int tag = 0;
    };
    void exchange(const std::vector<Transfer>& transfers, Group group = Group::Pipeline);

    void barrier();
    // A last barrier, then the heartbeat stops: call before a normal exit so that rank 0, which
    // holds the store, does not leave while the others still use it.
    void finish();

private:
    struct Impl;
    explicit Communicator(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace mds::trainer
