#include "mds/ckpt/torch_file.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <numeric>

#include "mds/util/error.h"
#include "mds/util/safe_paths.h"  // printable

namespace mds::ckpt {
namespace {

struct StorageClass {
    DType dtype;
    const char* name;
};
constexpr std::array<StorageClass, 10> kStorageClasses{{{DType::F64, "DoubleStorage"}, {DType::F32, "FloatStorage"},
                                                       {DType::F16, "HalfStorage"}, {DType::BF16, "BFloat16Storage"},
                                                       {DType::I64, "LongStorage"}, {DType::I32, "IntStorage"},
                                                       {DType::I16, "ShortStorage"}, {DType::I8, "CharStorage"},
                                                       {DType::U8, "ByteStorage"}, {DType::Bool, "BoolStorage"}}};

std::vector<std::int64_t> int_tuple(const PyValue& v, const std::string& where) {
    std::vector<std::int64_t> out;
    if (v.type() != PyType::Tuple) throw Error(where + ": expected a tuple of ints, got " + v.repr(80));
    for (const auto& x : v.as_tuple()) out.push_back(x.as_int());
    return out;
}

}  // namespace

const char* storage_class_name(DType t) {
    for (const auto& s : kStorageClasses)
        if (s.dtype == t) return s.name;
    return "FloatStorage";
}

DType dtype_of_storage_class(const std::string& name, const std::string& where) {
    for (const auto& s : kStorageClasses)
        if (name == s.name) return s.dtype;
    throw Error(where + ": unsupported storage class torch." + name);
}

std::int64_t TorchTensor::numel() const {
    return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

bool TorchTensor::contiguous() const {
    std::int64_t expect = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        if (shape[i] != 1 && stride[i] != expect) return false;
        expect *= shape[i];
    }
    return true;
}

void TorchTensor::verify() const {
    if (!storage_verified || storage_verified->load(std::memory_order_acquire)) return;
    const std::uint32_t got = crc32(storage);
    if (got != storage_crc32) {
        char buf[96];
        std::snprintf(buf, sizeof buf, ": CRC-32 0x%08x, the zip records 0x%08x", got, storage_crc32);
        std::string m = where;
        m += ": storage data/";
        m += printable(storage_key);
        m += " is damaged (";
        m += std::to_string(storage.size());
        m += " bytes";
        m += buf;
        m += "); restore the file from a good copy";
        throw Error(m);
    }
    storage_verified->store(true, std::memory_order_release);
}

std::span<const std::byte> TorchTensor::bytes() const {
    if (!contiguous()) throw Error(where + ": tensor in storage data/" + printable(storage_key) + " is not contiguous");
    verify();
    const auto size = dtype_size(dtype);
    return storage.subspan(static_cast<std::size_t>(storage_offset) * size, static_cast<std::size_t>(numel()) * size);
}

std::vector<std::byte> TorchTensor::gather() const {
    const auto es = static_cast<std::int64_t>(dtype_size(dtype));
    verify();
    if (contiguous()) {
        const auto b = bytes();
        return {b.begin(), b.end()};
    }
    std::vector<std::byte> out(static_cast<std::size_t>(numel() * es));
    std::vector<std::int64_t> idx(shape.size(), 0);
    for (std::int64_t n = 0; n < numel(); ++n) {
        std::int64_t off = storage_offset;
        for (std::size_t d = 0; d < idx.size(); ++d) off += idx[d] * stride[d];
        std::copy_n(storage.data() + off * es, es, out.data() + n * es);
        for (std::size_t d = idx.size(); d-- > 0;) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
    return out;
}

namespace {

// Appends piece by piece: GCC 12 warns (-Wrestrict, a false positive) on "[" + to_string(i) + "]".
std::string index_path(const std::string& path, const std::string& index) {
    std::string s = path;
    s += '[';
    s += index;
    s += ']';
    return s;
}

std::string key_path(const std::string& path, const PyValue& k) {
    if (k.type() == PyType::Str) {
        std::string s = path;
        s += '.';
        s += k.as_str();
        return s;
    }
    return index_path(path, k.type() == PyType::Int ? std::to_string(k.as_int()) : k.repr(40));
}

}  // namespace

PyValue map_tensors(const PyValue& v, const TensorMapper& fn, const std::string& path) {
    switch (v.type()) {
    case PyType::Tuple: {
        std::vector<PyValue> items;
        for (std::size_t i = 0; i < v.as_tuple().size(); ++i)
            items.push_back(map_tensors(v.as_tuple()[i], fn, index_path(path, std::to_string(i))));
        return PyValue::tuple(std::move(items));
    }
    case PyType::List: {
        std::vector<PyValue> items;
        for (std::size_t i = 0; i < v.as_list().size(); ++i)
            items.push_back(map_tensors(v.as_list()[i], fn, index_path(path, std::to_string(i))));
        return PyValue::list(std::move(items));
    }
    case PyType::Dict: {
        auto d = PyValue::dict();
        for (const auto& [k, x] : v.as_dict().items()) d.as_dict().set(k, map_tensors(x, fn, key_path(path, k)));
        return d;
    }
    case PyType::Object: {
        if (TorchFile::is_tensor(v)) return fn(v, path);
        const auto& o = v.as_object();
        auto copy = PyValue::object(o.cls.module, o.cls.name, map_tensors(o.args, fn, path + ".@args"), o.newobj);
        auto& c = copy.as_object();
        c.kwargs = o.kwargs;
        c.has_state = o.has_state;
        // A Namespace's attributes are its state: name them like dict keys.
        const bool ns = v.is_object("argparse", "Namespace");
        if (o.has_state) c.state = map_tensors(o.state, fn, ns ? path : path + ".@state");
        for (std::size_t i = 0; i < o.list_items.size(); ++i)
            c.list_items.push_back(map_tensors(o.list_items[i], fn, index_path(path, std::to_string(i))));
        for (const auto& [k, x] : o.dict_items.items()) c.dict_items.set(k, map_tensors(x, fn, key_path(path, k)));
        return copy;
    }
    default:
        return v;
    }
}

TorchFile::TorchFile(const std::string& path, bool verify) : zip_(path) {
    const auto& pkl = zip_.record_entry("data.pkl");
    if (verify) {
        verified_ = std::make_unique<std::atomic<bool>[]>(zip_.entries().size());
        // The pickle decides every shape and offset: a flipped byte there must not parse into
        // another valid checkpoint.
        const std::uint32_t got = crc32(zip_.data(pkl));
        if (got != pkl.crc32) {
            char buf[96];
            std::snprintf(buf, sizeof buf, "CRC-32 0x%08x, the zip records 0x%08x", got, pkl.crc32);
            throw Error(path + ": data.pkl is damaged (" + std::string(buf) + "); restore the file from a good copy");
        }
    }
    root_ = read_pickle(zip_.data(pkl), path + ": data.pkl");
}

bool TorchFile::is_tensor(const PyValue& v) { return v.is_object("torch._utils", "_rebuild_tensor_v2"); }

namespace {

// a * b and a + b for the view checks, refusing what int64 cannot hold (hostile sizes and strides).
bool mul_ok(std::int64_t a, std::int64_t b, std::int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
bool add_ok(std::int64_t a, std::int64_t b, std::int64_t& out) { return !__builtin_add_overflow(a, b, &out); }

}  // namespace

TorchTensor TorchFile::tensor(const PyValue& v, const std::string& what) const {
    const std::string where = path() + ": " + printable(what, 200);
    if (!is_tensor(v)) throw Error(where + ": expected a tensor (torch._utils._rebuild_tensor_v2), got " + v.repr(120));
    if (v.as_object().args.type() != PyType::Tuple)
        throw Error(where + ": _rebuild_tensor_v2 needs (storage, offset, size, stride, ...), got " + v.repr(160));
    const auto& args = v.as_object().args.as_tuple();
    if (args.size() < 4 || args[0].type() != PyType::PersistentId)
        throw Error(where + ": _rebuild_tensor_v2 needs (storage, offset, size, stride, ...), got " + v.repr(160));
    const auto& pid = args[0].as_persistent_id();
    if (pid.type() != PyType::Tuple || pid.as_tuple().size() != 5 || pid.as_tuple()[0].type() != PyType::Str ||
        pid.as_tuple()[0].as_str() != "storage" || pid.as_tuple()[1].type() != PyType::Global)
        throw Error(where + ": unsupported persistent id " + pid.repr(160) + " (expected ('storage', class, key, location, numel))");
    const auto& p = pid.as_tuple();
    const auto& cls = p[1].as_global();
    if (cls.module != "torch")
        throw Error(where + ": storage class " + printable(cls.module) + "." + printable(cls.name) + " is not torch's");
    TorchTensor t;
    t.where = where;
    t.dtype = dtype_of_storage_class(cls.name, where);
    t.storage_key = p[2].as_str();
    t.location = p[3].as_str();
    const std::int64_t storage_numel = p[4].as_int();
    t.storage_offset = args[1].as_int();
    t.shape = int_tuple(args[2], where + " size");
    t.stride = int_tuple(args[3], where + " stride");
    if (t.shape.size() != t.stride.size()) throw Error(where + ": size and stride have different lengths");
    const ZipEntry& entry = zip_.record_entry("data/" + t.storage_key);
    t.storage = zip_.data(entry);
    t.storage_crc32 = entry.crc32;
    if (verified_) t.storage_verified = &verified_[static_cast<std::size_t>(&entry - zip_.entries().data())];
    const auto esize = static_cast<std::int64_t>(dtype_size(t.dtype));
    if (storage_numel < 0 || t.storage.size() % static_cast<std::size_t>(esize) != 0 ||
        t.storage.size() / static_cast<std::size_t>(esize) != static_cast<std::uint64_t>(storage_numel))
        throw Error(where + ": storage data/" + printable(t.storage_key) + " has " + std::to_string(t.storage.size()) + " bytes, " +
                    std::to_string(storage_numel) + " elements of " + dtype_name(t.dtype) + " need " +
                    (storage_numel >= 0 && storage_numel <= INT64_MAX / esize ? std::to_string(storage_numel * esize) : std::string("more")) +
                    " (a truncated or damaged file?)");
    // The largest element the view touches must lie inside the storage; sizes whose products
    // overflow are refused rather than wrapped.
    std::int64_t last = t.storage_offset, numel = 1;
    bool empty = false;
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
        if (t.shape[i] < 0 || t.stride[i] < 0) throw Error(where + ": negative size or stride");
        if (!mul_ok(numel, t.shape[i], numel)) throw Error(where + ": the size's element count overflows");
        if (t.shape[i] == 0) {
            empty = true;
        } else {
            std::int64_t reach = 0;
            if (!mul_ok(t.shape[i] - 1, t.stride[i], reach) || !add_ok(last, reach, last))
                throw Error(where + ": the view's size and stride reach past any storage");
        }
    }
    std::int64_t nbytes = 0;
    if (!mul_ok(numel, esize, nbytes)) throw Error(where + ": the tensor's byte count overflows");
    if (t.storage_offset < 0 || (!empty && last >= storage_numel))
        throw Error(where + ": the view (offset " + std::to_string(t.storage_offset) + ") reaches element " +
                    std::to_string(last) + " of a storage of " + std::to_string(storage_numel));
    return t;
}

std::vector<std::string> TorchFile::tensors_in_storage(const std::string& key) const {
    std::vector<std::string> paths;
    map_tensors(root_, [&](const PyValue& v, const std::string& at) {
        const auto& args = v.as_object().args;
        if (args.type() == PyType::Tuple && !args.as_tuple().empty() && args.as_tuple()[0].type() == PyType::PersistentId) {
            const auto& pid = args.as_tuple()[0].as_persistent_id();
            if (pid.type() == PyType::Tuple && pid.as_tuple().size() > 2 && pid.as_tuple()[2].type() == PyType::Str &&
                pid.as_tuple()[2].as_str() == key)
                paths.push_back(at.empty() ? std::string("(the top object)") : at);
        }
        return v;
    });
    return paths;
}

TorchSaveWriter::TorchSaveWriter(std::string path, std::string location)
    : path_(std::move(path)), location_(std::move(location)) {}

PyValue TorchSaveWriter::add_tensor(DType dtype, const std::vector<std::int64_t>& shape, StorageSource source) {
    std::int64_t numel = 1;
    for (auto d : shape) {
        if (d < 0) throw Error(path_ + ": negative tensor dimension");
        numel *= d;
    }
    std::vector<PyValue> size, stride(shape.size());
    std::int64_t s = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        stride[i] = PyValue::integer(s);
        s *= shape[i];
    }
    for (auto d : shape) size.push_back(PyValue::integer(d));
    const std::string key = std::to_string(storages_.size());
    storages_.push_back({key, static_cast<std::uint64_t>(numel) * dtype_size(dtype), std::move(source)});
    auto pid = PyValue::persistent_id(PyValue::tuple({PyValue::str("storage"), PyValue::global("torch", storage_class_name(dtype)),
                                                      PyValue::str(key), PyValue::str(location_), PyValue::integer(numel)}));
    auto hooks = PyValue::object("collections", "OrderedDict", PyValue::tuple({}));
    return PyValue::object("torch._utils", "_rebuild_tensor_v2",
                           PyValue::tuple({pid, PyValue::integer(0), PyValue::tuple(std::move(size)),
                                           PyValue::tuple(std::move(stride)), PyValue::boolean(false), hooks}));
}

PyValue TorchSaveWriter::add_tensor(DType dtype, const std::vector<std::int64_t>& shape, std::span<const std::byte> bytes) {
    return add_tensor(dtype, shape, [bytes](TorchZipWriter& out) { out.write(bytes); });
}

void TorchSaveWriter::finish(const PyValue& root) {
    TorchZipWriter out(path_, TorchZipWriter::archive_name_for(path_));
    out.add_record("data.pkl", write_pickle(root));
    for (const auto& s : storages_) {
        out.begin_record("data/" + s.key, s.nbytes);
        s.source(out);
        out.end_record();
    }
    out.finish();
}

}  // namespace mds::ckpt
