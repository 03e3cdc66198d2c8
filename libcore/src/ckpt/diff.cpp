#include "mds/ckpt/diff.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>  // memcpy
#include <limits>
#include <map>

#include "mds/ckpt/merged_tensors.h"
#include "mds/util/error.h"

namespace mds::ckpt {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One element of any safetensors dtype as a double.
double load_value(DType t, const std::byte* p) {
    switch (t) {
    case DType::F64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::F32: case DType::F16: case DType::BF16: return load_float(t, p);
    case DType::I64: { std::int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DType::I32: { std::int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::I16: { std::int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::I8: return static_cast<double>(static_cast<std::int8_t>(*p));
    case DType::U8: return static_cast<double>(static_cast<std::uint8_t>(*p));
    case DType::Bool: return *p != std::byte{0} ? 1.0 : 0.0;
    }
    return 0;
}

std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

// Elementwise comparison of two tensors of one shape into `d` (numpy.isclose's rule: |a - b| <=
// atol + rtol * |b|; infinities equal only to themselves; NaN against NaN counts as equal, since a
// checkpoint holding NaN at the same place on both sides is the same checkpoint).
void compare_values(const GlobalTensor& a, const GlobalTensor& b, double atol, double rtol, TensorDiff& d) {
    const std::size_t ea = dtype_size(a.dtype), eb = dtype_size(b.dtype);
    const auto n = static_cast<std::size_t>(numel_of(a.shape));
    double diff_sq = 0, a_sq = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double x = load_value(a.dtype, a.data.data() + i * ea), y = load_value(b.dtype, b.data.data() + i * eb);
        double abs = 0;
        bool differ = false;
        if (std::isnan(x) || std::isnan(y)) {
            differ = std::isnan(x) != std::isnan(y);
            abs = differ ? kInf : 0;
        } else if (std::isinf(x) || std::isinf(y)) {
            differ = x != y;
            abs = differ ? kInf : 0;
        } else {
            abs = std::fabs(x - y);
            differ = !(abs <= atol + rtol * std::fabs(y));
            diff_sq += abs * abs;
            a_sq += x * x;
        }
        if (differ) ++d.differing;
        d.max_abs = std::max(d.max_abs, abs);
        if (abs > 0) d.max_rel = std::max(d.max_rel, y == 0 || std::isinf(abs) ? kInf : abs / std::fabs(y));
    }
    d.numel = n;
    d.diff_norm = std::sqrt(diff_sq);
    d.norm_a = std::sqrt(a_sq);
}

// The word embedding (and its optimizer states) of two vocabulary paddings: its first rows, up to
// the original vocabulary size when a side records it, are what both models use.
bool vocab_rows(const MergedTensorInfo& a, const MergedTensorInfo& b, std::int64_t original, std::int64_t& rows) {
    const std::string base = a.name.substr(0, a.name.find(':'));
    if (base != "embedding.word_embeddings.weight" || a.shape.size() != b.shape.size() || a.shape.empty()) return false;
    for (std::size_t k = 1; k < a.shape.size(); ++k)
        if (a.shape[k] != b.shape[k]) return false;
    rows = std::min(a.shape[0], b.shape[0]);
    if (original > 0) rows = std::min(rows, original);
    return true;
}

void cut_rows(GlobalTensor& g, std::int64_t rows) {
    const std::size_t row_bytes = dtype_size(g.dtype) * static_cast<std::size_t>(numel_of(g.shape) / std::max<std::int64_t>(g.shape[0], 1));
    g.data.resize(static_cast<std::size_t>(rows) * row_bytes);
    g.shape[0] = rows;
}

std::string shape_text(const std::vector<std::int64_t>& s) {
    std::string out = "[";
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (i) out += ',';
        out += std::to_string(s[i]);
    }
    return out + "]";
}

std::string num(double v) {
    if (std::isinf(v)) return "inf";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

nlohmann::json json_num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

// Tied copies inside one side: first stage against last stage.
void check_tied(const MergedTensors& m, const std::string& side, const DiffOptions& o, DiffReport& r) {
    for (const auto& pair : m.tied_pairs(o.optimizer)) {
        const auto first = pair.load_first();
        auto last = pair.load_last();
        TiedDiff t{side, pair.first_where, pair.last_where, {}};
        t.diff.name = pair.name;
        t.diff.shape_a = first.shape;
        t.diff.shape_b = last.shape;
        t.diff.dtype_a = dtype_name(first.dtype);
        t.diff.dtype_b = dtype_name(last.dtype);
        t.diff.compared = first.shape == last.shape;
        if (t.diff.compared) compare_values(first, last, o.atol, o.rtol, t.diff);
        ++r.tied_checked;
        if (t.diff.differs()) r.tied.push_back(std::move(t));
    }
}

}  // namespace

DiffReport diff_models(const std::string& a_path, const std::string& b_path, const DiffOptions& o) {
    auto a = MergedTensors::open(a_path, o.optimizer, o.verify);
    auto b = MergedTensors::open(b_path, o.optimizer, o.verify);
    DiffReport r;
    r.a = a->directory();
    r.b = b->directory();
    r.kind_a = a->kind();
    r.kind_b = b->kind();
    r.atol = o.atol;
    r.rtol = o.rtol;
    for (const auto* m : {a.get(), b.get()})
        for (const auto& n : m->notes()) r.notes.push_back(n);
    const std::int64_t original = std::max(a->original_vocab_size().value_or(0), b->original_vocab_size().value_or(0));

    std::map<std::string, std::size_t> in_b;
    for (std::size_t i = 0; i < b->tensors().size(); ++i) in_b.emplace(b->tensors()[i].name, i);
    std::vector<bool> matched(b->tensors().size(), false);
    const std::size_t total = a->tensors().size();
    for (std::size_t i = 0; i < total; ++i) {
        const auto& ia = a->tensors()[i];
        const auto it = in_b.find(ia.name);
        if (it == in_b.end()) {
            r.only_a.push_back({ia.name, dtype_name(ia.dtype), ia.shape});
            continue;
        }
        matched[it->second] = true;
        const auto& ib = b->tensors()[it->second];
        TensorDiff d;
        d.name = ia.name;
        d.shape_a = ia.shape;
        d.shape_b = ib.shape;
        d.dtype_a = dtype_name(ia.dtype);
        d.dtype_b = dtype_name(ib.dtype);
        std::int64_t rows = 0;
        const bool cut = ia.shape != ib.shape && vocab_rows(ia, ib, original, rows);
        if (ia.shape == ib.shape || cut) {
            auto ga = a->load(i);
            auto gb = b->load(it->second);
            if (cut) {
                cut_rows(ga, rows);
                cut_rows(gb, rows);
                d.note = "first " + std::to_string(rows) + " rows compared (vocabulary padding: " + std::to_string(ia.shape[0]) + " vs " +
                         std::to_string(ib.shape[0]) + " rows)";
            }
            d.compared = true;
            compare_values(ga, gb, o.atol, o.rtol, d);
        }
        ++r.compared;
        if (d.differs()) r.differing.push_back(std::move(d));
        if (o.progress) o.progress(i + 1, total);
    }
    for (std::size_t j = 0; j < matched.size(); ++j)
        if (!matched[j]) r.only_b.push_back({b->tensors()[j].name, dtype_name(b->tensors()[j].dtype), b->tensors()[j].shape});
    check_tied(*a, "A", o, r);
    check_tied(*b, "B", o, r);
    // Shape mismatches first, then by relative difference, then absolute.
    std::stable_sort(r.differing.begin(), r.differing.end(), [](const TensorDiff& x, const TensorDiff& y) {
        if (x.compared != y.compared) return !x.compared;
        if (x.max_rel != y.max_rel) return x.max_rel > y.max_rel;
        return x.max_abs > y.max_abs;
    });
    return r;
}

namespace {

std::string tensor_line(const TensorDiff& d) {
    std::string line = d.name + "  ";
    if (!d.compared) return line + "shape " + shape_text(d.shape_a) + " vs " + shape_text(d.shape_b) + ", " + d.dtype_a +
                             (d.dtype_a != d.dtype_b ? " vs " + d.dtype_b : "") + "  (not compared)";
    line += shape_text(d.shape_a) + " " + d.dtype_a + (d.dtype_a != d.dtype_b ? " vs " + d.dtype_b : "");
    line += "  max|a-b| " + num(d.max_abs) + "  max rel " + num(d.max_rel) + "  differ " + std::to_string(d.differing) + "/" +
            std::to_string(d.numel) + "  |a-b|/|a| " + (d.norm_a > 0 ? num(d.diff_norm / d.norm_a) : d.diff_norm > 0 ? "inf" : "0");
    if (!d.note.empty()) line += "  (" + d.note + ")";
    return line;
}

nlohmann::ordered_json tensor_json(const TensorDiff& d) {
    nlohmann::ordered_json j = {{"name", d.name}, {"shape_a", d.shape_a}, {"shape_b", d.shape_b}, {"dtype_a", d.dtype_a},
                                {"dtype_b", d.dtype_b}, {"compared", d.compared}};
    if (d.compared) {
        j["max_abs"] = json_num(d.max_abs);
        j["max_rel"] = json_num(d.max_rel);
        j["differing"] = d.differing;
        j["numel"] = d.numel;
        j["diff_norm"] = json_num(d.diff_norm);
        j["norm_a"] = json_num(d.norm_a);
    }
    if (!d.note.empty()) j["note"] = d.note;
    return j;
}

}  // namespace

std::string describe_diff(const DiffReport& r, std::size_t top) {
    std::string out;
    const std::size_t shown = top == 0 ? r.differing.size() : std::min(top, r.differing.size());
    for (std::size_t i = 0; i < shown; ++i) out += tensor_line(r.differing[i]) + "\n";
    if (shown < r.differing.size()) out += "... " + std::to_string(r.differing.size() - shown) + " more differing tensors (--top 0 shows all)\n";
    for (const auto* list : {&r.only_a, &r.only_b}) {
        const char* side = list == &r.only_a ? "A" : "B";
        const std::size_t n = top == 0 ? list->size() : std::min(top, list->size());
        for (std::size_t i = 0; i < n; ++i)
            out += std::string("only in ") + side + ": " + (*list)[i].name + "  " + shape_text((*list)[i].shape) + " " + (*list)[i].dtype + "\n";
        if (n < list->size()) out += "... " + std::to_string(list->size() - n) + " more only in " + side + "\n";
    }
    for (const auto& t : r.tied)
        out += "tied copies differ in " + t.side + ": " + t.diff.name + ": " + t.first_where + " vs " + t.last_where + ": " +
               (t.diff.compared ? "max|a-b| " + num(t.diff.max_abs) + ", " + std::to_string(t.diff.differing) + "/" +
                                      std::to_string(t.diff.numel) + " elements differ"
                                : "shapes " + shape_text(t.diff.shape_a) + " vs " + shape_text(t.diff.shape_b)) +
               "\n";
    out += std::to_string(r.compared) + " tensors compared, " + std::to_string(r.differing.size()) + " differ, " +
           std::to_string(r.only_a.size()) + " only in A, " + std::to_string(r.only_b.size()) + " only in B";
    if (r.tied_checked > 0) out += "; " + std::to_string(r.tied_checked) + " tied copies checked, " + std::to_string(r.tied.size()) + " differ";
    return out + "\n";
}

std::string diff_report_json(const DiffReport& r, std::size_t top) {
    nlohmann::ordered_json j = {{"a", r.a}, {"b", r.b}, {"kind_a", r.kind_a}, {"kind_b", r.kind_b}, {"atol", r.atol}, {"rtol", r.rtol},
                                {"equal", r.equal()}, {"compared", r.compared}, {"differ", r.differing.size()},
                                {"only_in_a_count", r.only_a.size()}, {"only_in_b_count", r.only_b.size()}};
    nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
    const std::size_t shown = top == 0 ? r.differing.size() : std::min(top, r.differing.size());
    for (std::size_t i = 0; i < shown; ++i) tensors.push_back(tensor_json(r.differing[i]));
    j["tensors"] = std::move(tensors);
    for (const auto* list : {&r.only_a, &r.only_b}) {
        nlohmann::ordered_json arr = nlohmann::ordered_json::array();
        for (const auto& t : *list) arr.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", t.dtype}});
        j[list == &r.only_a ? "only_in_a" : "only_in_b"] = std::move(arr);
    }
    j["tied_checked"] = r.tied_checked;
    nlohmann::ordered_json tied = nlohmann::ordered_json::array();
    for (const auto& t : r.tied) {
        auto tj = tensor_json(t.diff);
        tj["side"] = t.side;
        tj["first"] = t.first_where;
        tj["last"] = t.last_where;
        tied.push_back(std::move(tj));
    }
    j["tied_differ"] = std::move(tied);
    j["notes"] = r.notes;
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace mds::ckpt
