// torch_file_probe: mds::ckpt::TorchFile / TorchSaveWriter for tests/crosscheck/test_torch_file.py.
//   torch_file_probe dump FILE       one line per tensor reachable from the root, in traversal order:
//                                    "tensor PATH DTYPE [SHAPE] LOCATION CRC32", CRC-32 of the tensor's bytes
//                                    in row-major order; then "root TYPE"
//   torch_file_probe copy IN OUT     reads IN and writes the same object tree to OUT, every tensor copied
//                                    into its own contiguous storage (location kept from the first tensor)
// Paths: .key for dict / OrderedDict / Namespace entries (str keys), [i] for list and tuple items and
// int keys, .@state / .@args for other objects.
#include <cinttypes>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "mds/ckpt/torch_file.h"

using namespace mds::ckpt;

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

// Row-major bytes of a possibly strided tensor, gathered element by element.
std::vector<std::byte> gather(const TorchTensor& t) {
    const auto es = dtype_size(t.dtype);
    std::vector<std::byte> out(static_cast<std::size_t>(t.numel()) * es);
    std::vector<std::int64_t> idx(t.shape.size(), 0);
    for (std::int64_t n = 0; n < t.numel(); ++n) {
        std::int64_t off = t.storage_offset;
        for (std::size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.stride[d];
        std::copy_n(t.storage.data() + off * static_cast<std::int64_t>(es), es, out.data() + n * static_cast<std::int64_t>(es));
        for (std::size_t d = idx.size(); d-- > 0;) {
            if (++idx[d] < t.shape[d]) break;
            idx[d] = 0;
        }
    }
    return out;
}

// Rebuilds `v` with every tensor replaced by fn(tensor value, path).
PyValue map_tensors(const PyValue& v, const std::string& path, const std::function<PyValue(const PyValue&, const std::string&)>& fn) {
    switch (v.type()) {
    case PyType::Tuple: {
        std::vector<PyValue> items;
        for (std::size_t i = 0; i < v.as_tuple().size(); ++i)
            items.push_back(map_tensors(v.as_tuple()[i], index_path(path, std::to_string(i)), fn));
        return PyValue::tuple(std::move(items));
    }
    case PyType::List: {
        std::vector<PyValue> items;
        for (std::size_t i = 0; i < v.as_list().size(); ++i)
            items.push_back(map_tensors(v.as_list()[i], index_path(path, std::to_string(i)), fn));
        return PyValue::list(std::move(items));
    }
    case PyType::Dict: {
        auto d = PyValue::dict();
        for (const auto& [k, x] : v.as_dict().items()) d.as_dict().set(k, map_tensors(x, key_path(path, k), fn));
        return d;
    }
    case PyType::Object: {
        if (TorchFile::is_tensor(v)) return fn(v, path);
        const auto& o = v.as_object();
        auto copy = PyValue::object(o.cls.module, o.cls.name, map_tensors(o.args, path + ".@args", fn), o.newobj);
        auto& c = copy.as_object();
        c.kwargs = o.kwargs;
        c.has_state = o.has_state;
        const bool ns = v.is_object("argparse", "Namespace");
        if (o.has_state) c.state = map_tensors(o.state, ns ? path : path + ".@state", fn);
        for (std::size_t i = 0; i < o.list_items.size(); ++i)
            c.list_items.push_back(map_tensors(o.list_items[i], index_path(path, std::to_string(i)), fn));
        for (const auto& [k, x] : o.dict_items.items()) c.dict_items.set(k, map_tensors(x, key_path(path, k), fn));
        return copy;
    }
    default:
        return v;
    }
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const std::string cmd = argc > 1 ? argv[1] : "";
        if (cmd == "dump" && argc == 3) {
            TorchFile f(argv[2]);
            map_tensors(f.root(), "", [&](const PyValue& v, const std::string& path) {
                const auto t = f.tensor(v, path);
                const auto bytes = gather(t);
                std::string shape;
                for (auto d : t.shape) {
                    if (!shape.empty()) shape += ',';
                    shape += std::to_string(d);
                }
                std::printf("tensor %s %s [%s] %s %08" PRIx32 "\n", path.empty() ? "." : path.c_str(), dtype_name(t.dtype),
                            shape.c_str(), t.location.c_str(), crc32(bytes));
                return v;
            });
            std::printf("root %s\n", py_type_name(f.root().type()));
            return 0;
        }
        if (cmd == "copy" && argc == 4) {
            TorchFile f(argv[2]);
            std::string location;
            std::vector<std::vector<std::byte>> keep;  // gathered bytes live until finish()
            // First pass: the location of the first tensor, as a checkpoint has one per file.
            map_tensors(f.root(), "", [&](const PyValue& v, const std::string& path) {
                if (location.empty()) location = f.tensor(v, path).location;
                return v;
            });
            TorchSaveWriter w(argv[3], location.empty() ? "cpu" : location);
            auto root = map_tensors(f.root(), "", [&](const PyValue& v, const std::string& path) {
                const auto t = f.tensor(v, path);
                keep.push_back(gather(t));
                return w.add_tensor(t.dtype, t.shape, std::span<const std::byte>(keep.back()));
            });
            w.finish(root);
            return 0;
        }
        std::fprintf(stderr, "usage: torch_file_probe dump FILE | copy IN OUT\n");
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
