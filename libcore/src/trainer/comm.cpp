#include "mds/trainer/comm.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm_nccl.h"
#include "mds/util/error.h"

namespace mds::trainer {
namespace {


// c10 errors carry a C++ backtrace after the message: keep the message.
std::string short_message(const std::exception& e) {
    std::string m;
    if (const auto* c = dynamic_cast<const c10::Error*>(&e)) m = c->what_without_backtrace();
    else m = e.what();
    const auto nl = m.find('\n');
    if (nl != std::string::npos) m.resize(nl);
    return m;
}

std::string beat_key(int rank) { return "mds/beat/" + std::to_string(rank); }

// Collectives are counted per kind of group: the members of one group run the same collectives on
// it, but with pipeline stages the ranks of different groups do not run as many.
constexpr std::size_t kGroups = 5;
std::size_t group_index(Group g) { return static_cast<std::size_t>(g); }

struct Beat {
    std::int64_t counter = -1;  // -1: never published
    std::array<std::int64_t, kGroups> seq{};
    std::string phase;
};

Beat parse_beat(const std::vector<std::uint8_t>& v) {
    Beat b;
    std::istringstream in(std::string(v.begin(), v.end()));
    in >> b.counter;
    for (auto& s : b.seq) in >> s;
    std::getline(in >> std::ws, b.phase);
    return b;
}

}  // namespace

const char* group_name(Group group) {
    switch (group) {
    case Group::World: return "world";
    case Group::Tensor: return "tensor-parallel";
    case Group::Data: return "data-parallel";
    case Group::Pipeline: return "pipeline-parallel";
    case Group::Embedding: return "embedding";
    }
    return "?";
}

bool nccl_available() { return nccl::available(); }

struct Communicator::Impl {
    struct ProcessGroup {
        std::vector<int> ranks;  // global ranks, sorted
        c10::intrusive_ptr<c10d::Backend> pg;    // Gloo; null for a group of one
        c10::intrusive_ptr<c10d::Backend> nccl;  // NCCL for CUDA tensors (--distributed-backend nccl); may be null

        // The engine that moves `t`: NCCL for a CUDA tensor where there is one, Gloo otherwise.
        bool is_nccl(const at::Tensor& t) const { return t.is_cuda() && nccl; }
        const c10::intrusive_ptr<c10d::Backend>& for_tensor(const at::Tensor& t) const { return is_nccl(t) ? nccl : pg; }
        int index_of(int global) const {
            const auto it = std::find(ranks.begin(), ranks.end(), global);
            if (it == ranks.end()) throw Error("rank " + std::to_string(global) + " is not in this group");
            return static_cast<int>(it - ranks.begin());
        }
    };

    dist::LaunchInfo launch;
    dist::ParallelLayout layout;
    CommOptions options;
    c10::intrusive_ptr<c10d::TCPStore> store;       // the main thread's connection
    c10::intrusive_ptr<c10d::TCPStore> beat_store;  // the heartbeat thread's own connection
    std::map<Group, ProcessGroup> groups;

    std::array<std::atomic<std::int64_t>, kGroups> seq{};
    std::mutex phase_mutex;
    std::string phase = "joining";
    std::atomic<bool> stop{false};
    std::atomic<bool> publish_now{false};  // a heartbeat now, not at the next period
    std::mutex stop_mutex;
    std::condition_variable stop_cv;
    std::thread beat;
    bool finished = false;

    Impl(const dist::LaunchInfo& l, const dist::ParallelLayout& lay, const CommOptions& o) : launch(l), layout(lay), options(o) {}

    int rank() const { return launch.rank; }
    std::string where() const { return launch.master_addr + ":" + std::to_string(launch.master_port); }

    c10::intrusive_ptr<c10d::TCPStore> connect(bool server) {
        c10d::TCPStoreOptions so;
        so.port = static_cast<std::uint16_t>(launch.master_port);
        so.isServer = server;
        so.numWorkers = launch.world_size;
        so.waitWorkers = false;
        so.timeout = options.timeout;
        try {
            return c10::make_intrusive<c10d::TCPStore>(launch.master_addr, so);
        } catch (const std::exception& e) {
            throw Error("rank " + std::to_string(rank()) + (server ? " could not open the rendezvous store on port " +
                                                                         std::to_string(launch.master_port) + " (MASTER_PORT)"
                                                                   : " could not reach the rendezvous store of rank 0 at " + where() +
                                                                         " (MASTER_ADDR:MASTER_PORT)") +
                        ": " + short_message(e));
        }
    }

    void set_phase(std::string p) {
        std::lock_guard<std::mutex> lock(phase_mutex);
        phase = std::move(p);
    }

    void heartbeat_loop() {
        std::int64_t counter = 0;
        while (!stop) {
            std::string value;
            {
                std::lock_guard<std::mutex> lock(phase_mutex);
                std::ostringstream out;
                out << counter++;
                for (const auto& n : seq) out << ' ' << n.load();
                out << ' ' << phase;
                value = out.str();
            }
            try {
                beat_store->set(beat_key(rank()), std::vector<std::uint8_t>(value.begin(), value.end()));
            } catch (const std::exception&) {
                // Rank 0 is gone: the main thread finds out at its next collective and says so.
            }
            std::unique_lock<std::mutex> lock(stop_mutex);
            stop_cv.wait_for(lock, options.heartbeat, [&] { return stop.load() || publish_now.exchange(false); });
        }
    }

    void stop_heartbeat() {
        {
            std::lock_guard<std::mutex> lock(stop_mutex);
            stop = true;
        }
        stop_cv.notify_all();
        if (beat.joinable()) beat.join();
    }

    std::map<int, Beat> read_beats() {
        std::map<int, Beat> out;
        for (int r = 0; r < launch.world_size; ++r) {
            if (r == rank()) continue;
            const auto key = beat_key(r);
            out[r] = store->check({key}) ? parse_beat(store->get(key)) : Beat{};
        }
        return out;
    }

    // Who is to blame for a failed collective (the `my_seq`-th on a `group`; 0: a point-to-point
    // transfer with the ranks `group_ranks`), from the heartbeats of every rank.
    std::string diagnose(const std::vector<int>& group_ranks, Group group, std::int64_t my_seq) {
        try {
            const auto before = read_beats();
            std::this_thread::sleep_for(options.heartbeat * 3 + std::chrono::milliseconds(200));
            const auto after = read_beats();
            std::vector<std::string> dead, behind;
            for (const auto& [r, b] : after) {
                const auto& a = before.at(r);
                if (b.counter < 0) {
                    dead.push_back("rank " + std::to_string(r) + " never joined");
                } else if (b.counter == a.counter) {
                    dead.push_back("rank " + std::to_string(r) + " stopped answering: it died, was killed or is stopped (its last "
                                   "heartbeat: " + (b.phase.empty() ? std::string("?") : b.phase) + ")");
                }
            }
            if (dead.empty())
                for (int r : group_ranks) {
                    if (r == rank()) continue;
                    const auto& b = after.at(r);
                    const auto theirs = b.seq[group_index(group)];
                    if (my_seq == 0)
                        behind.push_back("rank " + std::to_string(r) + " is alive but does not answer (it is " + b.phase +
                                         "): it hangs or is much slower");
                    else if (theirs < my_seq)
                        behind.push_back("rank " + std::to_string(r) + " is alive but has not reached collective #" +
                                         std::to_string(my_seq) + " (it is at #" + std::to_string(theirs) + ", " + b.phase +
                                         "): it hangs or is much slower");
                }
            std::string out;
            for (const auto* list : {&dead, &behind})
                for (const auto& s : *list) out += (out.empty() ? "" : "; ") + s;
            return out.empty() ? "every rank still answers; the network between them failed" : out;
        } catch (const std::exception& e) {
            return "rank 0, which holds the rendezvous store at " + where() + ", cannot be reached (it died or its node failed: " +
                   short_message(e) + ")";
        }
    }

    // Starts one collective; the returned function waits for it, turning a failure or a timeout into
    // an error that names the rank.
    std::function<void()> start(const std::string& what, Group group, const std::function<c10::intrusive_ptr<c10d::Work>()>& begin,
                                bool nccl = false) {
        const std::int64_t my_seq = ++seq[group_index(group)];
        const std::string where = what + " over the " + group_name(group) + " group (collective #" + std::to_string(my_seq) + ")";
        c10::intrusive_ptr<c10d::Work> work;
        std::string failure;
        try {
            work = begin();
        } catch (const std::exception& e) {
            failure = short_message(e);
        }
        return [this, where, my_seq, group, work, failure, nccl]() {
            set_phase("in " + where);
            try {
                if (!failure.empty()) throw Error(failure);
                if (nccl) wait_nccl(*work);
                else work->wait();
            } catch (const std::exception& e) {
                const std::string cause = diagnose(groups.at(group).ranks, group, my_seq);
                abort_nccl();
                throw Error("rank " + std::to_string(rank()) + ": " + where + " failed: " + cause + " [" + short_message(e) + "]");
            }
            set_phase("computing");
        };
    }

    // An NCCL work's wait() only makes the current CUDA stream wait for it; a peer that died or hangs
    // would leave this rank queueing kernels behind it. So the host waits for the work to finish, at
    // most the timeout (NCCL's own watchdog, given more, stays quiet), then syncs the stream.
    void wait_nccl(c10d::Work& work) const {
        const auto deadline = std::chrono::steady_clock::now() + options.timeout;
        auto pause = std::chrono::microseconds(20);
        while (!work.isCompleted()) {
            if (std::chrono::steady_clock::now() > deadline)
                throw Error("timed out after " + std::to_string(options.timeout.count() / 1000) + " s (--distributed-timeout-minutes)");
            std::this_thread::sleep_for(pause);
            pause = std::min(pause * 2, std::chrono::microseconds(1000));
        }
        work.wait();  // rethrows NCCL's error, if any
    }

    // After a failure the NCCL communicators may hold kernels that wait for a dead peer: abort them so
    // that the process can report and exit.
    void abort_nccl() {
        for (auto& [g, pg] : groups)
            if (pg.nccl) {
                try {
                    pg.nccl->abort();
                } catch (const std::exception&) {
                }
            }
    }

    // Runs one collective (start, then wait).
    void run(const std::string& what, Group group, const std::function<c10::intrusive_ptr<c10d::Work>()>& begin, bool nccl = false) {
        start(what, group, begin, nccl)();
    }

    // Point-to-point transfers with `peers`, started together and waited for together, so that two
    // ranks that send to each other do not wait on each other. On NCCL (`coalesce`) they go in one
    // NCCL group call, as torch.distributed.batch_isend_irecv: NCCL runs a group's sends and receives
    // together, where separate calls would block each other on the communicator's stream.
    void run_p2p(const std::string& what, const std::vector<int>& peers, Group group,
                 const std::vector<std::function<c10::intrusive_ptr<c10d::Work>()>>& starts,
                 const c10::intrusive_ptr<c10d::Backend>& coalesce) {
        set_phase("in " + what);
        try {
            if (coalesce) {
                coalesce->startCoalescing();
                for (const auto& start : starts) (void)start();
                wait_nccl(*coalesce->endCoalescing());
            } else {
                std::vector<c10::intrusive_ptr<c10d::Work>> works;
                for (const auto& start : starts) works.push_back(start());
                for (auto& w : works) w->wait();
            }
        } catch (const std::exception& e) {
            const std::string cause = diagnose(peers, group, 0);
            abort_nccl();
            throw Error("rank " + std::to_string(rank()) + ": " + what + " failed: " + cause + " [" + short_message(e) + "]");
        }
        set_phase("computing");
    }

    ProcessGroup& group(Group g) { return groups.at(g); }

    std::vector<double> numbers(std::vector<double> values, Group g, c10d::ReduceOp op, const char* what) {
        auto& pg = group(g);
        if (!pg.pg || values.empty()) return values;
        std::vector<at::Tensor> buf{at::tensor(values, at::TensorOptions().dtype(at::kDouble))};
        c10d::AllreduceOptions opts;
        opts.reduceOp = op;
        run(what, g, [&] { return pg.pg->allreduce(buf, opts); });
        const auto* out = buf[0].data_ptr<double>();
        return {out, out + values.size()};
    }
};

Communicator::Communicator(const dist::LaunchInfo& launch, const dist::ParallelLayout& layout, const CommOptions& options)
    : impl_(std::make_unique<Impl>(launch, layout, options)) {
    auto& m = *impl_;
    if (layout.world_size() != launch.world_size)
        throw Error("the parallel layout is for " + std::to_string(layout.world_size()) + " ranks, the launcher started " +
                    std::to_string(launch.world_size));
    m.store = m.connect(launch.rank == 0);
    m.beat_store = m.connect(false);
    m.beat = std::thread([&m] { m.heartbeat_loop(); });

    const int r = launch.rank;
    if (options.nccl_device) nccl::set_device(*options.nccl_device);
    // NCCL's watchdog counts from the start of a collective, our wait from when the host needs it
    // (a bucket may start early in backward): it gets twice as long, so that our error comes first.
    const auto nccl_timeout = options.timeout * 2 + options.heartbeat * 4 + std::chrono::minutes(1);
    auto gloo_options = [&]() { return c10d::ProcessGroupGloo::Options::create_default(options.timeout); };
    auto build = [&](Group g, const std::string& prefix, const std::vector<std::vector<int>>& all) {
        for (std::size_t i = 0; i < all.size(); ++i) {
            const auto& ranks = all[i];
            const auto it = std::find(ranks.begin(), ranks.end(), r);
            if (it == ranks.end()) continue;
            Impl::ProcessGroup pg;
            pg.ranks = ranks;
            if (ranks.size() > 1) {
                const int index = static_cast<int>(it - ranks.begin()), size = static_cast<int>(ranks.size());
                const std::string key = "mds/" + prefix + "/" + std::to_string(i);
                m.set_phase("joining the " + std::string(group_name(g)) + " group");
                try {
                    pg.pg = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>(key, m.store), index,
                                                                        size, gloo_options());
                    if (options.nccl_device)
                        pg.nccl = nccl::make_group(c10::make_intrusive<c10d::PrefixStore>(key + "/nccl", m.store), index, size, ranks,
                                                   nccl_timeout, *options.nccl_device);
                } catch (const std::exception& e) {
                    m.groups[g] = pg;
                    throw Error("rank " + std::to_string(r) + ": joining the " + group_name(g) + " group failed: " +
                                m.diagnose(ranks, g, 1) + " [" + short_message(e) + "]");
                }
            }
            m.groups[g] = std::move(pg);
        }
    };
    std::vector<int> world(static_cast<std::size_t>(launch.world_size));
    for (int i = 0; i < launch.world_size; ++i) world[static_cast<std::size_t>(i)] = i;
    try {
        build(Group::World, "world", {world});
        build(Group::Tensor, "tp", layout.all_tensor_groups());
        build(Group::Data, "dp", layout.all_data_groups());
        build(Group::Pipeline, "pp", layout.all_pipeline_groups());
        build(Group::Embedding, "embedding", layout.all_embedding_groups());
    } catch (...) {
        m.stop_heartbeat();
        throw;
    }
    m.set_phase("computing");
    // Joined: say so now, so that a rank stopped in its first second does not read as still joining.
    {
        std::lock_guard<std::mutex> lock(m.stop_mutex);
        m.publish_now = true;
    }
    m.stop_cv.notify_all();
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Communicator> Communicator::single_process() {
    // Every group of a world of one is {0} and has no engine (pg null): each collective then takes
    // the path a group of one takes in a parallel run, which changes nothing.
    auto impl = std::make_unique<Impl>(dist::LaunchInfo{}, dist::ParallelLayout(1, 1, 1), CommOptions{});
    for (const Group g : {Group::World, Group::Tensor, Group::Data, Group::Pipeline, Group::Embedding})
        impl->groups[g].ranks = {0};
    impl->set_phase("computing");
    return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

Communicator::~Communicator() {
    if (!impl_->finished) impl_->abort_nccl();
    impl_->stop_heartbeat();
}

int Communicator::rank() const { return impl_->rank(); }
int Communicator::world_size() const { return impl_->launch.world_size; }
const dist::ParallelLayout& Communicator::layout() const { return impl_->layout; }
dist::Coordinates Communicator::coordinates() const { return impl_->layout.coordinates(rank()); }
std::vector<int> Communicator::members(Group group) const { return impl_->groups.at(group).ranks; }

std::vector<std::pair<std::size_t, std::size_t>> cut_buckets(const std::vector<at::Tensor>& tensors, std::int64_t max_bytes) {
    std::vector<std::pair<std::size_t, std::size_t>> out;
    std::int64_t bytes = 0;
    for (std::size_t k = 0; k < tensors.size(); ++k) {
        const auto& t = tensors[k];
        const std::int64_t b = t.numel() * static_cast<std::int64_t>(t.element_size());
        const auto& first = out.empty() ? t : tensors[out.back().first];
        if (out.empty() || bytes + b > max_bytes || first.scalar_type() != t.scalar_type() || first.device() != t.device()) {
            out.emplace_back(k, k);
            bytes = 0;
        }
        out.back().second = k + 1;
        bytes += b;
    }
    return out;
}

at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
    if (tensors.size() == 1) return tensors[0].reshape({-1}).clone();
    std::vector<at::Tensor> views;
    views.reserve(tensors.size());
    for (const auto& t : tensors) views.push_back(t.reshape({-1}));
    return at::cat(views);
}

void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& into) {
    std::int64_t off = 0;
    for (const auto& t : into) {
        const auto n = t.numel();
        t.copy_(flat.narrow(0, off, n).view(t.sizes()));
        off += n;
    }
}

void Communicator::all_reduce_sum(const std::vector<at::Tensor>& tensors, Group group, double scale) {
    c10::NoGradGuard no_grad;
    auto& g = impl_->group(group);
    if (!g.pg) {
        if (scale != 1.0)
            for (const auto& t : tensors) t.mul_(scale);
        return;
    }
    for (const auto& [i, j] : cut_buckets(tensors, kGradientBucketBytes)) {
        // A lone contiguous tensor is reduced in place; several travel as one flat copy.
        const bool in_place = j - i == 1 && tensors[i].is_contiguous();
        const auto first = tensors.begin();
        const std::vector<at::Tensor> bucket(first + static_cast<std::ptrdiff_t>(i), first + static_cast<std::ptrdiff_t>(j));
        at::Tensor flat = in_place ? tensors[i].view({-1}) : flatten(bucket);
        std::vector<at::Tensor> buf{flat};
        impl_->run("all_reduce", group, [&] { return g.for_tensor(flat)->allreduce(buf); }, g.is_nccl(flat));
        if (scale != 1.0) flat.mul_(scale);
        if (!in_place) unflatten(flat, bucket);
    }
}

double Communicator::sum(double value, Group group) { return impl_->numbers({value}, group, c10d::ReduceOp::SUM, "sum")[0]; }
double Communicator::max(double value, Group group) { return impl_->numbers({value}, group, c10d::ReduceOp::MAX, "max")[0]; }
std::vector<double> Communicator::max(std::vector<double> values, Group group) {
    return impl_->numbers(std::move(values), group, c10d::ReduceOp::MAX, "max");
}

std::function<void()> Communicator::start_all_reduce_sum(const at::Tensor& flat, Group group) {
    auto& g = impl_->group(group);
    if (!g.pg) return [] {};
    if (!flat.is_contiguous()) throw Error("start_all_reduce_sum needs a contiguous tensor");
    auto buf = std::make_shared<std::vector<at::Tensor>>(std::vector<at::Tensor>{flat});
    auto wait = impl_->start("all_reduce", group, [&] { return g.for_tensor(flat)->allreduce(*buf); }, g.is_nccl(flat));
    return [wait, buf] { wait(); };
}

void Communicator::all_reduce_max(const at::Tensor& tensor, Group group) {
    auto& g = impl_->group(group);
    if (!g.pg) return;
    if (!tensor.is_contiguous()) throw Error("all_reduce_max needs a contiguous tensor");
    std::vector<at::Tensor> buf{tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::MAX;
    impl_->run("all_reduce (max)", group, [&] { return g.for_tensor(tensor)->allreduce(buf, opts); }, g.is_nccl(tensor));
}

std::vector<at::Tensor> Communicator::all_gather(const at::Tensor& input, Group group) {
    auto& g = impl_->group(group);
    if (!g.pg) return {input};
    std::vector<at::Tensor> in{input.contiguous()};
    std::vector<std::vector<at::Tensor>> out(1);
    for (std::size_t i = 0; i < g.ranks.size(); ++i) out[0].push_back(at::empty_like(in[0]));
    impl_->run("all_gather", group, [&] { return g.for_tensor(input)->allgather(out, in); }, g.is_nccl(input));
    return out[0];
}

void Communicator::exchange(const std::vector<Transfer>& transfers, Group group) {
    if (transfers.empty()) return;
    auto& g = impl_->group(group);
    if (!g.pg) throw Error("point-to-point transfers need a group of several ranks");
    const bool nccl = g.is_nccl(transfers.front().tensor);
    const auto& backend = g.for_tensor(transfers.front().tensor);
    // What the engine reads or fills. Gloo moves host memory only: CUDA tensors go through the host.
    std::vector<std::vector<at::Tensor>> bufs;
    std::vector<std::pair<at::Tensor, std::size_t>> landing;  // (CUDA destination, its host buffer in bufs)
    std::vector<std::function<c10::intrusive_ptr<c10d::Work>()>> starts;
    std::vector<int> peers;
    std::string what;
    bufs.reserve(transfers.size());
    for (const auto& t : transfers) {
        if (t.tensor.is_cuda() != transfers.front().tensor.is_cuda()) throw Error("one exchange moves tensors of one kind of device");
        at::Tensor buf;
        if (t.send) {
            buf = t.tensor.contiguous();
            if (!nccl && buf.is_cuda()) buf = buf.to(at::kCPU);
        } else {
            if (!t.tensor.is_contiguous()) throw Error("a receive needs a contiguous tensor");
            buf = t.tensor;
            if (!nccl && buf.is_cuda()) {
                buf = at::empty(t.tensor.sizes(), t.tensor.options().device(at::kCPU));
                landing.emplace_back(t.tensor, bufs.size());
            }
        }
        bufs.push_back({buf});
        auto* b = &bufs.back();
        const int peer = g.index_of(t.peer), tag = t.tag;
        if (t.send) starts.push_back([&backend, b, peer, tag] { return backend->send(*b, peer, tag); });
        else starts.push_back([&backend, b, peer, tag] { return backend->recv(*b, peer, tag); });
        peers.push_back(t.peer);
        what += std::string(what.empty() ? "" : " and ") + (t.send ? "sending to rank " : "receiving from rank ") + std::to_string(t.peer);
    }
    impl_->run_p2p(what, peers, group, starts, nccl ? backend : c10::intrusive_ptr<c10d::Backend>());
    for (auto& [dst, i] : landing) dst.copy_(bufs[i][0]);
}

void Communicator::barrier() {
    auto& g = impl_->group(Group::World);
    if (!g.pg) return;
    impl_->run("barrier", Group::World, [&] { return g.pg->barrier(); });
}

void Communicator::finish() {
    barrier();
    for (auto& [g, pg] : impl_->groups)
        if (pg.nccl) pg.nccl->shutdown();
    impl_->finished = true;
    impl_->stop_heartbeat();
}

}  // namespace mds::trainer
