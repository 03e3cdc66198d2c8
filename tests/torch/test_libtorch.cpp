// The LibTorch the build found (torch 2.11 from .venv) links and computes: the foundation later
// areas (model, optim, train) stand on. Checks a small matmul and autograd against hand values.
#include <torch/torch.h>

#include <cstdio>

int main() {
    auto a = torch::tensor({{1.0, 2.0}, {3.0, 4.0}}, torch::requires_grad());
    auto b = torch::tensor({{5.0, 6.0}, {7.0, 8.0}});
    auto c = a.matmul(b);  // [[19, 22], [43, 50]]
    c.sum().backward();    // dL/da = ones @ b^T = [[11, 15], [11, 15]]
    bool ok = c[0][0].item<double>() == 19 && c[1][1].item<double>() == 50 &&
              a.grad()[0][0].item<double>() == 11 && a.grad()[1][1].item<double>() == 15;
    std::printf("%s LibTorch %s (CUDA available: %d)\n", ok ? "OK" : "NOT OK", TORCH_VERSION, torch::cuda::is_available());
    return ok ? 0 : 1;
}
