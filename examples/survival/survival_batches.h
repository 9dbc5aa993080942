#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "examples/frame/train_loop.h"
#include "examples/frame/trainer_cli.h"
#include "examples/frame/trainer_session.h"
#include "examples/survival/smart_cache.h"
#include "examples/survival/survival_data.h"
#include "examples/survival/survival_options.h"

namespace ddprun::examples {

// survival_trainer's data: the train/val split of the CSV, the batches
// (each micro-batch is its own Cox risk set) and the loop configuration.

struct SurvivalBatch {
  torch::Tensor images;  // [B, 1, D, H, W]
  torch::Tensor time;    // [B]
  torch::Tensor event;   // [B]
};

// The records `items` as one batch; `volume(item)` loads one volume.
StatusOr<SurvivalBatch> MakeSurvivalBatch(
    const std::vector<SurvivalRecord>& records,
    const std::vector<int64_t>& items,
    const std::function<StatusOr<torch::Tensor>(int64_t)>& volume);

// One record's volume at `image_size`; errors name the CSV row.
StatusOr<torch::Tensor> LoadSurvivalRecord(const SurvivalRecord& record,
                                           const std::vector<int64_t>& size);

// {train, val} indices of table.records: by the fold column when the CSV
// has it (logging the counts), else the seeded --val_fraction split;
// TrainerSession::Split's --debug cut (16 / 8) and checks apply.
std::pair<std::vector<int64_t>, std::vector<int64_t>> SplitSurvival(
    TrainerSession& session, TrainerCli& cli, const SurvivalOptions& opt,
    const SurvivalTable& table);

// The training subjects as the loop samples them: the subjects in `train`,
// or with --use_smart_cache the cached fraction (SmartCache, logged), whose
// slots are then the sampler's positions. Load() is thread-safe between
// BeginEpoch() calls (training thread).
class SurvivalTrainSet {
 public:
  SurvivalTrainSet(TrainerSession& session, const SurvivalOptions& opt,
                   const std::vector<SurvivalRecord>& records,
                   std::vector<int64_t> train);

  int64_t size() const;
  // Refreshes the cache for `epoch` and logs what it loaded (no-op
  // without a cache).
  void BeginEpoch(int64_t epoch);
  // The batch of sampler `positions`.
  StatusOr<SurvivalBatch> Load(const std::vector<int64_t>& positions);

 private:
  TrainerSession& session_;
  const std::vector<SurvivalRecord>& records_;
  const std::vector<int64_t> image_size_;
  const std::vector<int64_t> train_;
  std::unique_ptr<SmartCache> cache_;
};

// The loop of `opt` over `dataset_size` positions: per-rank micro-batch
// batch_size / world, at least ResNet3dMinTrainBatch per micro-batch, best
// checkpoint by val_cindex.
LoopConfig SurvivalLoop(const SurvivalOptions& opt, const worker::World& world,
                        int64_t accumulation, int64_t dataset_size);

}  // namespace ddprun::examples
