#include "mds/ckpt/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>

#include "mds/util/json_limits.h"
#include "mds/util/error.h"

namespace mds::ckpt {
namespace {

struct DTypeInfo {
    DType type;
    const char* name;
    std::size_t size;
};
constexpr std::array<DTypeInfo, 10> kDTypes{{{DType::F64, "F64", 8}, {DType::F32, "F32", 4}, {DType::F16, "F16", 2},
                                             {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
                                             {DType::I16, "I16", 2}, {DType::I8, "I8", 1}, {DType::U8, "U8", 1},
                                             {DType::Bool, "BOOL", 1}}};

// The reference implementation refuses headers above 100 MB; so do we, before parsing.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

std::uint64_t checked_numel(const std::vector<std::int64_t>& shape, const std::string& where) {
    std::uint64_t n = 1;
    for (auto d : shape) {
        if (d < 0) throw Error(where + ": negative dimension " + std::to_string(d));
        if (d != 0 && n > UINT64_MAX / static_cast<std::uint64_t>(d)) throw Error(where + ": shape overflows");
        n *= static_cast<std::uint64_t>(d);
    }
    return n;
}

float half_to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    std::uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {  // subnormal: normalise
        exp = 113;
        while (!(man & 0x400u)) {
            man <<= 1;
            --exp;
        }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

std::uint16_t float_to_half(float f) {  // round to nearest even
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    const std::uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
    if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow to inf
    if (abs < 0x38800000u) {  // subnormal or zero
        const float scaled = std::abs(f) * 16777216.0f;  // 2^24: units of the smallest subnormal
        std::uint32_t m = static_cast<std::uint32_t>(scaled);
        const float rest = scaled - static_cast<float>(m);
        if (rest > 0.5f || (rest == 0.5f && (m & 1u))) ++m;
        return static_cast<std::uint16_t>(sign | m);
    }
    const std::uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

}  // namespace

const char* dtype_name(DType t) { return kDTypes[static_cast<std::size_t>(t)].name; }
std::size_t dtype_size(DType t) { return kDTypes[static_cast<std::size_t>(t)].size; }

DType parse_dtype(const std::string& name, const std::string& where) {
    for (const auto& d : kDTypes)
        if (name == d.name) return d.type;
    throw Error(where + ": unsupported dtype \"" + name + "\" (expected one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
}

std::int64_t TensorView::numel() const {
    return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
    const auto bytes = file_.bytes();
    if (bytes.size() < 8) throw Error(path + ": not a safetensors file: " + std::to_string(bytes.size()) + " bytes, header length needs 8");
    std::uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<std::uint8_t>(bytes[static_cast<std::size_t>(i)]);
    if (header_len > kMaxHeaderBytes || header_len > bytes.size() - 8)
        throw Error(path + ": header length " + std::to_string(header_len) + " exceeds the file (" +
                    std::to_string(bytes.size()) + " bytes)");
    const char* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
    if (header_len == 0 || header_begin[0] != '{') throw Error(path + ": offset 8: header is not a JSON object");
    check_json_depth(std::string_view(header_begin, header_len), path + ": header");
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(header_begin, header_begin + header_len);
    } catch (const nlohmann::json::parse_error& e) {
        throw Error(path + ": header JSON at offset " + std::to_string(8 + e.byte) + ": " + e.what());
    } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double (found by fuzzing)
        throw Error(path + ": header JSON: " + e.what());
    }
    if (!header.is_object()) throw Error(path + ": header is not a JSON object");

    const std::size_t data_begin = 8 + static_cast<std::size_t>(header_len);
    const std::size_t data_size = bytes.size() - data_begin;
    struct Range {
        std::uint64_t begin, end;
        std::size_t index;
    };
    std::vector<Range> ranges;
    for (const auto& [name, entry] : header.items()) {
        const std::string where = path + ": tensor \"" + name + "\"";
        if (name == "__metadata__") {
            if (!entry.is_object()) throw Error(path + ": __metadata__ must be an object of strings");
            for (const auto& [k, v] : entry.items()) {
                if (!v.is_string()) throw Error(path + ": __metadata__." + k + " must be a string");
                metadata_[k] = v.get<std::string>();
            }
            continue;
        }
        if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
            throw Error(where + ": expected an object with dtype, shape and data_offsets");
        const auto& dt = entry["dtype"];
        const auto& shape = entry["shape"];
        const auto& offsets = entry["data_offsets"];
        if (!dt.is_string()) throw Error(where + ": dtype must be a string");
        if (!shape.is_array()) throw Error(where + ": shape must be an array of integers");
        if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
            throw Error(where + ": data_offsets must be [begin, end] with non-negative integers");
        TensorView t;
        t.name = name;
        t.dtype = parse_dtype(dt.get<std::string>(), where);
        for (const auto& d : shape) {
            if (!d.is_number_integer()) throw Error(where + ": shape must be an array of integers");
            t.shape.push_back(d.get<std::int64_t>());
        }
        const std::uint64_t numel = checked_numel(t.shape, where);
        const auto begin = offsets[0].get<std::uint64_t>();
        const auto end = offsets[1].get<std::uint64_t>();
        if (end < begin || end > data_size)
            throw Error(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                        "] outside the " + std::to_string(data_size) + " data bytes");
        if (numel > UINT64_MAX / dtype_size(t.dtype) || numel * dtype_size(t.dtype) != end - begin)
            throw Error(where + ": shape and dtype need " + std::to_string(numel) + " × " +
                        std::to_string(dtype_size(t.dtype)) + " bytes, data_offsets give " + std::to_string(end - begin));
        t.bytes = bytes.subspan(data_begin + begin, end - begin);
        ranges.push_back({begin, end, tensors_.size()});
        tensors_.push_back(std::move(t));
    }
    // The data must be covered exactly, without holes or overlaps; tensors are kept in file order.
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    std::uint64_t expected = 0;
    for (const auto& r : ranges) {
        if (r.begin != expected)
            throw Error(path + ": tensor \"" + tensors_[r.index].name + "\" starts at data offset " + std::to_string(r.begin) +
                        ", expected " + std::to_string(expected) + " (tensors must be contiguous and non-overlapping)");
        expected = r.end;
    }
    if (expected != data_size)
        throw Error(path + ": tensors cover " + std::to_string(expected) + " of " + std::to_string(data_size) + " data bytes");
    std::vector<TensorView> ordered;
    ordered.reserve(tensors_.size());
    for (const auto& r : ranges) ordered.push_back(std::move(tensors_[r.index]));
    tensors_ = std::move(ordered);
    for (std::size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

bool SafetensorsFile::contains(const std::string& name) const { return index_.count(name) != 0; }

const TensorView& SafetensorsFile::at(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) throw Error(path() + ": no tensor \"" + name + "\"");
    return tensors_[it->second];
}

SafetensorsLayout safetensors_layout(const std::string& path, const std::vector<TensorEntry>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::uint64_t offset = 0;
    std::vector<std::uint64_t> offsets;
    for (const auto& t : tensors) {
        if (t.name == "__metadata__" || header.contains(t.name)) throw Error(path + ": duplicate or reserved tensor name \"" + t.name + "\"");
        const std::uint64_t n = checked_numel(t.shape, path + ": tensor \"" + t.name + "\"") * dtype_size(t.dtype);
        header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
        offsets.push_back(offset);
        offset += n;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    SafetensorsLayout layout;
    for (int i = 0; i < 8; ++i) layout.header.push_back(static_cast<char>(static_cast<std::uint64_t>(text.size()) >> (8 * i)));
    layout.header += text;
    for (auto& o : offsets) o += layout.header.size();
    layout.offsets = std::move(offsets);
    layout.file_size = layout.header.size() + offset;
    return layout;
}

void write_safetensors_streamed(const std::string& path, const std::vector<TensorEntry>& tensors,
                                const std::map<std::string, std::string>& metadata,
                                const std::function<void(std::size_t index, AtomicOutput& out)>& write_data) {
    const auto layout = safetensors_layout(path, tensors, metadata);
    AtomicOutput out(path);
    out.write(layout.header);
    for (std::size_t i = 0; i < tensors.size(); ++i) write_data(i, out);
    if (out.bytes_written() != layout.file_size)
        throw Error("internal: " + path + ": tensor data of " + std::to_string(out.bytes_written() - layout.header.size()) +
                    " bytes, the header says " + std::to_string(layout.file_size - layout.header.size()));
    out.commit();
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    std::vector<TensorEntry> entries;
    for (const auto& t : tensors) entries.push_back({t.name, t.dtype, t.shape});
    write_safetensors_streamed(path, entries, metadata, [&](std::size_t i, AtomicOutput& out) {
        const std::uint64_t n = checked_numel(tensors[i].shape, path) * dtype_size(tensors[i].dtype);
        if (n) out.write(tensors[i].data, static_cast<std::size_t>(n));
    });
}

float load_float(DType t, const std::byte* p) {
    if (t == DType::F32) {
        float f;
        std::memcpy(&f, p, 4);
        return f;
    }
    std::uint16_t h;
    std::memcpy(&h, p, 2);
    if (t == DType::F16) return half_to_float(h);
    const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

void store_float(DType t, float f, std::byte* p) {
    if (t == DType::F32) {
        std::memcpy(p, &f, 4);
        return;
    }
    std::uint16_t h;
    if (t == DType::F16) {
        h = float_to_half(f);
    } else {
        std::uint32_t x;
        std::memcpy(&x, &f, 4);
        h = (x & 0x7fffffffu) > 0x7f800000u ? static_cast<std::uint16_t>((x >> 16) | 0x40u)
                                           : static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
    std::memcpy(p, &h, 2);
}

}  // namespace mds::ckpt
