#include "mds/model/tensor_io.h"

#include <ATen/ATen.h>

#include <c10/core/GradMode.h>

#include <cstring>

#include "mds/model/gpt_model.h"
#include "mds/util/error.h"

namespace mds::model {

ckpt::DType to_ckpt_dtype(c10::ScalarType t) {
    switch (t) {
    case at::kDouble: return ckpt::DType::F64;
    case at::kFloat: return ckpt::DType::F32;
    case at::kHalf: return ckpt::DType::F16;
    case at::kBFloat16: return ckpt::DType::BF16;
    case at::kLong: return ckpt::DType::I64;
    case at::kInt: return ckpt::DType::I32;
    case at::kShort: return ckpt::DType::I16;
    case at::kChar: return ckpt::DType::I8;
    case at::kByte: return ckpt::DType::U8;
    case at::kBool: return ckpt::DType::Bool;
    default: break;
    }
    throw Error(std::string("tensor type ") + c10::toString(t) + " has no safetensors dtype");
}

c10::ScalarType to_scalar_type(ckpt::DType t) {
    switch (t) {
    case ckpt::DType::F64: return at::kDouble;
    case ckpt::DType::F32: return at::kFloat;
    case ckpt::DType::F16: return at::kHalf;
    case ckpt::DType::BF16: return at::kBFloat16;
    case ckpt::DType::I64: return at::kLong;
    case ckpt::DType::I32: return at::kInt;
    case ckpt::DType::I16: return at::kShort;
    case ckpt::DType::I8: return at::kChar;
    case ckpt::DType::U8: return at::kByte;
    case ckpt::DType::Bool: return at::kBool;
    }
    return at::kFloat;
}

at::Tensor to_tensor(const ckpt::TensorView& view) {
    auto t = at::empty(view.shape, at::TensorOptions().dtype(to_scalar_type(view.dtype)));
    if (!view.bytes.empty()) std::memcpy(t.data_ptr(), view.bytes.data(), view.bytes.size());
    return t;
}

void save_tensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                  const std::map<std::string, std::string>& metadata) {
    std::vector<at::Tensor> host;
    std::vector<ckpt::TensorToWrite> out;
    host.reserve(tensors.size());
    for (const auto& [name, t] : tensors) {
        host.push_back(t.detach().to(at::kCPU).contiguous());
        const auto& c = host.back();
        out.push_back({name, to_ckpt_dtype(c.scalar_type()), c.sizes().vec(), c.data_ptr()});
    }
    ckpt::write_safetensors(path, out, metadata);
}

void load_parameters(GptModel& model, const ckpt::SafetensorsFile& file) {
    c10::NoGradGuard no_grad;
    for (auto& p : model.parameters()) {
        const auto name = p.full_name();
        const auto& view = file.at(name);
        if (view.shape != p.tensor.sizes().vec())
            throw Error(file.path() + ": tensor \"" + name + "\" has shape " + c10::str(c10::IntArrayRef(view.shape)) +
                        ", the model needs " + c10::str(p.tensor.sizes()));
        p.tensor.copy_(to_tensor(view));
    }
}

std::vector<std::pair<std::string, at::Tensor>> named_parameters(const GptModel& model) {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& p : model.parameters()) out.emplace_back(p.full_name(), p.tensor);
    return out;
}

}  // namespace mds::model
