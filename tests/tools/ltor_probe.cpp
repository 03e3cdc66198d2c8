// ltor_probe: mds::trainer::ltor_masks_and_position_ids for tests/crosscheck/test_ltor_masks.py.
// Reads one case per stdin line, `EOD RESET_POSITION_IDS RESET_ATTENTION_MASK SEQ TOKEN...` (0/1 switches; the
// tokens of all samples, SEQ per sample), and prints one line per case: the position ids, `|`, then the attention
// mask's shape and its elements as 0/1 (1 = not allowed), all space-separated.
#include <ATen/ATen.h>

#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "mds/trainer/micro_batches.h"

int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::int64_t eod = 0, reset_pos = 0, reset_att = 0, seq = 0, v = 0;
        if (!(in >> eod >> reset_pos >> reset_att >> seq) || seq <= 0) {
            std::cerr << "ltor_probe: bad case: " << line << "\n";
            return 2;
        }
        std::vector<std::int64_t> tokens;
        while (in >> v) tokens.push_back(v);
        const auto n = static_cast<std::int64_t>(tokens.size());
        const auto t = at::tensor(tokens, at::kLong).view({n / seq, seq});
        const auto m = mds::trainer::ltor_masks_and_position_ids(t, eod, reset_pos != 0, reset_att != 0);
        const auto pos = m.position_ids.contiguous();
        for (std::int64_t i = 0; i < pos.numel(); ++i) std::cout << pos.data_ptr<std::int64_t>()[i] << ' ';
        std::cout << '|';
        for (auto d : m.attention_mask.sizes()) std::cout << ' ' << d;
        std::cout << " :";
        const auto mask = m.attention_mask.to(at::kLong).contiguous();
        for (std::int64_t i = 0; i < mask.numel(); ++i) std::cout << ' ' << mask.data_ptr<std::int64_t>()[i];
        std::cout << '\n';
    }
    return 0;
}
