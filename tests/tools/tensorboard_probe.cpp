// tensorboard_probe LOGDIR SCRIPT: drives mds::observe::TensorBoardWriter for
// tests/crosscheck/test_tensorboard.py. SCRIPT lines (tab-separated):
//   S <tag> <value> <step> <wall_time>   add_scalar (value and wall_time parsed with strtod: nan, inf ok)
//   F                                     flush
//   N                                     close the current writer and open a new one
// Prints the path of every event file it wrote, one per line.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "mds/observe/tensorboard_writer.h"

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: tensorboard_probe LOGDIR SCRIPT\n");
        return 2;
    }
    try {
        std::ifstream script(argv[2]);
        if (!script) throw std::runtime_error(std::string("cannot open ") + argv[2]);
        auto writer = std::make_unique<mds::observe::TensorBoardWriter>(argv[1]);
        std::printf("%s\n", writer->path().c_str());
        std::string line;
        while (std::getline(script, line)) {
            std::vector<std::string> f;
            std::stringstream ss(line);
            for (std::string part; std::getline(ss, part, '\t');) f.push_back(part);
            if (f.empty()) continue;
            if (f[0] == "S" && f.size() == 5) {
                writer->add_scalar(f[1], std::strtod(f[2].c_str(), nullptr), std::strtoll(f[3].c_str(), nullptr, 10),
                                   std::strtod(f[4].c_str(), nullptr));
            } else if (f[0] == "F") {
                writer->flush(true);
            } else if (f[0] == "N") {
                writer.reset();
                writer = std::make_unique<mds::observe::TensorBoardWriter>(argv[1]);
                std::printf("%s\n", writer->path().c_str());
            } else {
                throw std::runtime_error("bad script line: " + line);
            }
        }
        writer->flush();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tensorboard_probe: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
