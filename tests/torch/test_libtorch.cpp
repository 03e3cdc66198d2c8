// The LibTorch the build found (torch 2.11 from .venv) links and computes: the foundation later
// areas (model, optim, train) stand on. Checks a small matmul and autograd against hand values.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <cstdio>

int main() {
    auto a = at::tensor({1.0, 2.0, 3.0, 4.0}, at::kDouble).view({2, 2}).requires_grad_(true);
    auto b = at::tensor({5.0, 6.0, 7.0, 8.0}, at::kDouble).view({2, 2});
    auto c = a.matmul(b);  // [[19, 22], [43, 50]]
    torch::autograd::backward({c.sum()});  // dL/da = ones @ b^T = [[11, 15], [11, 15]]
    bool ok = c[0][0].item<double>() == 19 && c[1][1].item<double>() == 50 &&
              a.grad()[0][0].item<double>() == 11 && a.grad()[1][1].item<double>() == 15;
    std::printf("%s LibTorch %s (CUDA available: %d)\n", ok ? "OK" : "NOT OK", TORCH_VERSION, torch::cuda::is_available());
    return ok ? 0 : 1;
}
