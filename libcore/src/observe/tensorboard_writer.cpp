// TensorBoard event files: hand-encoded tensorflow.Event protobufs in TFRecord framing.
// Wire format reference: tensorflow/core/util/event.proto, tensorflow/core/framework/summary.proto
// (Event: wall_time=1 double, step=2 int64, file_version=3 string, summary=5, source_metadata=10;
// Summary: value=1 repeated; Summary.Value: tag=1 string, simple_value=2 float, tensor=8, metadata=9;
// TensorProto: dtype=1, tensor_shape=2, string_val=8; TensorShapeProto: dim=2, Dim.size=1;
// SummaryMetadata: plugin_data=1, PluginData.plugin_name=1).
#include "mds/observe/tensorboard_writer.h"

#include <fcntl.h>   // open
#include <unistd.h>  // write, fsync, close, getpid, gethostname

#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "mds/observe/crc32c.h"
#include "mds/util/error.h"

namespace mds::observe {

namespace {

// Protobuf wire types.
constexpr unsigned kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, std::uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7F) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, unsigned field, unsigned wire_type) { put_varint(out, field << 3 | wire_type); }

void put_le(std::string& out, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_bytes_field(std::string& out, unsigned field, std::string_view bytes) {
    put_key(out, field, kLengthDelimited);
    put_varint(out, bytes.size());
    out.append(bytes);
}

// Event header fields shared by every event. proto3 leaves out fields at their default; for a
// double that means all-zero bits (so -0.0 is written, as the protobuf runtimes do).
std::string event_head(double wall_time, std::int64_t step) {
    std::string ev;
    if (const auto bits = std::bit_cast<std::uint64_t>(wall_time); bits != 0) {
        put_key(ev, 1, kFixed64);
        put_le(ev, bits, 8);
    }
    if (step != 0) {
        put_key(ev, 2, kVarint);
        put_varint(ev, static_cast<std::uint64_t>(step));  // negative steps take 10 bytes, as int64 does
    }
    return ev;
}

// SummaryWriter numbers the files of one process 0, 1, 2, ... (tensorboard's _global_uid).
std::atomic<long> g_file_counter{0};

std::string host_name() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
    return buf;
}

void write_all(int fd, const std::string& data, const std::string& path) {
    const char* p = data.data();
    std::size_t left = data.size();
    while (left > 0) {
        const ssize_t n = ::write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw Error(errno_message("writing TensorBoard events to " + path, errno));
        }
        p += n;
        left -= static_cast<std::size_t>(n);
    }
}

}  // namespace

std::string tfrecord_frame(std::string_view data) {
    std::string out;
    out.reserve(data.size() + 16);
    put_le(out, data.size(), 8);
    put_le(out, crc32c_mask(crc32c(out.data(), 8)), 4);
    out.append(data);
    put_le(out, crc32c_mask(crc32c(data)), 4);
    return out;
}

std::string encode_file_version_event(double wall_time) {
    std::string ev = event_head(wall_time, 0);
    put_bytes_field(ev, 3, "brain.Event:2");
    std::string source;  // SourceMetadata{writer}: who wrote the file, shown by some TB tools
    put_bytes_field(source, 1, "mds");
    put_bytes_field(ev, 10, source);
    return ev;
}

std::string encode_scalar_event(std::string_view tag, float value, std::int64_t step, double wall_time) {
    std::string v;  // Summary.Value
    if (!tag.empty()) put_bytes_field(v, 1, tag);
    // simple_value is a member of the `value` oneof: written even when 0.
    put_key(v, 2, kFixed32);
    put_le(v, std::bit_cast<std::uint32_t>(value), 4);
    std::string summary;
    put_bytes_field(summary, 1, v);
    std::string ev = event_head(wall_time, step);
    put_bytes_field(ev, 5, summary);
    return ev;
}

std::string encode_text_event(std::string_view tag, std::string_view text, std::int64_t step, double wall_time) {
    std::string shape;  // TensorShapeProto{dim: [Dim{size: 1}]}
    std::string dim;
    put_key(dim, 1, kVarint);
    put_varint(dim, 1);
    put_bytes_field(shape, 2, dim);
    std::string tensor;  // TensorProto{dtype: DT_STRING (7), tensor_shape, string_val: [text]}
    put_key(tensor, 1, kVarint);
    put_varint(tensor, 7);
    put_bytes_field(tensor, 2, shape);
    put_bytes_field(tensor, 8, text);
    std::string plugin;  // SummaryMetadata{plugin_data: PluginData{plugin_name: "text"}} (TextPluginData v0: no content)
    put_bytes_field(plugin, 1, "text");
    std::string metadata;
    put_bytes_field(metadata, 1, plugin);
    std::string v;  // Summary.Value{tag, tensor = 8, metadata = 9}
    std::string full_tag(tag);
    full_tag += "/text_summary";
    put_bytes_field(v, 1, full_tag);
    put_bytes_field(v, 8, tensor);
    put_bytes_field(v, 9, metadata);
    std::string summary;
    put_bytes_field(summary, 1, v);
    std::string ev = event_head(wall_time, step);
    put_bytes_field(ev, 5, summary);
    return ev;
}

std::string tensorboard_event_file_name(std::int64_t unix_seconds, std::string_view hostname, long pid,
                                        long n) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%010lld", static_cast<long long>(unix_seconds));
    std::string name = "events.out.tfevents.";
    name += secs;
    name += '.';
    name += hostname;
    name += '.';
    name += std::to_string(pid);
    name += '.';
    name += std::to_string(n);
    return name;
}

double wall_time_now() {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    return std::chrono::duration<double>(now).count();
}

TensorBoardWriter::TensorBoardWriter(const std::string& log_dir, std::size_t buffer_bytes)
    : buffer_bytes_(buffer_bytes) {
    std::error_code ec;
    std::filesystem::create_directories(log_dir, ec);
    if (ec) throw Error("creating TensorBoard directory " + log_dir + ": " + ec.message());
    const double now = wall_time_now();
    path_ = (std::filesystem::path(log_dir) /
             tensorboard_event_file_name(static_cast<std::int64_t>(now), host_name(), static_cast<long>(::getpid()),
                                         g_file_counter.fetch_add(1)))
                .string();
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(errno_message("opening TensorBoard event file " + path_, errno));
    append_record(encode_file_version_event(now));
    flush();  // the file identifies itself at once, as SummaryWriter's does
}

TensorBoardWriter::~TensorBoardWriter() {
    if (fd_ < 0) return;
    try {
        flush();
    } catch (...) {
        // A destructor cannot report; callers who care call flush() themselves.
    }
    ::close(fd_);
}

void TensorBoardWriter::add_scalar(std::string_view tag, double value, std::int64_t step, double wall_time) {
    append_record(encode_scalar_event(tag, static_cast<float>(value), step, wall_time));
}

void TensorBoardWriter::append_record(std::string_view event) {
    buffer_ += tfrecord_frame(event);
    ++events_;
    if (buffer_.size() >= buffer_bytes_) flush();
}

void TensorBoardWriter::flush(bool sync) {
    if (!buffer_.empty()) {
        write_all(fd_, buffer_, path_);
        buffer_.clear();
    }
    if (sync && ::fsync(fd_) != 0) throw Error(errno_message("fsync of " + path_, errno));
}

}  // namespace mds::observe
