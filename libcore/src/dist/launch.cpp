#include "mds/dist/launch.h"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>

#include "mds/util/error.h"

namespace mds::dist {

// No allocation will hold more hosts or nodes than this (a typo like n[0-999999][0-999999] is an
// error, not an exhausted memory).
// More nodes than any cluster has (the largest have ~10^4); beyond it a host list is a typo, and
// expanding it would exhaust memory: 10^5 names, 16 MiB of them.
constexpr std::size_t kMaxExpanded = 100'000;
constexpr std::size_t kMaxExpandedBytes = 16u << 20;
namespace {

std::optional<std::string> get(const EnvReader& env, const char* name) {
    const char* v = env(name);
    if (!v) return std::nullopt;
    return std::string(v);
}

int parse_int(const std::string& text, const std::string& what, int min_value) {
    int v = 0;
    const char* end = text.data() + text.size();
    const auto [p, ec] = std::from_chars(text.data(), end, v);
    if (text.empty() || ec != std::errc() || p != end || v < min_value)
        throw UsageError(what + "=" + text + " is not an integer >= " + std::to_string(min_value));
    return v;
}

// Reads the named variable as an integer when set.
std::optional<int> get_int(const EnvReader& env, const char* name, int min_value) {
    const auto v = get(env, name);
    if (!v) return std::nullopt;
    return parse_int(*v, name, min_value);
}

void append_source(LaunchInfo& info, const char* name, const EnvReader& env) {
    if (const char* v = env(name)) {
        if (!info.source.empty()) info.source += ' ';
        info.source += std::string(name) + "=" + v;
    }
}

// One launcher's variables: rank, size and (optional) local rank / local size.
struct Names {
    const char* launcher;
    const char* rank;
    const char* size;
    const char* local_rank;
    const char* local_size;
};

bool read_pair(const EnvReader& env, const Names& n, LaunchInfo& info) {
    const auto rank = get_int(env, n.rank, 0), size = get_int(env, n.size, 1);
    if (!rank && !size) return false;
    if (!rank || !size)
        throw UsageError(std::string(rank ? n.size : n.rank) + " is not set but " + (rank ? n.rank : n.size) +
                         " is: the " + n.launcher + " environment is incomplete");
    info.launcher = n.launcher;
    info.rank = *rank;
    info.world_size = *size;
    for (const char* v : {n.rank, n.size, n.local_rank, n.local_size})
        if (v) append_source(info, v, env);
    if (n.local_rank)
        if (const auto lr = get_int(env, n.local_rank, 0)) info.local_rank = *lr;
    if (n.local_size)
        if (const auto ls = get_int(env, n.local_size, 1)) info.local_world_size = *ls;
    return true;
}

// srun: sizes from the step's variables; the master is the step's first host.
bool read_srun(const EnvReader& env, LaunchInfo& info) {
    const auto step_tasks = get_int(env, "SLURM_STEP_NUM_TASKS", 1);
    const auto procid = get_int(env, "SLURM_PROCID", 0);
    if (!step_tasks || !procid) return false;
    info.launcher = "srun";
    info.rank = *procid;
    info.world_size = *step_tasks;
    for (const char* v : {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE",
                          "SLURM_STEP_NODELIST"})
        append_source(info, v, env);
    if (const auto local = get_int(env, "SLURM_LOCALID", 0)) info.local_rank = *local;
    if (const auto per_node = get(env, "SLURM_STEP_TASKS_PER_NODE")) {
        const auto counts = expand_tasks_per_node(*per_node);
        const int node = get_int(env, "SLURM_NODEID", 0).value_or(0);
        if (node >= static_cast<int>(counts.size()))
            throw UsageError("SLURM_NODEID=" + std::to_string(node) + " but SLURM_STEP_TASKS_PER_NODE=" + *per_node + " lists " +
                             std::to_string(counts.size()) + " nodes");
        info.local_world_size = counts[static_cast<std::size_t>(node)];
    }
    auto nodes = get(env, "SLURM_STEP_NODELIST");
    if (!nodes) nodes = get(env, "SLURM_JOB_NODELIST");
    if (nodes) {
        const auto hosts = expand_hostlist(*nodes);
        if (!hosts.empty()) info.master_addr = hosts.front();
    }
    return true;
}

}  // namespace

EnvReader process_env() {
    return [](const char* name) -> const char* { return std::getenv(name); };
}

LaunchInfo detect_launch(const EnvReader& env) {
    LaunchInfo info;
    const bool found = read_pair(env, {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}, info) ||
                       read_pair(env, {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "OMPI_COMM_WORLD_LOCAL_SIZE"}, info) ||
                       read_pair(env, {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}, info) ||
                       read_srun(env, info);
    if (!found) return LaunchInfo{};
    if (info.rank >= info.world_size)
        throw UsageError("rank " + std::to_string(info.rank) + " is not below the world size " + std::to_string(info.world_size) +
                         " (" + info.source + ")");
    if (info.local_rank >= info.local_world_size && info.local_world_size > 1)
        throw UsageError("local rank " + std::to_string(info.local_rank) + " is not below the local world size " +
                         std::to_string(info.local_world_size) + " (" + info.source + ")");
    if (info.local_world_size == 1 && info.local_rank > 0) info.local_world_size = info.local_rank + 1;  // unknown: at least this
    if (const auto addr = get(env, "MASTER_ADDR")) {
        if (addr->empty()) throw UsageError("MASTER_ADDR is set but empty");
        info.master_addr = *addr;
        append_source(info, "MASTER_ADDR", env);
    } else if (info.world_size > 1 && info.launcher != "srun") {
        throw UsageError("MASTER_ADDR is not set: " + info.launcher + " launched " + std::to_string(info.world_size) +
                         " processes, and they need the address of rank 0 (export MASTER_ADDR and MASTER_PORT)");
    }
    if (const auto port = get_int(env, "MASTER_PORT", 1)) {
        if (*port > 65535) throw UsageError("MASTER_PORT=" + std::to_string(*port) + " is not a TCP port");
        info.master_port = *port;
        append_source(info, "MASTER_PORT", env);
    }
    return info;
}

std::vector<std::string> expand_hostlist(std::string_view list) {
    std::vector<std::string> out;
    std::size_t bytes = 0;
    // Split on commas outside brackets.
    std::vector<std::string_view> names;
    int depth = 0;
    std::size_t start = 0;
    for (std::size_t i = 0; i <= list.size(); ++i) {
        const char c = i < list.size() ? list[i] : ',';
        if (c == '[') {
            if (++depth > 1) throw Error("host list \"" + std::string(list) + "\": nested '[' at offset " + std::to_string(i));
        } else if (c == ']') {
            if (--depth < 0) throw Error("host list \"" + std::string(list) + "\": unmatched ']' at offset " + std::to_string(i));
        } else if (c == ',' && depth == 0) {
            if (i > start) names.push_back(list.substr(start, i - start));
            start = i + 1;
        }
    }
    if (depth != 0) throw Error("host list \"" + std::string(list) + "\": unclosed '['");

    // Expands the first bracket group of `name`, then recurses on the rest.
    std::function<void(const std::string&)> expand = [&](const std::string& name) {
        const auto open = name.find('[');
        if (open == std::string::npos) {
            if (out.size() >= kMaxExpanded)
                throw Error("host list \"" + std::string(list).substr(0, 200) + "\" expands to more than " +
                            std::to_string(kMaxExpanded) + " hosts");
            bytes += name.size();
            if (bytes > kMaxExpandedBytes)
                throw Error("host list \"" + std::string(list).substr(0, 200) + "\" expands to more than " +
                            std::to_string(kMaxExpandedBytes >> 20) + " MiB of host names");
            out.push_back(name);
            return;
        }
        const auto close = name.find(']', open);
        const std::string prefix = name.substr(0, open), suffix = name.substr(close + 1);
        const std::string body = name.substr(open + 1, close - open - 1);
        std::size_t pos = 0;
        while (pos <= body.size()) {
            auto comma = body.find(',', pos);
            if (comma == std::string::npos) comma = body.size();
            const std::string item = body.substr(pos, comma - pos);
            const auto dash = item.find('-');
            const std::string lo = item.substr(0, dash), hi = dash == std::string::npos ? lo : item.substr(dash + 1);
            auto number = [&](const std::string& s) {
                unsigned long v = 0;
                const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
                if (s.empty() || ec != std::errc() || p != s.data() + s.size())
                    throw Error("host list \"" + std::string(list) + "\": \"" + item + "\" is not a number or a range");
                return v;
            };
            const unsigned long a = number(lo), b = number(hi);
            if (b < a || b - a > 1000000)
                throw Error("host list \"" + std::string(list) + "\": bad range \"" + item + "\"");
            for (unsigned long v = a; v <= b; ++v) {
                std::string digits = std::to_string(v);
                if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
                expand(prefix + digits + suffix);
            }
            pos = comma + 1;
        }
    };
    for (const auto n : names) expand(std::string(n));
    return out;
}

std::vector<int> expand_tasks_per_node(std::string_view spec) {
    std::vector<int> out;
    std::size_t pos = 0;
    const std::string s(spec);
    while (pos < s.size()) {
        auto comma = s.find(',', pos);
        if (comma == std::string::npos) comma = s.size();
        const std::string item = s.substr(pos, comma - pos);
        const auto paren = item.find("(x");
        const std::string count = item.substr(0, paren);
        int repeat = 1;
        if (paren != std::string::npos) {
            if (item.back() != ')') throw Error("tasks per node \"" + s + "\": \"" + item + "\" is not N or N(xK)");
            repeat = parse_int(item.substr(paren + 2, item.size() - paren - 3), "tasks per node repeat", 1);
        }
        const int n = parse_int(count, "tasks per node", 1);  // a node of the step runs at least one task
        if (static_cast<std::size_t>(repeat) > kMaxExpanded - out.size())
            throw Error("tasks per node \"" + s.substr(0, 200) + "\" lists more than " + std::to_string(kMaxExpanded) + " nodes");
        out.insert(out.end(), static_cast<std::size_t>(repeat), n);
        pos = comma + 1;
    }
    if (out.empty()) throw Error("tasks per node \"" + s + "\" is empty");
    return out;
}

}  // namespace mds::dist
