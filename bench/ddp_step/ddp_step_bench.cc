// One rank of the DDP step benchmark (see run_bench.py): a small conv net,
// SGD, Gloo. Measures the median step time with gradient synchronisation
// and inside NoSync (no communication), prints one JSON line on rank 0.
// InitFromEnv applies the runtime's malloc tuning (host_allocator.h) like in
// any trainer; DDPRUN_MALLOC_TUNING=0 measures without it.
//   ddp_step_bench WARMUP STEPS BATCH
//   ddp_step_bench --malloc-tunables   (GLIBC_TUNABLES value of that tuning,
//                                       for the Python run of run_bench.py)
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
#include "ddprun/worker/host_allocator.h"
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

double MinorFaults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_minflt);
}

double Median(std::vector<double> v) {
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
  // Wall time per step, process CPU time per step (all threads: compute
  // and Gloo), which a loaded machine distorts much less, and minor page
  // faults per step (memory the allocator gave back and takes again).
  auto timed = [&](bool sync, double* cpu_median, double* faults_median) {
    std::vector<double> ms, cpu, faults;
    for (int i = 0; i < warmup + steps; ++i) {
      world.Barrier();  // same start on all ranks, as the Python side
      double f0 = MinorFaults();
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
      double f1 = MinorFaults();
      if (i >= warmup) {
        faults.push_back(f1 - f0);
        cpu.push_back(c1 - c0);
        ms.push_back(
            std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    }
    *cpu_median = Median(cpu);
    *faults_median = Median(faults);
    return Median(ms);
  };
  double sync_cpu = 0, nosync_cpu = 0, sync_faults = 0, nosync_faults = 0;
  double sync_ms = timed(true, &sync_cpu, &sync_faults);
  double nosync_ms = timed(false, &nosync_cpu, &nosync_faults);
  if (world.is_main()) {
    auto malloc_state = w::DecideHostAllocatorTuning(
        [](const char* name) { return std::getenv(name); });
    std::printf(
        "{\"impl\": \"cpp\", \"world\": %d, \"step_ms\": %.3f, "
        "\"nosync_ms\": %.3f, \"step_cpu_ms\": %.3f, "
        "\"nosync_cpu_ms\": %.3f, \"step_faults\": %.0f, "
        "\"nosync_faults\": %.0f, \"threads\": %d, \"malloc_tuned\": %s}\n",
        world.world_size(), sync_ms, nosync_ms, sync_cpu, nosync_cpu,
        sync_faults, nosync_faults, at::get_num_threads(),
        malloc_state.ok() && malloc_state->apply ? "true" : "false");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--malloc-tunables") {
    std::printf("%s\n", w::MallocTunablesEnvValue().c_str());
    return 0;
  }
  return w::RunMain([&] {
    if (argc != 4)
      throw w::ConfigError("usage: ddp_step_bench WARMUP STEPS BATCH");
    return Bench(std::stoi(argv[1]), std::stoi(argv[2]), std::stoi(argv[3]));
  });
}
