// Megatron's gradient accumulation fusion (Megatron-LM's --gradient-accumulation-fusion, mds-train's
// docs/mds-train.md#fused-kernels): in a bf16 run the trainer keeps an fp32 main gradient per parameter (MainGrads);
// the backward of a linear layer's weight then adds its product straight into that fp32 gradient, in the matrix
// product itself, instead of writing a bf16 gradient the trainer adds afterwards (one elementwise pass and one bf16
// rounding less per weight and micro batch).
//
// The model holds one sink per such weight (Parameter::main_grad); the trainer's MainGrads gives it `grad`. The
// backward adds into `grad`, sets `added`, and hands autograd an uninitialized gradient, so that the parameter's
// hooks still run in order; MainGrads' hook then drops that gradient instead of adding it, and clears `added`.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>  // torch::CustomClassHolder: a sink travels in an autograd context's saved data

namespace mds::model {

struct MainGradSink : torch::CustomClassHolder {
    at::Tensor grad;     // the fp32 main gradient, the weight's shape; undefined: the backward returns its gradient
    bool added = false;  // the backward has added this micro batch's gradient into `grad`
};

}  // namespace mds::model
