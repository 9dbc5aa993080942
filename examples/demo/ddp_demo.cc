// ddp_demo: the smallest real job for ddprun (or torchrun) to launch.
// Every rank prints who it is, all-reduces a tensor over Gloo (NCCL on
// CUDA), then trains a linear regression for a few steps with the worker
// runtime's DDP and checks that all ranks hold identical weights.
//   ddprun --standalone --nproc_per_node=2 --no_python ddp_demo [--steps N]
// Runs alone as well (single-process world). Exit codes: see
// worker/include/ddprun/worker/errors.h (1 wrong result, 75 collective).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "ddprun/worker/ddp.h"
#include "ddprun/worker/metrics.h"
#include "ddprun/worker/run_main.h"
#include "ddprun/worker/world.h"

namespace w = ddprun::worker;

namespace {

int Demo(int steps) {
  w::World world = w::InitFromEnv();
  const int r = world.rank(), n = world.world_size();
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::printf(
      "[ddp_demo] rank %d/%d local_rank %d/%d host %s pid %d backend %s "
      "device %s\n",
      r, n, world.local_rank(), world.local_world_size(), host, getpid(),
      world.backend().c_str(), world.device().str().c_str());
  std::fflush(stdout);

  // 1. All-reduce: sum over ranks of (rank + 1) = n(n+1)/2.
  at::Tensor t = at::full({4}, static_cast<float>(r + 1)).to(world.device());
  world.AllReduce(t);
  float got = t[0].item<float>(), want = n * (n + 1) / 2.0f;
  std::printf("[ddp_demo] rank %d all_reduce(sum of rank+1) = %g (expected %g)\n",
              r, got, want);
  if (got != want) throw w::WorkerError("all_reduce returned a wrong sum");

  // 2. DDP: fit y = 3x - 1 from data split across ranks.
  torch::manual_seed(r);  // different init per rank; DDP broadcasts rank 0's
  auto model = std::make_shared<torch::nn::LinearImpl>(1, 1);
  // Model and batches on the world's device (CUDA under NCCL, which serves
  // no CPU tensors); DDP refuses parameters elsewhere.
  model->to(world.device());
  w::DistributedDataParallel ddp(world, model);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  auto gen = at::detail::createCPUGenerator(1234 + r);
  double loss_value = 0;
  for (int s = 1; s <= steps; ++s) {
    at::Tensor x = (at::rand({32, 1}, gen) * 2 - 1).to(world.device());
    at::Tensor y = 3 * x - 1;
    sgd.zero_grad();
    at::Tensor loss = torch::nn::functional::mse_loss(model->forward(x), y);
    ddp.Backward(loss);
    sgd.step();
    loss_value = w::AllReduceMean(world, loss.item<double>());
    if (s == 1 || s == steps || s % 10 == 0) {
      w::LogMain(world, "[ddp_demo] step " + std::to_string(s) + " loss " +
                            std::to_string(loss_value));
    }
  }
  // 3. Every rank must hold rank 0's weights.
  at::Tensor wb = at::cat({model->weight.detach().flatten(),
                           model->bias.detach().flatten()});
  at::Tensor mine = wb.clone();
  world.Broadcast(wb, 0);
  if (!at::equal(mine, wb)) throw w::WorkerError("DDP replicas diverged");
  std::printf("[ddp_demo] rank %d weight %.4f bias %.4f (target 3, -1) OK\n",
              r, mine[0].item<float>(), mine[1].item<float>());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return w::RunMain([&] {
    int steps = 50;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if ((a == "--steps") && i + 1 < argc) {
        steps = std::atoi(argv[++i]);
      } else {
        throw w::ConfigError("usage: ddp_demo [--steps N] (got '" + a + "')");
      }
      if (steps <= 0) throw w::ConfigError("--steps must be positive");
    }
    return Demo(steps);
  });
}
