// TensorBoard event files written without TensorFlow or protobuf: TFRecord framing (length,
// masked CRC-32C of the length, data, masked CRC-32C of the data) around tensorflow.Event
// messages encoded by hand, the first one carrying file_version "brain.Event:2". Scalars are
// Summary.Value{tag, simple_value}, as torch.utils.tensorboard's SummaryWriter.add_scalar writes
// them, and text as SummaryWriter.add_text writes it, so TensorBoard and Megatron-era tooling read mds's files
// as theirs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mds::observe {

// One TFRecord: uint64 little-endian length, masked CRC-32C of those 8 bytes, the data, masked
// CRC-32C of the data.
std::string tfrecord_frame(std::string_view data);

// Serialized tensorflow.Event messages. Fields at their proto3 default (wall_time +0.0, step 0,
// empty tag) are left out, as every protobuf serializer does, so the bytes equal Python's
// Event.SerializeToString().
std::string encode_file_version_event(double wall_time);  // file_version = "brain.Event:2"
std::string encode_scalar_event(std::string_view tag, float value, std::int64_t step, double wall_time);
// SummaryWriter.add_text's event: Summary.Value{tag "<tag>/text_summary", tensor (DT_STRING, shape [1], the
// text), metadata (plugin "text")}, which TensorBoard's Text tab shows.
std::string encode_text_event(std::string_view tag, std::string_view text, std::int64_t step, double wall_time);

// `events.out.tfevents.<unix seconds, 10 digits>.<hostname>.<pid>.<n>` — the name torch's
// SummaryWriter (tensorboard's EventFileWriter) gives its files.
std::string tensorboard_event_file_name(std::int64_t unix_seconds, std::string_view hostname, long pid,
                                        long n);

// Seconds since the epoch as a double, the wall_time TensorBoard expects.
double wall_time_now();

// An event file in `log_dir` (created if missing), opened for appending. Events are buffered and
// written on flush(), when the buffer passes `buffer_bytes`, and on destruction, whole buffers at
// a time; TensorBoard's reader waits for the rest of a record it finds cut at the end of a live file.
class TensorBoardWriter {
public:
    explicit TensorBoardWriter(const std::string& log_dir, std::size_t buffer_bytes = 64 * 1024);
    ~TensorBoardWriter();
    TensorBoardWriter(const TensorBoardWriter&) = delete;
    TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

    // `value` is stored as float (simple_value), as SummaryWriter does.
    void add_scalar(std::string_view tag, double value, std::int64_t step, double wall_time);
    void add_scalar(std::string_view tag, double value, std::int64_t step) {
        add_scalar(tag, value, step, wall_time_now());
    }

    // As SummaryWriter.add_text: shown in TensorBoard's Text tab under `tag`.
    void add_text(std::string_view tag, std::string_view text, std::int64_t step) {
        append_record(encode_text_event(tag, text, step, wall_time_now()));
    }

    // Writes buffered events; with `sync`, also fsyncs the file.
    void flush(bool sync = false);

    const std::string& path() const { return path_; }
    std::uint64_t events_written() const { return events_; }

private:
    void append_record(std::string_view event);

    std::string path_;
    int fd_ = -1;
    std::string buffer_;
    std::size_t buffer_bytes_;
    std::uint64_t events_ = 0;
};

}  // namespace mds::observe
