// One rank of the all-reduce benchmark: the same fp32 buffers summed over
// Gloo (the process group, TCP over loopback) and over the shared memory
// group DDP uses when every rank is on one host, alternating rounds in one
// run. Rank 0 prints, per size, the mean, median and fastest time of an
// all-reduce in a back-to-back stream, and the ratio Gloo / shared memory.
//   build/bin/ddprun --standalone --nproc_per_node=2 --no_python
//       build/bin/shm_allreduce_bench [ITERATIONS] [MB ...]
// Defaults: 200 iterations of 0.2, 0.53, 0.91, 4 and 25 MB (the first three
// are our trainers' gradients per step, bench/trainer_throughput).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "ddprun/worker/errors.h"
#include "ddprun/worker/run_main.h"
#include "ddprun/worker/shared_memory_join.h"
#include "ddprun/worker/world.h"

namespace w = ddprun::worker;

namespace {

struct Times {
  std::vector<double> ms;
  double Mean() const {
    double s = 0;
    for (double t : ms) s += t;
    return ms.empty() ? 0 : s / ms.size();
  }
  double Median() const {
    std::vector<double> v = ms;
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
  }
  double Min() const {
    return ms.empty() ? 0 : *std::min_element(ms.begin(), ms.end());
  }
};

template <typename Fn>
Times Stream(int iterations, Fn&& fn) {
  Times t;
  for (int i = 0; i < iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    t.ms.push_back(std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - start)
                       .count());
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  return w::RunMain([&]() -> int {
    const int iterations = argc > 1 ? std::atoi(argv[1]) : 200;
    std::vector<double> sizes_mb;
    for (int i = 2; i < argc; ++i) sizes_mb.push_back(std::atof(argv[i]));
    if (sizes_mb.empty()) sizes_mb = {0.2, 0.53, 0.91, 4, 25};
    w::World world = w::InitFromEnv();
    if (!world.distributed()) {
      throw w::ConfigError("run it under ddprun --nproc_per_node=2 (or more)");
    }
    std::string why;
    auto group = w::JoinSharedMemoryGroup(world, std::chrono::seconds(60), &why);
    if (!group) throw w::ConfigError("no shared memory group: " + why);
    if (world.is_main()) {
      std::printf("%d ranks, %d iterations per size and transport; the "
                  "shared memory waiters poll %lld us before sleeping\n",
                  world.world_size(), iterations,
                  static_cast<long long>(group->poll().count()));
      std::printf("%8s  %28s  %28s  %14s\n", "MB", "Gloo mean/median/min ms",
                  "shm mean/median/min ms", "Gloo/shm mean");
    }
    for (double mb : sizes_mb) {
      const int64_t n = static_cast<int64_t>(mb * 1e6 / 4);
      at::Tensor a = at::full({n}, static_cast<float>(world.rank() + 1));
      at::Tensor b = a.clone();
      // Warm-up of both paths, then alternate halves so that drift in the
      // machine's load hits both alike.
      world.AllReduce(a);
      if (!group->AllReduceSum(b.data_ptr<float>(), n).ok()) return 3;
      Times gloo, shm;
      for (int half = 0; half < 2; ++half) {
        Times g = Stream(iterations / 2, [&] { world.AllReduce(a); });
        Times s = Stream(iterations / 2, [&] {
          ddprun::Status st = group->AllReduceSum(b.data_ptr<float>(), n);
          if (!st.ok()) throw w::CollectiveError(st.message());
        });
        gloo.ms.insert(gloo.ms.end(), g.ms.begin(), g.ms.end());
        shm.ms.insert(shm.ms.end(), s.ms.begin(), s.ms.end());
      }
      if (world.is_main()) {
        std::printf("%8.2f  %10.3f %8.3f %8.3f  %10.3f %8.3f %8.3f  %13.1fx\n",
                    mb, gloo.Mean(), gloo.Median(), gloo.Min(), shm.Mean(),
                    shm.Median(), shm.Min(), gloo.Mean() / shm.Mean());
        std::fflush(stdout);
      }
    }
    return 0;
  });
}
