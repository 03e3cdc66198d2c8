#include "mds/data/indexed_dataset_builder.h"

#include <cerrno>
#include <cstdio>  // remove
#include <cstring>
#include <limits>

#include "mds/util/error.h"

namespace mds::data {

IndexedDatasetBuilder::IndexedDatasetBuilder(const std::string& prefix, DType dtype)
    : prefix_(prefix), dtype_(dtype), bin_(std::make_unique<AtomicOutput>(bin_path(prefix), std::size_t{4} << 20)) {
    if (dtype != DType::UInt16 && dtype != DType::Int32 && dtype != DType::Int64 && dtype != DType::UInt8 &&
        dtype != DType::Int16 && dtype != DType::Int8)
        throw Error(std::string("cannot write token ids as ") + dtype_name(dtype));
}

namespace {
template <class T>
void convert(std::span<const std::int32_t> ids, std::vector<char>& out, const std::string& prefix) {
    out.resize(ids.size() * sizeof(T));
    char* p = out.data();
    for (std::int32_t id : ids) {
        // Megatron casts with numpy and wraps silently; a wrapped id is a corrupt dataset, so refuse.
        if (id < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
            id > static_cast<std::int64_t>(std::numeric_limits<T>::max()))
            throw Error(prefix + ": token id " + std::to_string(id) + " does not fit the dataset dtype");
        T v = static_cast<T>(id);
        std::memcpy(p, &v, sizeof v);
        p += sizeof v;
    }
}
}  // namespace

void IndexedDatasetBuilder::add_item(std::span<const std::int32_t> ids) {
    // Every check comes before the write, so a refused item leaves .bin and sizes consistent.
    if (ids.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
        throw Error(prefix_ + ": a sequence of " + std::to_string(ids.size()) + " tokens does not fit the int32 sizes array");
    switch (dtype_) {
        case DType::UInt8: convert<std::uint8_t>(ids, scratch_, prefix_); break;
        case DType::Int8: convert<std::int8_t>(ids, scratch_, prefix_); break;
        case DType::Int16: convert<std::int16_t>(ids, scratch_, prefix_); break;
        case DType::UInt16: convert<std::uint16_t>(ids, scratch_, prefix_); break;
        case DType::Int32: convert<std::int32_t>(ids, scratch_, prefix_); break;
        case DType::Int64: convert<std::int64_t>(ids, scratch_, prefix_); break;
        default: throw Error("internal: unsupported dtype");
    }
    bin_->write(scratch_.data(), scratch_.size());
    sizes_.push_back(static_cast<std::int32_t>(ids.size()));
    tokens_ += ids.size();
}

void IndexedDatasetBuilder::end_document() { doc_idx_.push_back(static_cast<std::int64_t>(sizes_.size())); }

void IndexedDatasetBuilder::merge(const std::string& prefix) {
    IndexedDataset other(prefix);
    if (other.dtype() != dtype_)
        throw Error(idx_path(prefix) + ": dtype " + dtype_name(other.dtype()) + " differs from " + dtype_name(dtype_) +
                    " of the datasets merged before it");
    auto offset = static_cast<std::int64_t>(sizes_.size());
    const auto& sizes = other.sizes();
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        sizes_.push_back(sizes[i]);
        tokens_ += static_cast<std::uint64_t>(sizes[i]);
    }
    const auto& docs = other.doc_idx();
    for (std::size_t i = 1; i < docs.size(); ++i) doc_idx_.push_back(offset + docs[i]);
    bin_->append_file(bin_path(prefix));
}

std::unique_ptr<AtomicOutput> IndexedDatasetBuilder::write_index() const {
    auto idx = std::make_unique<AtomicOutput>(idx_path(prefix_), std::size_t{4} << 20);
    auto put = [&](const auto& v) { idx->write(&v, sizeof v); };
    idx->write(kIndexMagic, sizeof kIndexMagic);
    put(std::uint64_t{1});
    put(static_cast<std::uint8_t>(dtype_));
    put(static_cast<std::uint64_t>(sizes_.size()));
    put(static_cast<std::uint64_t>(doc_idx_.size()));
    idx->write(sizes_.data(), sizes_.size() * sizeof(std::int32_t));
    // Pointers are byte offsets recomputed from the sizes (exclusive prefix sum), as Megatron does.
    std::vector<std::int64_t> pointers;
    constexpr std::size_t kChunk = 1 << 16;
    pointers.reserve(kChunk);
    std::int64_t ptr = 0;
    const auto item = static_cast<std::int64_t>(dtype_size(dtype_));
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
        pointers.push_back(ptr);
        ptr += static_cast<std::int64_t>(sizes_[i]) * item;
        if (pointers.size() == kChunk) {
            idx->write(pointers.data(), pointers.size() * sizeof(std::int64_t));
            pointers.clear();
        }
    }
    idx->write(pointers.data(), pointers.size() * sizeof(std::int64_t));
    idx->write(doc_idx_.data(), doc_idx_.size() * sizeof(std::int64_t));
    return idx;
}

void IndexedDatasetBuilder::commit_bin() { bin_->commit(); }

void IndexedDatasetBuilder::finalize() { finalize_datasets({this}); }

void finalize_datasets(const std::vector<IndexedDatasetBuilder*>& builders) {
    std::vector<std::unique_ptr<AtomicOutput>> indexes;
    for (auto* b : builders) indexes.push_back(b->write_index());
    // A stale .idx goes first and the new one comes last: an .idx under its final name always
    // describes the .bin beside it (a crash in between leaves a .bin without .idx, never a mismatch).
    for (const auto& idx : indexes) {
        const std::string& path = idx->final_path();
        if (file_exists(path) && std::remove(path.c_str()) != 0) throw Error(errno_message("cannot replace " + path, errno));
    }
    for (auto* b : builders) b->commit_bin();
    for (auto& idx : indexes) idx->commit();
}

void merge_datasets(const std::vector<std::string>& input_prefixes, const std::string& output_prefix) {
    if (input_prefixes.empty()) throw Error("nothing to merge: no input datasets");
    DType dtype = IndexedDataset(input_prefixes.front()).dtype();
    IndexedDatasetBuilder builder(output_prefix, dtype);
    for (const auto& p : input_prefixes) {
        if (p == output_prefix) throw Error("the output prefix " + output_prefix + " is also an input");
        builder.merge(p);
    }
    builder.finalize();
}

}  // namespace mds::data
