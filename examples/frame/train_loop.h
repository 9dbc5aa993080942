#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddprun/worker/world.h"
#include "examples/frame/batch_loader.h"

namespace ddprun::examples {

// Which validation number picks the "best" checkpoint, and its file in the
// checkpoint dir. After each epoch whose record[metric] beats every earlier
// epoch of the run (resumes included: the best value travels in the
// checkpoints), rank 0 writes <checkpoint dir>/<file> atomically. It is
// outside the keep-last rotation and `--resume_from` takes it.
struct BestCheckpoint {
  std::string metric;  // e.g. "val_cindex"; empty: no best checkpoint
  bool higher_is_better = true;
  std::string file = "best.pt";
};

// The epoch/step loop of one training run (TrainerSession::Run).
struct LoopConfig {
  int64_t dataset_size = 0;  // sampler positions (training items)
  int64_t micro_batch = 1;   // items per micro-batch, per rank
  // Micro-batches per optimizer step (--gradient_accumulation_steps); the
  // sampler hands out micro_batch * accumulation positions per step.
  int64_t accumulation = 1;
  // Samples of one optimizer step over all ranks (for samples/s); 0:
  // micro_batch * accumulation * world size.
  int64_t samples_per_step = 0;
  bool shuffle = true;
  // The smallest micro-batch the model can train on: 2 for a model whose
  // batch norm would see a single value per channel from one sample (e.g.
  // ResNet3d's 1x1x1 deepest maps), else 1. An epoch's last micro-batch
  // that is shorter is merged into the one before it (logged once at the
  // start, with the count); a batch size below it, or a rank's share of the
  // data below it, is a worker::ConfigError at the start (exit 2) naming
  // `batch_flag`, the minimum and `min_micro_batch_reason`.
  int64_t min_micro_batch = 1;
  std::string min_micro_batch_reason;
  // The option that sets micro_batch, and how many of its units one
  // micro-batch sample is (survival's --batch_size counts every rank's
  // samples: the world size), for the messages above.
  std::string batch_flag = "--batch_size";
  int64_t batch_flag_scale = 1;
  // Train until this many epochs are done; 0: --epochs. (ddpm's stages end
  // at epochs * (stage + 1).)
  int64_t end_epoch = 0;
  BestCheckpoint best;
};

// What a trainer plugs into the loop. Per epoch: begin_epoch(epoch) (may be
// null); then per optimizer step, load(positions) for each of its
// micro-batches on loader threads (must be thread-safe and must not throw;
// a bad file is a Status naming it) and step(micro_batches) on the training
// thread (returns this rank's loss, typically TrainerSession::Step); then
// validate(epoch) (may be null) whose JSON becomes the epoch's record.
template <typename Batch>
struct LoopCallbacks {
  std::function<void(int64_t)> begin_epoch;
  typename BatchLoader<Batch>::LoadFn load;
  std::function<double(std::vector<Batch>&)> step;
  std::function<nlohmann::json(int64_t)> validate;
};

// This rank's share (i % world == rank) of `items`: validation sets are
// split without padding so gathered metrics count every sample once.
std::vector<int64_t> RankShare(const worker::World& world,
                               const std::vector<int64_t>& items);

// Seeded split of [0, n) into {train, val} with round(n * val_fraction)
// (at least 1) validation items; identical on every rank.
std::pair<std::vector<int64_t>, std::vector<int64_t>> SplitTrainVal(
    int64_t n, double val_fraction, uint64_t seed);

// The micro-batches of each optimizer step: `positions` (this rank's
// sampler output) cut into steps of micro_batch * accumulation positions
// (the last may be shorter), each cut into micro-batches of micro_batch.
// A last micro-batch shorter than `min_micro_batch` joins the micro-batch
// before it (in its own step, else the previous step's last, which removes
// its step); with fewer positions than `min_micro_batch` in all, one short
// micro-batch is all there is (the caller rejects that case).
std::vector<std::vector<std::vector<int64_t>>> StepMicroBatches(
    const std::vector<int64_t>& positions, int64_t micro_batch,
    int64_t accumulation, int64_t min_micro_batch = 1);

}  // namespace ddprun::examples
