// One rank of the DDP step benchmark (see run_bench.py): a small conv net,
// SGD, Gloo. Measures the median step time with gradient synchronisation
// and inside NoSync (no communication), prints one JSON line on rank 0.
//   ddp_step_bench WARMUP STEPS BATCH
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/functional.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <torch/optim/sgd.h>

#include "ddprun/worker/ddp.h"
#include "ddprun/worker/run_main.h"
#include "ddprun/worker/world.h"

namespace w = ddprun::worker;
namespace nn = torch::nn;

namespace {

double CpuMs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double MedianMs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Bench(int warmup, int steps, int batch) {
  w::World world = w::InitFromEnv();
  torch::manual_seed(0);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(3, 32, 3).padding(1)),
                     nn::ReLU(),
                     nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)),
                     nn::ReLU(), nn::AdaptiveAvgPool2d(1), nn::Flatten(),
                     nn::Linear(64, 256), nn::ReLU(), nn::Linear(256, 10));
  w::DistributedDataParallel ddp(world, net.ptr());
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01));
  at::Tensor x = at::randn({batch, 3, 32, 32});
  at::Tensor y = at::randint(0, 10, {batch});
  auto step = [&] {
    sgd.zero_grad();
    ddp.Backward(nn::functional::cross_entropy(net->forward(x), y));
    sgd.step();
  };
  // Wall time per step, and process CPU time per step (all threads: compute
  // and Gloo), which a loaded machine distorts much less.
  auto timed = [&](bool sync, double* cpu_median) {
    std::vector<double> ms, cpu;
    for (int i = 0; i < warmup + steps; ++i) {
      world.Barrier();  // same start on all ranks, as the Python side
      double c0 = CpuMs();
      auto t0 = std::chrono::steady_clock::now();
      if (sync) {
        step();
      } else {
        auto scope = ddp.NoSync();
        step();
      }
      auto t1 = std::chrono::steady_clock::now();
      double c1 = CpuMs();
      if (i >= warmup) {
        cpu.push_back(c1 - c0);
        ms.push_back(
            std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    }
    *cpu_median = MedianMs(cpu);
    return MedianMs(ms);
  };
  double sync_cpu = 0, nosync_cpu = 0;
  double sync_ms = timed(true, &sync_cpu);
  double nosync_ms = timed(false, &nosync_cpu);
  if (world.is_main()) {
    std::printf(
        "{\"impl\": \"cpp\", \"world\": %d, \"step_ms\": %.3f, "
        "\"nosync_ms\": %.3f, \"step_cpu_ms\": %.3f, "
        "\"nosync_cpu_ms\": %.3f, \"threads\": %d}\n",
        world.world_size(), sync_ms, nosync_ms, sync_cpu, nosync_cpu,
        at::get_num_threads());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return w::RunMain([&] {
    if (argc != 4)
      throw w::ConfigError("usage: ddp_step_bench WARMUP STEPS BATCH");
    return Bench(std::stoi(argv[1]), std::stoi(argv[2]), std::stoi(argv[3]));
  });
}
