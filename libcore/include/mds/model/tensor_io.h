// Moving tensors between LibTorch and the plain-byte containers of the ckpt area (safetensors).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "mds/ckpt/safetensors.h"

namespace mds::model {

class GptModel;

ckpt::DType to_ckpt_dtype(c10::ScalarType t);  // throws mds::Error for a type safetensors lacks
c10::ScalarType to_scalar_type(ckpt::DType t);

// A CPU tensor owning a copy of the view's bytes.
at::Tensor to_tensor(const ckpt::TensorView& view);

// Writes named tensors (any device, made contiguous on the CPU) to a safetensors file, atomically.
void save_tensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                  const std::map<std::string, std::string>& metadata = {});

// Copies every parameter of `model` from `file`, where it is named Parameter::full_name()
// ("03.self_attention.dense.weight"). Every parameter must be present with its exact shape; the
// dtype is converted. Errors name the file and the parameter.
void load_parameters(GptModel& model, const ckpt::SafetensorsFile& file);
// The parameters of `model` under their full names.
std::vector<std::pair<std::string, at::Tensor>> named_parameters(const GptModel& model);

}  // namespace mds::model
