// Scalars from TensorBoard event files (events.out.tfevents.*): TFRecord framing with masked
// CRC-32C (observe/crc32c.h) around tensorflow.Event protobufs. Reads both forms of a scalar:
// Summary.Value.simple_value (mds's writer, torch's SummaryWriter, TF1) and a one-element
// Summary.Value.tensor (TF2's tf.summary.scalar, plugin "scalars"). Wire format:
// tensorflow/core/util/event.proto, framework/summary.proto, framework/tensor.proto.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mds::report {

struct ScalarEvent {
    std::string tag;
    std::int64_t step = 0;
    double wall_time = 0;
    double value = 0;
};

struct EventFileScalars {
    std::vector<ScalarEvent> scalars;  // file order
    std::size_t records = 0;           // TFRecords read (events of every kind)
    std::size_t truncated_bytes = 0;   // an incomplete last record (a file still being written), left out
};

// Decodes the scalars of one Event message; nullopt-free: an event without scalars gives none.
// Throws mds::Error ("<where>: ...") for a malformed protobuf.
std::vector<ScalarEvent> decode_event_scalars(std::string_view event, const std::string& where);

// The scalars of a whole event file's bytes. Throws mds::Error naming `source` and the byte
// offset on a CRC mismatch or a malformed event; a cut-off last record is not an error.
EventFileScalars parse_event_file(std::string_view bytes, const std::string& source);
// Reads and parses a file.
EventFileScalars read_event_file(const std::string& path);

}  // namespace mds::report
