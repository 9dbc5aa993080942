#include "examples/common/trainer_support.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>
#include <thread>

#include <torch/torch.h>

#include "ddprun/worker/metrics.h"
#include "examples/common/jsonl_reader.h"
#include "examples/common/train_loop.h"
#include "examples/common/yaml_config.h"

namespace ddprun::examples {

void AddCommonOptions(CLI::App* app, CommonOptions* o) {
  AddConfigOption(app);
  app->option_defaults()->always_capture_default();
  app->add_option("--output_dir", o->output_dir,
                  "Directory for checkpoints/, metrics.jsonl and outputs");
  app->add_option(
      "--make_synthetic", o->make_synthetic,
      "Write a synthetic dataset (real on-disk format) to DIR and exit");
  app->add_option("--n", o->synthetic_n, "Samples written by --make_synthetic");
  app->add_option("--epochs", o->epochs, "Training epochs")
      ->check(CLI::PositiveNumber);
  app->add_option("--seed", o->seed,
                  "Random seed (model init, shuffling, synthetic data)");
  app->add_option("--checkpoint_every", o->checkpoint_every,
                  "Rank 0 saves a checkpoint every N optimizer steps (0: only "
                  "at the end)")
      ->check(CLI::NonNegativeNumber);
  app->add_option(
      "--resume_from", o->resume_from,
      "Checkpoint file to start from (ignored when output_dir/checkpoints "
      "already has a newer run state)");
  app->add_flag("--debug", o->debug,
                "Tiny subset and one epoch, for a quick check");
  app->add_option(
      "--num_workers", o->num_workers,
      "Data-loader threads per rank (-1: auto from cores per local rank)");
  app->add_flag(
      "--amp", o->amp,
      "Mixed precision: bf16 autocast on the CPU, or on the GPU under NCCL");
  app->add_option("--backend", o->backend,
                  "Process group backend: auto, gloo or nccl")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}));
  app->add_option("--progress_interval", o->progress_interval_s,
                  "Seconds between rank-0 progress lines");
  app->add_option("--max_image_pixels", o->max_image_pixels,
                  "Largest image (width x height) a data file may declare; a "
                  "larger one is an error before it is decoded")
      ->check(CLI::PositiveNumber);
  app->add_option("--max_volume_voxels", o->max_volume_voxels,
                  "Largest volume (voxels, all channels) a NIfTI file may "
                  "declare; a larger one is an error before it is read")
      ->check(CLI::PositiveNumber);
}

std::optional<int> ParseFlags(CLI::App* app, int argc, char** argv) {
  try {
    app->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app->exit(e);
  }
  return std::nullopt;
}

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
  torch::manual_seed(options.seed);
  return world;
}

worker::TrainState ResumeOrStart(const worker::World& world,
                                 worker::Checkpointer* checkpointer,
                                 const worker::CheckpointParts& parts,
                                 const std::string& resume_from) {
  std::optional<worker::TrainState> state = checkpointer->LoadLatest(parts);
  if (state) {
    worker::LogMain(world, "resumed from checkpoint at step " +
                               std::to_string(state->step) + " (epoch " +
                               std::to_string(state->epoch) + ", batch " +
                               std::to_string(state->batch_in_epoch) + ")");
    return *state;
  }
  if (!resume_from.empty()) {
    worker::TrainState s = worker::Checkpointer::LoadFile(resume_from, parts);
    worker::LogMain(world, "resumed from " + resume_from + " at step " +
                               std::to_string(s.step));
    return s;
  }
  return worker::TrainState();
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

std::vector<int64_t> RankShare(const worker::World& world,
                               const std::vector<int64_t>& items) {
  std::vector<int64_t> mine;
  for (size_t i = world.rank(); i < items.size(); i += world.world_size())
    mine.push_back(items[i]);
  return mine;
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> SplitTrainVal(
    int64_t n, double val_fraction, uint64_t seed) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  const int64_t n_val = std::clamp<int64_t>(std::llround(n * val_fraction), 1,
                                            std::max<int64_t>(n - 1, 1));
  return {std::vector<int64_t>(order.begin() + n_val, order.end()),
          std::vector<int64_t>(order.begin(), order.begin() + n_val)};
}

}  // namespace ddprun::examples
