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
#include <string>
#include <vector>

#include "mds/ckpt/torch_file.h"

using namespace mds::ckpt;


int main(int argc, char** argv) {
    try {
        const std::string cmd = argc > 1 ? argv[1] : "";
        if (cmd == "dump" && argc == 3) {
            TorchFile f(argv[2]);
            map_tensors(f.root(), [&](const PyValue& v, const std::string& path) {
                const auto t = f.tensor(v, path);
                const auto bytes = t.gather();
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
            map_tensors(f.root(), [&](const PyValue& v, const std::string& path) {
                if (location.empty()) location = f.tensor(v, path).location;
                return v;
            });
            TorchSaveWriter w(argv[3], location.empty() ? "cpu" : location);
            auto root = map_tensors(f.root(), [&](const PyValue& v, const std::string& path) {
                const auto t = f.tensor(v, path);
                keep.push_back(t.gather());
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
