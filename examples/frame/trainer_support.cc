#include "examples/frame/trainer_support.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <torch/torch.h>

#include "ddprun/worker/metrics.h"
#include "examples/formats/jsonl_reader.h"

namespace ddprun::examples {

void OkOrThrow(const Status& status) {
  if (!status.ok()) throw worker::ConfigError(status.message());
}

void ToDevice(const c10::Device& device,
              std::initializer_list<at::Tensor*> tensors) {
  for (at::Tensor* t : tensors) {
    if (t->defined() && t->device() != device) {
      *t = t->to(device, /*non_blocking=*/true);
    }
  }
}

worker::World InitTrainerWorld(const CommonOptions& options) {
  worker::InitOptions init = worker::InitOptionsFromEnv();
  if (options.backend != "auto") init.backend = options.backend;
  worker::World world = worker::InitFromEnv(init);
  // OMP_NUM_THREADS wins (torchrun and ddprun set it to 1 per worker);
  // otherwise share the cores among the ranks of this machine.
  int threads = 0;
  if (const char* omp = std::getenv("OMP_NUM_THREADS"))
    threads = std::atoi(omp);
  if (threads <= 0) {
    int cores = static_cast<int>(std::thread::hardware_concurrency());
    threads = std::max(1, cores / std::max(1, world.local_world_size()));
  }
  torch::set_num_threads(threads);
  SeedRank(options.seed, world.rank());
  // One line a check can grep: no silent CPU fallback.
  worker::LogMain(
      world,
      "world: backend " + world.backend() + ", device " + world.device().str() +
          ", " + std::to_string(world.world_size()) + " rank(s)" +
          (world.backend_note().empty() ? std::string()
                                        : " (" + world.backend_note() + ")"));
  return world;
}

void SeedRank(uint64_t seed, int rank) {
  // Rank 0 keeps `seed`: a one-rank run draws what it drew before.
  torch::manual_seed(seed + static_cast<uint64_t>(rank));
}

void WriteEpochMetrics(const worker::World& world,
                       const std::string& output_dir, nlohmann::json record) {
  if (!world.is_main()) return;
  record["time"] = std::chrono::duration<double>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  std::filesystem::create_directories(output_dir);
  const std::string path = output_dir + "/metrics.jsonl";
  if (!AppendJsonl(path, record)) {
    throw worker::WorkerError("cannot append to " + path);
  }
  worker::LogMain(world, "metrics " + record.dump());
}

}  // namespace ddprun::examples
