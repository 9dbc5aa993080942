#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "ddprun/common/status_or.h"
#include "ddprun/worker/checkpoint.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/world.h"
#include "examples/formats/media_limits.h"

namespace ddprun::examples {

// Options every trainer shares (registered by TrainerCli). Defaults here
// are what --help shows.
struct CommonOptions {
  std::string output_dir;      // checkpoints/, metrics.jsonl, samples
  std::string checkpoint_dir;  // "": <output_dir>/checkpoints
  std::string make_synthetic;  // write a synthetic dataset here and exit
  int64_t synthetic_n = 0;     // samples for --make_synthetic
  int epochs = 1;
  uint64_t seed = 0;
  int64_t checkpoint_every = 20;  // steps; 0 = only at the end of training
  std::string resume_from;        // a checkpoint file
  bool debug = false;             // tiny subset, one epoch
  int num_workers = -1;           // data-loader threads, -1 = auto
  std::string amp;                // "", bf16, fp16 or no (--amp alone: bf16)
  std::string mixed_precision;    // "", no, bf16 or fp16 (the guides' flag)
  int64_t gradient_accumulation_steps = 1;  // micro-batches per step
  int local_rank = -1;                      // --local_rank (legacy launcher)
  std::string backend = "auto";             // gloo, nccl or auto
  double progress_interval_s = 5.0;         // rank-0 progress line period
  bool profile = false;  // per-step time breakdown (step_profiler.h)
  // Size limits of one decoded image / volume (examples/formats/media_limits.h);
  // applied by TrainerCli::Parse.
  int64_t max_image_pixels = MediaLimits().max_image_pixels;
  int64_t max_volume_voxels = MediaLimits().max_volume_voxels;

  std::string CheckpointDir() const {
    return checkpoint_dir.empty() ? output_dir + "/checkpoints"
                                  : checkpoint_dir;
  }
};

// Throws worker::ConfigError (exit code 2, written to the error file) with
// the status message: bad data files abort the run with one clear line.
template <typename T>
T ValueOrThrow(StatusOr<T> value) {
  if (!value.ok()) throw worker::ConfigError(value.status().message());
  return std::move(value).value();
}
void OkOrThrow(const Status& status);

// `value`, or its error with `where` (a list file's "<path>:<line>: ")
// prepended: an error in a volume or image names the CSV row or JSONL line
// that refers to it as well as the file itself.
template <typename T>
StatusOr<T> AtRow(const std::string& where, StatusOr<T> value) {
  if (value.ok() || where.empty()) return value;
  return Status(value.status().code(), where + value.status().message());
}

// Initializes the process group (falls back to a single process) and sets
// Torch's intra-op threads to OMP_NUM_THREADS when set, else cores / local
// ranks, so ranks sharing a machine do not oversubscribe it.
// Seeds Torch's generators with seed + rank (SeedRank) and logs one line
// (rank 0) naming the backend and device.
worker::World InitTrainerWorld(const CommonOptions& options);

// Seeds Torch's default generators (CPU and CUDA) with seed + rank, as the
// cascade trainer does for its noise: every rank draws its own random
// numbers (diffusion timesteps and noise, dropout, augmentation) and a rerun
// draws the same ones. Model initialisation may differ between ranks: DDP
// and ShardedAdam broadcast rank 0's parameters.
void SeedRank(uint64_t seed, int rank);

// Moves each defined tensor to `device` (the world's: CUDA under NCCL, CPU
// under Gloo). Batches are built on CPU by loader threads and moved here, on
// the training thread, right before use.
void ToDevice(const c10::Device& device,
              std::initializer_list<at::Tensor*> tensors);

// Rank 0 appends `record` (plus "time") as one line to
// <output_dir>/metrics.jsonl and logs it; other ranks do nothing.
void WriteEpochMetrics(const worker::World& world,
                       const std::string& output_dir, nlohmann::json record);

}  // namespace ddprun::examples
