// Forward + backward of one 3D convolution on a single-sample CPU batch:
// torch::nn::Conv3d against worker::Conv3d (same weights), and torch's layer
// on a batch of two for scale, in one process, one intra-op thread. Prints
// the median of each and the ratio torch/ours per layer shape: the layers
// of ddpm's UNet at the sizes bench/trainer_throughput trains on, and a
// wider one. Usage: batch_one_conv3d_bench [ROUNDS] (default 15).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "ddprun/worker/conv3d.h"

namespace {

namespace nn = torch::nn;

template <typename Layer>
double MedianMs(Layer& layer, const torch::Tensor& x, int rounds) {
  std::vector<double> ms;
  for (int r = 0; r < rounds + 2; ++r) {
    layer->zero_grad();
    torch::Tensor in = x.detach().requires_grad_(true);
    const auto start = std::chrono::steady_clock::now();
    layer->forward(in).square().sum().backward();
    const double t = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    if (r >= 2) ms.push_back(t);  // two warm-ups
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  at::set_num_threads(1);
  torch::manual_seed(0);
  struct Case {
    const char* name;
    nn::Conv3dOptions options;
    std::vector<int64_t> input;
  };
  const std::vector<Case> cases = {
      {"ddpm 4->8 3x3x3 at 16^3",
       nn::Conv3dOptions(4, 8, 3).padding(1),
       {1, 4, 16, 16, 16}},
      {"ddpm 8->16 3x3x3 at 8^3",
       nn::Conv3dOptions(8, 16, 3).padding(1),
       {1, 8, 8, 8, 8}},
      {"ddpm 8->8 stride 2 at 16^3",
       nn::Conv3dOptions(8, 8, 3).stride(2).padding(1),
       {1, 8, 16, 16, 16}},
      {"32->32 3x3x3 at 16^3",
       nn::Conv3dOptions(32, 32, 3).padding(1),
       {1, 32, 16, 16, 16}},
  };
  std::printf("forward + backward, median of %d, 1 thread, ms\n", rounds);
  std::printf("%-28s %12s %12s %14s %12s\n", "layer", "torch b=1", "ours b=1",
              "torch b=2/2", "torch/ours");
  for (const Case& c : cases) {
    nn::Conv3d plain(c.options);
    ddprun::worker::Conv3d ours(c.options);
    {
      torch::NoGradGuard no_grad;
      ours->weight.copy_(plain->weight);
      ours->bias.copy_(plain->bias);
    }
    const torch::Tensor x = torch::randn(c.input);
    std::vector<int64_t> pair = c.input;
    pair[0] = 2;
    const double torch_one = MedianMs(plain, x, rounds);
    const double ours_one = MedianMs(ours, x, rounds);
    const double torch_two = MedianMs(plain, torch::randn(pair), rounds) / 2;
    std::printf("%-28s %12.2f %12.2f %14.2f %11.1fx\n", c.name, torch_one,
                ours_one, torch_two, torch_one / ours_one);
  }
  return 0;
}
