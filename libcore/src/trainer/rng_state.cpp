// The random number generators' states in a checkpoint, as Megatron saves them: Python's random and
// numpy's legacy RandomState as _set_random_seed left them (MT19937, re-created from the seed), the
// CPU generator, and the model's dropout generators (cuda_rng_state and the model-parallel tracker).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "checkpoint_files.h"
#include "mds/util/error.h"
#include "py_values.h"

namespace mds::trainer {

// ---- MT19937 seeding (Python's random and numpy's legacy RandomState) -----------------------------

namespace {

using MtState = std::array<std::uint32_t, 624>;

void init_genrand(MtState& mt, std::uint32_t s) {
    mt[0] = s;
    for (std::uint32_t i = 1; i < 624; ++i) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i;
}

}  // namespace

std::array<std::uint32_t, 624> numpy_random_seed_state(std::uint32_t seed) {
    MtState mt{};
    init_genrand(mt, seed);
    return mt;
}

std::array<std::uint32_t, 624> python_random_seed_state(std::uint64_t seed) {
    // random.seed(n) for an int: init_by_array over the 32-bit words of |n|, least significant first.
    std::vector<std::uint32_t> key;
    for (std::uint64_t v = seed; v != 0; v >>= 32) key.push_back(static_cast<std::uint32_t>(v));
    if (key.empty()) key.push_back(0);
    MtState mt{};
    init_genrand(mt, 19650218u);
    std::uint32_t i = 1, j = 0;
    const auto n = static_cast<std::uint32_t>(key.size());
    for (std::uint32_t k = std::max<std::uint32_t>(624, n); k > 0; --k) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + j;
        ++i;
        ++j;
        if (i >= 624) {
            mt[0] = mt[623];
            i = 1;
        }
        if (j >= n) j = 0;
    }
    for (std::uint32_t k = 623; k > 0; --k) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - i;
        ++i;
        if (i >= 624) {
            mt[0] = mt[623];
            i = 1;
        }
    }
    mt[0] = 0x80000000u;
    return mt;
}

namespace checkpoint_detail {
using ckpt::PyValue;
using namespace py;

namespace {

PyValue mt_words(const MtState& mt) {
    std::vector<PyValue> words;
    for (auto w : mt) words.push_back(integer(w));
    return PyValue::tuple(std::move(words));
}

at::Tensor generator_state(at::Generator gen) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    return gen.get_state();
}

// torch.cuda.manual_seed(seed)'s Philox state (seed, offset 0), for CPU runs: Megatron restores a
// cuda_rng_state unconditionally.
at::Tensor philox_seed_state(std::uint64_t seed) {
    auto t = at::zeros({16}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(t.data_ptr(), &seed, sizeof seed);
    return t;
}

PyValue numpy_state(std::uint32_t seed) {
    const auto mt = numpy_random_seed_state(seed);
    std::string raw(624 * 4, '\0');
    std::memcpy(raw.data(), mt.data(), raw.size());  // little-endian hosts only (checked at build)
    auto dtype = PyValue::object("numpy", "dtype", PyValue::tuple({str("u4"), PyValue::boolean(false), PyValue::boolean(true)}));
    dtype.as_object().has_state = true;
    dtype.as_object().state = PyValue::tuple({integer(3), str("<"), PyValue::none(), PyValue::none(), PyValue::none(),
                                              integer(-1), integer(-1), integer(0)});
    auto array = PyValue::object("numpy.core.multiarray", "_reconstruct",
                                 PyValue::tuple({PyValue::global("numpy", "ndarray"), PyValue::tuple({integer(0)}),
                                                 PyValue::bytes("b")}));
    array.as_object().has_state = true;
    array.as_object().state = PyValue::tuple({integer(1), PyValue::tuple({integer(624)}), dtype, PyValue::boolean(false),
                                              PyValue::bytes(std::move(raw))});
    return PyValue::tuple({str("MT19937"), array, integer(624), integer(0), floating(0.0)});
}

// random.getstate() after random.seed(seed): (version 3, the 624 words and the position, no gauss).
PyValue python_random_state(std::uint64_t seed) {
    auto words = mt_words(python_random_seed_state(seed)).as_tuple();
    words.push_back(integer(624));
    return PyValue::tuple({integer(3), PyValue::tuple(std::move(words)), PyValue::none()});
}

}  // namespace

// ---- save ------------------------------------------------------------------------------------------

void set_rng_states(ckpt::PyDict& r, FileBuilder& file, const flags::TrainArgs& a, const model::GptModel& model) {
    const int tp_rank = model.tensor_parallel().rank;
    const auto seed = static_cast<std::uint64_t>(a.seed);
    r.set("random_rng_state", python_random_state(seed));
    r.set("np_rng_state", numpy_state(static_cast<std::uint32_t>(seed)));
    r.set("torch_rng_state", file.tensor(generator_state(at::detail::getDefaultCPUGenerator())));
    // The model's dropout generators (GptModel::dropout_generator): on the CPU, CPU states in
    // both places, as the real program's CPU runs save them; on a GPU the device's state, and
    // for the tracker (not kept apart there) model_parallel_cuda_manual_seed's seed:
    // seed + 100 × pipeline rank + 2718 + tensor-parallel rank.
    r.set("cuda_rng_state", file.tensor(generator_state(model.dropout_generator())));
    auto tracker = PyValue::dict();
    const std::uint64_t tracker_seed = seed + 100 * static_cast<std::uint64_t>(model.pipeline_stage().rank) + 2718 +
                                       static_cast<std::uint64_t>(tp_rank);
    tracker.as_dict().set("model-parallel-rng", file.tensor(model.separate_attention_dropout_generator()
                                                                ? generator_state(model.attention_dropout_generator())
                                                                : philox_seed_state(tracker_seed)));
    r.set("rng_tracker_states", tracker);
}

// ---- restore ---------------------------------------------------------------------------------------

namespace {

// Sets `gen` to a saved state. A state of another kind of generator than `gen` (a GPU run's 16-byte
// Philox state on the CPU, or a CPU state on a GPU): Philox at offset 0 is its seed, which a CPU
// generator takes; anything else cannot continue the same stream, and the generator keeps its
// seeding (a warning).
void restore_generator(const at::Tensor& state, at::Generator gen, const std::string& where, const std::string& key,
                       std::vector<std::string>& warnings) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    const at::Tensor mine = gen.get_state();
    if (state.numel() == mine.numel() && state.scalar_type() == mine.scalar_type()) {
        gen.set_state(state);
        return;
    }
    if (state.numel() == 16 && state.scalar_type() == at::kByte && gen.device().is_cpu()) {
        std::uint64_t philox[2];
        std::memcpy(philox, state.contiguous().data_ptr(), sizeof philox);
        if (philox[1] == 0) {
            gen.set_current_seed(philox[0]);
            return;
        }
    }
    warnings.push_back(where + ": " + key + " is the state of a " + (state.numel() == 16 ? "GPU (Philox)" : "CPU") +
                       " generator, which this " + (gen.device().is_cpu() ? "CPU" : "GPU") +
                       " run cannot continue; dropout draws from this run's own seeding instead");
}

}  // namespace

std::vector<std::string> restore_rng_states(const ckpt::TorchFile& mp_rank, const model::GptModel& model) {
    const auto& r = mp_rank.root();
    const std::string where = mp_rank.path();
    std::vector<std::string> warnings;
    auto saved = [&](const PyValue* v, const std::string& key) {
        if (!v || v->is_none())
            throw Error(where + " has no " + key + " (saved with --no-save-rng?); resume with --no-load-rng");
        return to_tensor(mp_rank.tensor(*v, key));
    };
    {
        auto cpu = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(cpu.mutex());
        cpu.set_state(saved(r.find("torch_rng_state"), "torch_rng_state"));
    }
    restore_generator(saved(r.find("cuda_rng_state"), "cuda_rng_state"), model.dropout_generator(), where, "cuda_rng_state",
                      warnings);
    if (model.separate_attention_dropout_generator()) {
        const auto* tracker = r.find("rng_tracker_states");
        const PyValue* state = tracker && tracker->type() == ckpt::PyType::Dict ? tracker->find("model-parallel-rng") : nullptr;
        restore_generator(saved(state, "rng_tracker_states['model-parallel-rng']"), model.attention_dropout_generator(), where,
                          "rng_tracker_states['model-parallel-rng']", warnings);
    }
    return warnings;
}

}  // namespace checkpoint_detail
}  // namespace mds::trainer
