// The CUDA emulator (tests/emu/README.md): the runtime calls kernels/ and tests/gpu make, on the host, and the
// threads of a launch as fibers (ucontext) that one host thread runs in a shuffled order, each until it finishes or
// reaches a barrier (__syncthreads: every live thread of the block; a shuffle: every lane of the warp). It checks
// what a GPU would refuse or what would hang or read garbage there: a grid or block out of CUDA's limits, more than
// 48 KiB of dynamic shared memory without cudaFuncSetAttribute or more than the device's opt-in, a __syncthreads
// that some thread never reaches (a deadlock), a full-mask shuffle after a lane of the warp returned, writes past
// either end of a cudaMalloc'd buffer (guard bytes checked at every synchronisation and free).
#include <cuda_runtime.h>

#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace mds_emu {
namespace {

constexpr std::size_t kStackBytes = 64 * 1024;
constexpr std::size_t kGuardBytes = 4096;
constexpr unsigned char kGuard = 0xA5;

cudaError_t last_error = cudaSuccess;

[[noreturn]] void die(const std::string& why) {
    std::fprintf(stderr, "CUDA emulator: %s\n", why.c_str());
    std::fflush(stderr);
    std::abort();
}

int optin_bytes() {
    const char* v = std::getenv("MDS_EMU_SMEM_OPTIN");  // 232448 (H100, H200) unless told: A100 166912
    return v ? std::atoi(v) : 232448;
}

std::map<const void*, int>& kernel_smem_limit() {
    static std::map<const void*, int> limits;
    return limits;
}

// cudaMalloc'd buffers: base (after the front guard) -> bytes.
std::map<void*, std::size_t>& buffers() {
    static std::map<void*, std::size_t> b;
    return b;
}

void check_guards(void* base, std::size_t bytes, const char* when) {
    const auto* p = static_cast<const unsigned char*>(base);
    for (std::size_t i = 0; i < kGuardBytes; ++i) {
        if (p[-static_cast<std::ptrdiff_t>(i) - 1] != kGuard)
            die(std::string("a write before the start of a ") + std::to_string(bytes) + "-byte cudaMalloc buffer (" + when + ")");
        if (p[bytes + i] != kGuard)
            die(std::string("a write past the end of a ") + std::to_string(bytes) + "-byte cudaMalloc buffer (" + when + ")");
    }
}

// --- fibers ------------------------------------------------------------------------------------------------------

enum class State { run, at_sync, at_shuffle, done };

struct Fiber {
    ucontext_t ctx{};
    char* stack = nullptr;  // kStackBytes of stacks() (uninitialised: allocated once for the largest block)
    State state = State::done;
    uint3 tid{};
    std::size_t index = 0;  // tid as one number, x fastest (warps are runs of 32 of them)
    unsigned mask = 0;
    unsigned generation = 0;  // shuffles done: the exchange slot alternates with it
};

struct Block {
    std::vector<Fiber> fibers;
    ucontext_t scheduler{};
    Fiber* current = nullptr;
    const std::function<void()>* body = nullptr;
    std::vector<unsigned char> shared;
    std::vector<std::uint64_t> slots[2];  // per thread: the value it offers in a shuffle
    std::vector<std::size_t> order;       // the threads, in the order the next pass runs them
    std::mt19937 rng;
};

Block* running = nullptr;

char* stack_of(std::size_t thread) {
    static std::vector<std::unique_ptr<char[]>> stacks;
    while (stacks.size() <= thread) stacks.emplace_back(new char[kStackBytes]);
    return stacks[thread].get();
}

void fiber_main() {
    (*running->body)();
    running->current->state = State::done;
    swapcontext(&running->current->ctx, &running->scheduler);
}

void yield(State s) {
    Fiber* f = running->current;
    f->state = s;
    swapcontext(&f->ctx, &running->scheduler);
}

void run_block(Block& b) {
    const std::size_t n = b.fibers.size();
    std::fill(b.shared.begin(), b.shared.end(), 0xFF);
    for (std::size_t i = 0; i < n; ++i) {
        Fiber& f = b.fibers[i];
        f.state = State::run;
        f.generation = 0;
        f.index = i;
        f.tid = {static_cast<unsigned>(i % blockDim.x), static_cast<unsigned>((i / blockDim.x) % blockDim.y),
                 static_cast<unsigned>(i / (blockDim.x * blockDim.y))};
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = kStackBytes;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, fiber_main, 0);
    }
    for (;;) {
        // The runnable threads in a shuffled order each time (seeded: the same order every run), so that a read of
        // shared or global memory that another thread writes without a barrier between finds the write missing
        // in some of them, as it may on a GPU.
        std::shuffle(b.order.begin(), b.order.end(), b.rng);
        for (const std::size_t i : b.order) {
            Fiber& f = b.fibers[i];
            if (f.state != State::run) continue;
            b.current = &f;
            threadIdx = f.tid;
            swapcontext(&b.scheduler, &f.ctx);
        }
        // Everyone has finished or waits. Warps whose live lanes all wait at a shuffle go on first.
        bool released = false;
        for (std::size_t w = 0; w < n; w += 32) {
            const std::size_t end = std::min(n, w + 32);
            bool all = true, any = false, exited = false;
            for (std::size_t i = w; i < end; ++i) {
                const State s = b.fibers[i].state;
                if (s == State::at_shuffle) any = true;
                else if (s == State::done) exited = true;
                else all = false;
            }
            if (!any || !all) continue;
            if (exited || end - w < 32) {
                for (std::size_t i = w; i < end; ++i) {
                    const unsigned mask = b.fibers[i].mask;
                    for (std::size_t j = w; j < w + 32; ++j) {
                        const bool live = j < end && b.fibers[j].state != State::done;
                        if ((mask >> (j - w) & 1u) && !live) {
                            die("block (" + std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) + "), warp " +
                                std::to_string(w / 32) + ": a shuffle whose mask names lane " + std::to_string(j - w) +
                                ", which has returned or does not exist");
                        }
                    }
                }
            }
            for (std::size_t i = w; i < end; ++i) {
                if (b.fibers[i].state == State::at_shuffle) b.fibers[i].state = State::run;
            }
            released = true;
        }
        if (released) continue;
        std::size_t at_sync = 0, done = 0;
        for (const auto& f : b.fibers) {
            at_sync += f.state == State::at_sync ? 1 : 0;
            done += f.state == State::done ? 1 : 0;
        }
        if (done == n) return;
        if (at_sync + done == n) {  // a returned thread counts as arrived, as on Volta and later
            for (auto& f : b.fibers) {
                if (f.state == State::at_sync) f.state = State::run;
            }
            continue;
        }
        die("block (" + std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) + "): deadlock: " +
            std::to_string(at_sync) + " threads wait at __syncthreads while others wait at a shuffle of a warp " +
            "some of whose lanes are at the barrier");
    }
}

}  // namespace

void run_grid(const void* kernel, dim3 grid, dim3 block, std::size_t shared_bytes, const std::function<void()>& body) {
    const auto threads = static_cast<std::size_t>(block.x) * block.y * block.z;
    const auto blocks = static_cast<std::size_t>(grid.x) * grid.y * grid.z;
    if (threads == 0 || threads > 1024 || block.z > 64 || blocks == 0 || grid.y > 65535 || grid.z > 65535 ||
        grid.x > 0x7fffffffu) {
        last_error = cudaErrorInvalidConfiguration;
        return;
    }
    if (shared_bytes > 48 * 1024) {
        const auto it = kernel_smem_limit().find(kernel);
        if (it == kernel_smem_limit().end() || static_cast<std::size_t>(it->second) < shared_bytes) {
            last_error = cudaErrorInvalidValue;
            return;
        }
    }
    if (running != nullptr) die("a kernel launched from inside a kernel");
    Block b;
    b.fibers.resize(threads);
    for (std::size_t i = 0; i < threads; ++i) b.fibers[i].stack = stack_of(i);
    b.body = &body;
    b.shared.resize(std::max<std::size_t>(shared_bytes, 16));
    b.slots[0].assign(threads, 0);
    b.slots[1].assign(threads, 0);
    b.order.resize(threads);
    std::iota(b.order.begin(), b.order.end(), std::size_t{0});
    const char* seed = std::getenv("MDS_EMU_SEED");
    b.rng.seed(seed ? static_cast<unsigned>(std::strtoul(seed, nullptr, 10)) : 1u);
    blockDim = block;
    gridDim = grid;
    running = &b;
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx = {x, y, z};
                run_block(b);
            }
    running = nullptr;
}

void* dynamic_shared_bytes() {
    if (running == nullptr) die("dynamic shared memory outside a kernel");
    return running->shared.data();
}

void sync_block() {
    if (running == nullptr) die("__syncthreads outside a kernel");
    yield(State::at_sync);
}

std::uint64_t exchange_in_warp(unsigned mask, std::uint64_t bits, int lane_mask) {
    if (running == nullptr) die("a shuffle outside a kernel");
    Fiber* f = running->current;
    const std::size_t me = f->index;
    const unsigned slot = f->generation & 1u;
    running->slots[slot][me] = bits;
    f->mask = mask;
    yield(State::at_shuffle);
    const std::size_t lane = me % 32, partner = (me - lane) + ((lane ^ static_cast<std::size_t>(lane_mask)) & 31u);
    ++f->generation;
    if (partner >= running->fibers.size()) return bits;  // CUDA: a lane outside the warp's width reads its own
    return running->slots[slot][partner];
}

}  // namespace mds_emu

// --- the runtime calls -------------------------------------------------------------------------------------------

cudaError_t cudaGetLastError() {
    const cudaError_t e = mds_emu::last_error;
    mds_emu::last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError() { return mds_emu::last_error; }

const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        default: return "unknown error (emulated)";
    }
}

cudaError_t cudaGetDeviceCount(int* count) {
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    *prop = cudaDeviceProp{};
    std::snprintf(prop->name, sizeof prop->name, "mds CUDA emulator on the CPU (shared memory opt-in %d bytes)",
                  mds_emu::optin_bytes());
    prop->major = 9;
    prop->minor = 0;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->sharedMemPerBlockOptin = static_cast<std::size_t>(mds_emu::optin_bytes());
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    switch (attr) {
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = mds_emu::optin_bytes(); return cudaSuccess;
        case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
        case cudaDevAttrWarpSize: *value = 32; return cudaSuccess;
        default: return cudaErrorInvalidValue;
    }
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
    if (value < 0 || value > mds_emu::optin_bytes()) return cudaErrorInvalidValue;
    mds_emu::kernel_smem_limit()[func] = value;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
    const std::size_t total = bytes + 2 * mds_emu::kGuardBytes;
    auto* raw = static_cast<unsigned char*>(std::aligned_alloc(256, (total + 255) / 256 * 256));
    if (raw == nullptr) return cudaErrorMemoryAllocation;
    std::memset(raw, mds_emu::kGuard, mds_emu::kGuardBytes);
    std::memset(raw + mds_emu::kGuardBytes, 0xCD, bytes);  // cudaMalloc's memory is uninitialised
    std::memset(raw + mds_emu::kGuardBytes + bytes, mds_emu::kGuard, mds_emu::kGuardBytes);
    *ptr = raw + mds_emu::kGuardBytes;
    mds_emu::buffers()[*ptr] = bytes;
    return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
    if (ptr == nullptr) return cudaSuccess;
    const auto it = mds_emu::buffers().find(ptr);
    if (it == mds_emu::buffers().end()) return cudaErrorInvalidValue;
    mds_emu::check_guards(ptr, it->second, "at cudaFree");
    mds_emu::buffers().erase(it);
    std::free(static_cast<unsigned char*>(ptr) - mds_emu::kGuardBytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind) {
    std::memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
    for (const auto& [base, bytes] : mds_emu::buffers()) mds_emu::check_guards(base, bytes, "at cudaDeviceSynchronize");
    return cudaSuccess;
}
