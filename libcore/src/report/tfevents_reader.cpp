// TensorBoard event-file reader (tfevents_reader.h). Protobuf decoding by hand, as the writer
// (observe/tensorboard_writer.cpp) encodes by hand: Event {wall_time=1 double, step=2 int64,
// summary=5}; Summary {value=1 repeated}; Summary.Value {tag=1, simple_value=2 float, metadata=9
// (SummaryMetadata {plugin_data=1 {plugin_name=1}}), tensor=8}; TensorProto {dtype=1,
// tensor_shape=2, tensor_content=4, float_val=5, double_val=6, int_val=7, int64_val=10, half_val=13}.
#include "mds/report/tfevents_reader.h"

#include <bit>
#include <cmath>  // ldexp, nan, HUGE_VAL
#include <cstring>

#include "mds/observe/crc32c.h"
#include "mds/util/error.h"
#include "mds/util/files.h"  // MappedFile

namespace mds::report {

namespace {

constexpr unsigned kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

// A protobuf field: number, wire type and its payload (integer value or bytes).
struct Field {
    unsigned number = 0;
    unsigned wire = 0;
    std::uint64_t value = 0;  // varint, fixed32, fixed64
    std::string_view bytes;   // length-delimited
};

class Reader {
public:
    Reader(std::string_view data, const std::string& where) : data_(data), where_(where) {}
    bool done() const { return pos_ >= data_.size(); }

    std::uint64_t varint() {
        std::uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (pos_ >= data_.size()) fail("a varint runs past the end");
            const auto b = static_cast<unsigned char>(data_[pos_++]);
            v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
            if (!(b & 0x80)) return v;
        }
        fail("a varint longer than 10 bytes");
    }
    std::uint64_t fixed(int bytes) {
        if (data_.size() - pos_ < static_cast<std::size_t>(bytes)) fail("a fixed-width value runs past the end");
        std::uint64_t v = 0;
        for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i);
        pos_ += static_cast<std::size_t>(bytes);
        return v;
    }
    Field next() {
        Field f;
        const std::uint64_t key = varint();
        f.number = static_cast<unsigned>(key >> 3);
        f.wire = static_cast<unsigned>(key & 7);
        switch (f.wire) {
            case kVarint: f.value = varint(); break;
            case kFixed64: f.value = fixed(8); break;
            case kFixed32: f.value = fixed(4); break;
            case kLengthDelimited: {
                const std::uint64_t n = varint();
                if (n > data_.size() - pos_) fail("a length-delimited field of " + std::to_string(n) + " bytes runs past the end");
                f.bytes = data_.substr(pos_, n);
                pos_ += n;
                break;
            }
            default: fail("wire type " + std::to_string(f.wire) + " (field " + std::to_string(f.number) + ") is not one TensorBoard writes");
        }
        return f;
    }
    [[noreturn]] void fail(const std::string& what) const { throw Error(where_ + ": malformed event: " + what); }

private:
    std::string_view data_;
    std::size_t pos_ = 0;
    const std::string& where_;
};

std::string plugin_name(std::string_view metadata, const std::string& where) {
    Reader r(metadata, where);
    while (!r.done()) {
        const Field f = r.next();
        if (f.number == 1 && f.wire == kLengthDelimited) {
            Reader p(f.bytes, where);
            while (!p.done()) {
                const Field g = p.next();
                if (g.number == 1 && g.wire == kLengthDelimited) return std::string(g.bytes);
            }
        }
    }
    return {};
}

// Values of a repeated numeric field, packed or not, appended to `out`.
void append_numbers(const Field& f, unsigned element_bytes, bool is_float, std::vector<double>& out,
                    const std::string& where) {
    auto convert = [&](std::uint64_t bits) -> double {
        if (element_bytes == 4 && is_float) return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
        if (element_bytes == 8 && is_float) return std::bit_cast<double>(bits);
        if (element_bytes == 4) return static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint32_t>(bits)));
        return static_cast<double>(static_cast<std::int64_t>(bits));
    };
    if (f.wire != kLengthDelimited) {
        out.push_back(convert(f.value));
        return;
    }
    Reader r(f.bytes, where);
    while (!r.done()) out.push_back(convert(is_float ? r.fixed(static_cast<int>(element_bytes)) : r.varint()));
}

// IEEE half to double (TensorProto.half_val holds the 16 bits in an int32).
double half_to_double(std::uint32_t h) {
    const std::uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    double v;
    if (exp == 0) v = std::ldexp(static_cast<double>(mant), -24);
    else if (exp == 31) v = mant ? std::nan("") : HUGE_VAL;
    else v = std::ldexp(static_cast<double>(mant | 0x400), static_cast<int>(exp) - 25);
    return sign ? -v : v;
}

// The value of a one-element tensor, nullopt for anything else (text, histograms, images).
std::optional<double> tensor_scalar(std::string_view tensor, const std::string& where) {
    enum Dtype { kFloat = 1, kDouble = 2, kInt32 = 3, kInt64 = 9, kHalf = 19 };
    std::uint64_t dtype = 0;
    std::vector<double> values;
    std::string_view content;
    Reader r(tensor, where);
    while (!r.done()) {
        const Field f = r.next();
        switch (f.number) {
            case 1: dtype = f.value; break;
            case 4: content = f.bytes; break;
            case 5: append_numbers(f, 4, true, values, where); break;
            case 6: append_numbers(f, 8, true, values, where); break;
            case 7: append_numbers(f, 4, false, values, where); break;
            case 10: append_numbers(f, 8, false, values, where); break;
            case 13: {
                std::vector<double> raw;
                append_numbers(f, 4, false, raw, where);
                // raw holds int32 values (a double's cast of a negative one to uint32 would be undefined)
                for (double h : raw) values.push_back(half_to_double(static_cast<std::uint32_t>(static_cast<std::int32_t>(h))));
                break;
            }
            default: break;
        }
    }
    if (!content.empty()) {
        auto le = [&](std::size_t n) {
            std::uint64_t v = 0;
            for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(content[i])) << (8 * i);
            return v;
        };
        if (dtype == kFloat && content.size() == 4) return std::bit_cast<float>(static_cast<std::uint32_t>(le(4)));
        if (dtype == kDouble && content.size() == 8) return std::bit_cast<double>(le(8));
        if (dtype == kInt32 && content.size() == 4) return static_cast<double>(static_cast<std::int32_t>(le(4)));
        if (dtype == kInt64 && content.size() == 8) return static_cast<double>(static_cast<std::int64_t>(le(8)));
        if (dtype == kHalf && content.size() == 2) return half_to_double(static_cast<std::uint32_t>(le(2)));
        return std::nullopt;
    }
    if (values.size() == 1) return values[0];
    return std::nullopt;
}

}  // namespace

std::vector<ScalarEvent> decode_event_scalars(std::string_view event, const std::string& where) {
    double wall_time = 0;
    std::int64_t step = 0;
    std::vector<std::string_view> summaries;
    Reader r(event, where);
    while (!r.done()) {
        const Field f = r.next();
        if (f.number == 1 && f.wire == kFixed64) wall_time = std::bit_cast<double>(f.value);
        else if (f.number == 2 && f.wire == kVarint) step = static_cast<std::int64_t>(f.value);
        else if (f.number == 5 && f.wire == kLengthDelimited) summaries.push_back(f.bytes);
    }
    std::vector<ScalarEvent> out;
    for (const std::string_view summary : summaries) {
        Reader s(summary, where);
        while (!s.done()) {
            const Field value = s.next();
            if (value.number != 1 || value.wire != kLengthDelimited) continue;
            ScalarEvent e;
            e.step = step;
            e.wall_time = wall_time;
            std::optional<double> simple, from_tensor;
            std::string plugin;
            Reader v(value.bytes, where);
            while (!v.done()) {
                const Field g = v.next();
                if (g.number == 1 && g.wire == kLengthDelimited) e.tag = std::string(g.bytes);
                else if (g.number == 2 && g.wire == kFixed32) simple = std::bit_cast<float>(static_cast<std::uint32_t>(g.value));
                else if (g.number == 9 && g.wire == kLengthDelimited) plugin = plugin_name(g.bytes, where);
                else if (g.number == 8 && g.wire == kLengthDelimited) from_tensor = tensor_scalar(g.bytes, where);
            }
            if (simple) e.value = *simple;
            else if (from_tensor && (plugin.empty() || plugin == "scalars")) e.value = *from_tensor;
            else continue;
            out.push_back(std::move(e));
        }
    }
    return out;
}

EventFileScalars parse_event_file(std::string_view bytes, const std::string& source) {
    EventFileScalars out;
    std::size_t pos = 0;
    auto le = [&](std::size_t at, int n) {
        std::uint64_t v = 0;
        for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
        return v;
    };
    while (pos < bytes.size()) {
        const std::string where = source + ": record at byte " + std::to_string(pos);
        if (bytes.size() - pos < 12) {
            out.truncated_bytes = bytes.size() - pos;
            break;
        }
        const std::uint64_t length = le(pos, 8);
        const auto length_crc = static_cast<std::uint32_t>(le(pos + 8, 4));
        if (observe::crc32c_mask(observe::crc32c(bytes.data() + pos, 8)) != length_crc)
            throw Error(where + ": the length's CRC-32C does not match (not a TensorBoard event file, or damaged)");
        if (length > bytes.size() - pos - 12 || bytes.size() - pos - 12 - length < 4) {
            out.truncated_bytes = bytes.size() - pos;
            break;
        }
        const std::string_view data = bytes.substr(pos + 12, length);
        const auto data_crc = static_cast<std::uint32_t>(le(pos + 12 + length, 4));
        if (observe::crc32c_mask(observe::crc32c(data)) != data_crc)
            throw Error(where + ": the event's CRC-32C does not match (damaged file)");
        for (auto& e : decode_event_scalars(data, where)) out.scalars.push_back(std::move(e));
        ++out.records;
        pos += 12 + length + 4;
    }
    return out;
}

EventFileScalars read_event_file(const std::string& path) {
    const MappedFile file(path);
    return parse_event_file({reinterpret_cast<const char*>(file.data()), file.size()}, path);
}

}  // namespace mds::report
