#include "mds/ckpt/tp_reshard.h"

#include <algorithm>
#include <cstring>

#include "mds/util/error.h"

namespace mds::ckpt {
namespace {

std::int64_t product(const std::vector<std::int64_t>& shape, std::size_t from) {
    std::int64_t n = 1;
    for (std::size_t i = from; i < shape.size(); ++i) n *= shape[i];
    return n;
}

bool is_glu_param(const std::string& name) { return name.find("dense_h_to_4h.") != std::string::npos; }

}  // namespace

TpLayout tp_layout(const std::string& name, bool glu) {
    TpLayout l;
    l.rule = tp_rule(name);
    if (glu && l.rule == TpRule::ColumnParallel && is_glu_param(name)) l.sub_params = 2;
    return l;
}

std::vector<std::int64_t> tp_shard_shape(const TpLayout& layout, const std::vector<std::int64_t>& global_shape, int tp,
                                         const std::string& what) {
    if (tp < 1) throw Error(what + ": tensor-parallel degree " + std::to_string(tp));
    if (layout.rule == TpRule::Replicated) return global_shape;
    const std::size_t dim = static_cast<std::size_t>(layout.dim());
    if (global_shape.size() <= dim) throw Error(what + ": " + std::to_string(global_shape.size()) + " dimensions; cannot split dim " + std::to_string(dim));
    const std::int64_t size = global_shape[dim];
    const std::int64_t unit = static_cast<std::int64_t>(layout.sub_params) * tp;
    if (size % unit != 0)
        throw Error(what + ": dimension " + std::to_string(dim) + " of size " + std::to_string(size) + " does not split into " +
                    std::to_string(tp) + " tensor-parallel shards" + (layout.sub_params > 1 ? " (per GLU half)" : ""));
    auto s = global_shape;
    s[dim] = size / tp;
    return s;
}

std::vector<std::byte> tp_shard(const TpLayout& layout, std::span<const std::byte> global, const std::vector<std::int64_t>& shape,
                                std::size_t esize, int tp, int rank) {
    if (layout.rule == TpRule::Replicated) return {global.begin(), global.end()};
    const std::size_t row_bytes = static_cast<std::size_t>(product(shape, 1)) * esize;
    if (layout.rule == TpRule::ColumnParallel) {
        // Each sub-parameter is a block of rows; rank r takes its r-th part of every block.
        const std::int64_t block_rows = shape[0] / layout.sub_params, part_rows = block_rows / tp;
        std::vector<std::byte> out(static_cast<std::size_t>(part_rows * layout.sub_params) * row_bytes);
        for (int s = 0; s < layout.sub_params; ++s)
            std::memcpy(out.data() + static_cast<std::size_t>(s * part_rows) * row_bytes,
                        global.data() + static_cast<std::size_t>(s * block_rows + rank * part_rows) * row_bytes,
                        static_cast<std::size_t>(part_rows) * row_bytes);
        return out;
    }
    // Dim 1: every row contributes its rank-th piece.
    const std::int64_t rows = shape[0];
    const std::size_t inner = static_cast<std::size_t>(product(shape, 2)) * esize;
    const std::size_t piece = static_cast<std::size_t>(shape[1] / tp) * inner;
    std::vector<std::byte> out(static_cast<std::size_t>(rows) * piece);
    for (std::int64_t i = 0; i < rows; ++i)
        std::memcpy(out.data() + static_cast<std::size_t>(i) * piece, global.data() + static_cast<std::size_t>(i) * row_bytes + static_cast<std::size_t>(rank) * piece, piece);
    return out;
}

std::vector<float> tp_merge_fp32(const TpLayout& layout, const std::vector<std::vector<float>>& slices,
                                 const std::vector<std::int64_t>& slice_shape) {
    const std::size_t t = slices.size();
    const std::size_t numel = static_cast<std::size_t>(product(slice_shape, 0));
    for (const auto& s : slices)
        if (s.size() != numel) throw Error("internal: TP slice of " + std::to_string(s.size()) + " elements, expected " + std::to_string(numel));
    if (t == 1) return slices[0];
    if (layout.rule == TpRule::Replicated) {
        bool same = true;
        for (std::size_t r = 1; r < t && same; ++r) same = std::memcmp(slices[r].data(), slices[0].data(), numel * sizeof(float)) == 0;
        if (same) return slices[0];
        std::vector<float> out(slices[0]);
        for (std::size_t r = 1; r < t; ++r)
            for (std::size_t i = 0; i < numel; ++i) out[i] += slices[r][i];
        for (auto& v : out) v /= static_cast<float>(t);
        return out;
    }
    std::vector<float> out(numel * t);
    if (layout.rule == TpRule::ColumnParallel) {
        // Sub-parameter s of rank r lands in block s at position r.
        const std::size_t part = numel / static_cast<std::size_t>(layout.sub_params);
        for (std::size_t r = 0; r < t; ++r)
            for (std::size_t s = 0; s < static_cast<std::size_t>(layout.sub_params); ++s)
                std::memcpy(out.data() + (s * t + r) * part, slices[r].data() + s * part, part * sizeof(float));
        return out;
    }
    const std::size_t rows = static_cast<std::size_t>(slice_shape[0]);
    const std::size_t piece = numel / rows;
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t r = 0; r < t; ++r)
            std::memcpy(out.data() + (i * t + r) * piece, slices[r].data() + i * piece, piece * sizeof(float));
    return out;
}

void glu_rows_to_global(std::vector<std::byte>& data, std::int64_t rows, std::size_t row_bytes, int tp) {
    if (tp == 1) return;
    const std::int64_t per_rank = rows / tp, half = per_rank / 2;
    std::vector<std::byte> out(data.size());
    for (int r = 0; r < tp; ++r)
        for (int s = 0; s < 2; ++s)
            std::memcpy(out.data() + static_cast<std::size_t>(s * (rows / 2) + r * half) * row_bytes,
                        data.data() + static_cast<std::size_t>(r * per_rank + s * half) * row_bytes, static_cast<std::size_t>(half) * row_bytes);
    data.swap(out);
}

void qkv_rows_to_v2(std::vector<std::byte>& rows, std::int64_t np, std::size_t row_bytes, double version) {
    if (version >= 2.0) return;
    const std::int64_t total = static_cast<std::int64_t>(rows.size() / row_bytes);
    const std::int64_t d = total / (3 * np);
    std::vector<std::byte> out(rows.size());
    for (std::int64_t head = 0; head < np; ++head)
        for (std::int64_t c = 0; c < 3; ++c)
            for (std::int64_t e = 0; e < d; ++e) {
                const std::int64_t src = version < 1.0 ? (c * np + head) * d + e : (head * d + e) * 3 + c;
                const std::int64_t dst = (head * 3 + c) * d + e;
                std::memcpy(out.data() + static_cast<std::size_t>(dst) * row_bytes, rows.data() + static_cast<std::size_t>(src) * row_bytes, row_bytes);
            }
    rows.swap(out);
}

std::int64_t padded_vocab_size(std::int64_t original, std::int64_t divisible_by, int tp, std::int64_t pad_vocab_size_to) {
    if (pad_vocab_size_to > 0) {
        if (pad_vocab_size_to < original)
            throw Error("pad_vocab_size_to " + std::to_string(pad_vocab_size_to) + " is below the original vocabulary size " + std::to_string(original));
        return pad_vocab_size_to;
    }
    if (divisible_by < 1) throw Error("make_vocab_size_divisible_by " + std::to_string(divisible_by));
    const std::int64_t multiple = divisible_by * tp;
    return (original + multiple - 1) / multiple * multiple;
}

void repad_vocab_rows(std::vector<std::byte>& data, std::vector<std::int64_t>& shape, std::size_t row_bytes, std::int64_t original,
                      std::int64_t new_rows) {
    const std::int64_t keep = std::min({original, shape[0], new_rows});
    data.resize(static_cast<std::size_t>(new_rows) * row_bytes);
    std::fill(data.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(keep) * row_bytes), data.end(), std::byte{0});
    shape[0] = new_rows;
}

}  // namespace mds::ckpt
