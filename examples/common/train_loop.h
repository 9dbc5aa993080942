#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddprun/worker/checkpoint.h"
#include "ddprun/worker/heartbeat.h"
#include "ddprun/worker/metrics.h"
#include "ddprun/worker/sampler.h"
#include "examples/common/batch_loader.h"
#include "examples/common/trainer_support.h"

namespace ddprun::examples {

// The epoch/step skeleton every trainer shares, on top of the worker
// runtime: DistributedSampler over `dataset_size` positions (reshuffled per
// epoch), resume inside an epoch (skips the batches the checkpoint already
// consumed), threaded batch loading, a loss averaged over ranks per step,
// the rank-0 progress line, a checkpoint every CommonOptions::checkpoint_every
// steps and one at the end, and a metrics.jsonl line per epoch.
// All calls are collective: every rank runs the same loop.
class TrainLoop {
 public:
  struct Config {
    int64_t dataset_size = 0;
    int64_t batch_per_rank = 1;
    // Samples one step consumes over all ranks (for samples/s).
    int64_t samples_per_step = 1;
    bool shuffle = true;
  };

  TrainLoop(worker::World world, const CommonOptions& common, Config config,
            worker::Checkpointer* checkpointer, worker::CheckpointParts parts,
            worker::TrainState* state)
      : world_(std::move(world)),
        common_(common),
        config_(config),
        checkpointer_(checkpointer),
        parts_(parts),
        state_(state),
        sampler_(config.dataset_size, world_.world_size(), world_.rank(),
                 SamplerOpts()),
        progress_(world_, common.epochs,
                  sampler_.NumBatches(config.batch_per_rank) * common.epochs,
                  std::chrono::milliseconds(static_cast<int64_t>(
                      common.progress_interval_s * 1000))) {}

  int64_t steps_per_epoch() const {
    return sampler_.NumBatches(config_.batch_per_rank);
  }
  double samples_per_second() const { return progress_.samples_per_second(); }

  // Runs the remaining epochs. Per epoch: begin_epoch(epoch) (may be null),
  // then for each batch of positions load(positions) on loader threads and
  // step(batch) on this thread (forward, DDP backward, optimizer; returns
  // the local loss), then validate(epoch) whose JSON (plus epoch, step,
  // train_loss, samples_per_s, world_size) becomes the metrics line.
  // Throws ConfigError for a failed load (the error names the file).
  template <typename Batch>
  void Run(const std::function<void(int64_t)>& begin_epoch,
           const typename BatchLoader<Batch>::LoadFn& load,
           const std::function<double(Batch&)>& step,
           const std::function<nlohmann::json(int64_t)>& validate,
           int num_workers) {
    for (int64_t epoch = state_->epoch; epoch < common_.epochs; ++epoch) {
      if (begin_epoch) begin_epoch(epoch);
      sampler_.set_epoch(epoch);
      auto batches =
          MakeBatches(sampler_.Indices(), config_.batch_per_rank, false);
      const int64_t skip =
          std::min<int64_t>(state_->batch_in_epoch, batches.size());
      batches.erase(batches.begin(), batches.begin() + skip);
      BatchLoader<Batch> loader(std::move(batches), load, num_workers);
      double loss_sum = 0;
      for (size_t b = 0; b < loader.size(); ++b) {
        Batch batch = ValueOrThrow(loader.Next());
        const double loss = worker::AllReduceMean(world_, step(batch));
        worker::Heartbeat();  // --watchdog_timeout: this rank progresses
        loss_sum += loss;
        ++state_->step;
        state_->epoch = epoch;
        state_->batch_in_epoch = skip + static_cast<int64_t>(b) + 1;
        progress_.Update(epoch, state_->step, loss, config_.samples_per_step);
        if (checkpointer_->ShouldSave(state_->step))
          checkpointer_->Save(*state_, parts_);
      }
      progress_.Flush();
      nlohmann::json record =
          validate ? validate(epoch) : nlohmann::json::object();
      state_->epoch = epoch + 1;
      state_->batch_in_epoch = 0;
      record["epoch"] = epoch + 1;
      record["step"] = state_->step;
      record["train_loss"] = loader.size() ? loss_sum / loader.size() : 0.0;
      record["samples_per_s"] = progress_.samples_per_second();
      record["world_size"] = world_.world_size();
      WriteEpochMetrics(world_, common_.output_dir, record);
      last_metrics_ = record;
    }
    checkpointer_->Save(*state_, parts_);
  }

  // The last epoch's metrics record (empty when no epoch ran).
  const nlohmann::json& last_metrics() const { return last_metrics_; }

 private:
  worker::SamplerOptions SamplerOpts() const {
    worker::SamplerOptions o;
    o.shuffle = config_.shuffle;
    o.seed = common_.seed;
    return o;
  }

  worker::World world_;
  CommonOptions common_;
  Config config_;
  worker::Checkpointer* checkpointer_;
  worker::CheckpointParts parts_;
  worker::TrainState* state_;
  worker::DistributedSampler sampler_;
  worker::ProgressMeter progress_;
  nlohmann::json last_metrics_;
};

// This rank's share (i % world == rank) of `items`: validation sets are
// split without padding so gathered metrics count every sample once.
std::vector<int64_t> RankShare(const worker::World& world,
                               const std::vector<int64_t>& items);

// Seeded split of [0, n) into {train, val} with round(n * val_fraction)
// (at least 1) validation items; identical on every rank.
std::pair<std::vector<int64_t>, std::vector<int64_t>> SplitTrainVal(
    int64_t n, double val_fraction, uint64_t seed);

}  // namespace ddprun::examples
