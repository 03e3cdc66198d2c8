// partition_probe: mds::ckpt's pipeline partition functions on stdin cases, one per line, for
// tests/crosscheck/test_ckpt_reshape.py to compare with DeepSpeed's:
//   balanced <dp|bisect> <num_parts> <w0> <w1> ...   ->  the boundaries, space separated
//   uniform <dp|bisect> <num_parts> <num_items>      ->  the boundaries
// A case that mds rejects prints "error: <message>".
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "mds/ckpt/partition.h"
#include "mds/util/error.h"

int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string kind, algo;
        int parts = 0;
        in >> kind >> algo >> parts;
        const auto a = mds::ckpt::parse_partition_algorithm(algo);
        try {
            if (!a) throw mds::Error("unknown algorithm " + algo);
            std::vector<int> out;
            if (kind == "uniform") {
                int items = 0;
                in >> items;
                out = mds::ckpt::partition_uniform(items, parts, *a);
            } else {
                std::vector<std::int64_t> w;
                std::int64_t x;
                while (in >> x) w.push_back(x);
                out = mds::ckpt::partition_balanced(w, parts, *a);
            }
            for (std::size_t i = 0; i < out.size(); ++i) std::cout << (i ? " " : "") << out[i];
            std::cout << "\n";
        } catch (const mds::Error& e) {
            std::cout << "error: " << e.what() << "\n";
        }
    }
    return 0;
}
