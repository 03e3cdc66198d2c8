#include "mds/ckpt/torch_stream_writer.h"

#include <algorithm>

#include "mds/ckpt/torch_file.h"  // storage_class_name
#include "mds/util/error.h"

namespace mds::ckpt {

TorchStreamWriter::TorchStreamWriter(std::string path, std::string location)
    : path_(std::move(path)), location_(std::move(location)), out_(path_, TorchZipWriter::archive_name_for(path_)) {}

PyValue TorchStreamWriter::declare(DType dtype, const std::vector<std::int64_t>& shape) {
    if (begun_) throw Error(path_ + ": internal: tensor declared after the object tree was written");
    std::int64_t numel = 1;
    std::vector<PyValue> size, stride(shape.size());
    for (std::size_t i = shape.size(); i-- > 0;) {
        if (shape[i] < 0) throw Error(path_ + ": negative tensor dimension");
        stride[i] = PyValue::integer(numel);
        numel *= shape[i];
    }
    for (auto d : shape) size.push_back(PyValue::integer(d));
    const std::string key = std::to_string(sizes_.size());
    sizes_.push_back(static_cast<std::uint64_t>(numel) * dtype_size(dtype));
    // torch.save's form: _rebuild_tensor_v2(('storage', torch.<T>Storage, key, location, numel), 0, size, stride, False, OrderedDict())
    auto pid = PyValue::persistent_id(PyValue::tuple({PyValue::str("storage"), PyValue::global("torch", storage_class_name(dtype)),
                                                      PyValue::str(key), PyValue::str(location_), PyValue::integer(numel)}));
    auto hooks = PyValue::object("collections", "OrderedDict", PyValue::tuple({}));
    return PyValue::object("torch._utils", "_rebuild_tensor_v2",
                           PyValue::tuple({pid, PyValue::integer(0), PyValue::tuple(std::move(size)), PyValue::tuple(std::move(stride)),
                                           PyValue::boolean(false), hooks}));
}

void TorchStreamWriter::begin(const PyValue& root) {
    if (begun_) throw Error(path_ + ": internal: object tree written twice");
    out_.add_record("data.pkl", write_pickle(root));
    begun_ = true;
}

void TorchStreamWriter::open_next() {
    // Empty storages still get their (empty) record.
    while (!open_ && next_ < sizes_.size()) {
        out_.begin_record("data/" + std::to_string(next_), sizes_[next_]);
        left_ = sizes_[next_++];
        open_ = true;
        if (left_ == 0) {
            out_.end_record();
            open_ = false;
        }
    }
}

void TorchStreamWriter::write(std::span<const std::byte> chunk) {
    if (!begun_) throw Error(path_ + ": internal: storage bytes before the object tree");
    if (chunk.empty()) return;
    open_next();
    if (!open_ || chunk.size() > left_)
        throw Error(path_ + ": internal: " + std::to_string(chunk.size()) + " bytes written past the end of storage " +
                    std::to_string(next_ == 0 ? 0 : next_ - 1));
    out_.write(chunk);
    left_ -= chunk.size();
    if (left_ == 0) {
        out_.end_record();
        open_ = false;
    }
}

void TorchStreamWriter::write_zeros(std::uint64_t nbytes) {
    static const std::vector<std::byte> zeros(1 << 16);
    while (nbytes > 0) {
        const std::uint64_t n = std::min<std::uint64_t>(nbytes, zeros.size());
        write(std::span<const std::byte>(zeros.data(), static_cast<std::size_t>(n)));
        nbytes -= n;
    }
}

std::uint64_t TorchStreamWriter::remaining_in_storage() const { return open_ ? left_ : 0; }

void TorchStreamWriter::finish() {
    if (!begun_) throw Error(path_ + ": internal: finished before the object tree was written");
    open_next();
    if (open_ || next_ != sizes_.size())
        throw Error(path_ + ": internal: storage " + std::to_string(next_ - 1) + " of " + std::to_string(sizes_.size()) + " is incomplete");
    out_.finish();
}

}  // namespace mds::ckpt
