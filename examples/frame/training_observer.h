#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "ddprun/worker/world.h"

namespace ddprun::examples {

// One optimizer step as the loop saw it.
struct StepRecord {
  int64_t epoch = 0;  // 0-based epoch the step belongs to
  int64_t step = 0;   // global optimizer steps so far (1-based)
  double loss = 0;    // mean over ranks and micro-batches
  double learning_rate = 0;
  // All ranks, since the first step of this run (or of this ddpm stage);
  // unset for that first step, whose time is not measured.
  std::optional<double> samples_per_s;
  double loss_scale = 1;     // fp16 dynamic loss scale (1 otherwise)
};

// Where a run's numbers and pictures go: THE place the trainer frame emits
// them (TrainerSession::AddObserver). The loop calls, on every rank and
// from the training thread:
//   OnStep    once per optimizer step (per-step scalars: loss, LR,
//             samples/s, loss scale), in batches: after an epoch's last
//             step (before its validation) or every
//             TrainerSession::kStepsPerLossReduce steps, when one
//             collective has averaged the batch's losses over ranks;
//   OnEpoch   after each epoch's validation, with the metrics record
//             (epoch, step, train_loss, samples_per_s when measured: not
//             after an epoch of a single first step, world_size and the
//             trainer's val_* numbers; what metrics.jsonl gets);
//   OnImage   when a trainer's validation emits a picture of what the
//             model produces (TrainerSession::EmitImage: a CPU tensor
//             [H, W] or [C, H, W], values in [0, 1]);
//   OnFinish  once at the end of a run that trained (not after a re-run
//             that found the run complete).
// Observers that write files do so on rank 0 only. A throwing observer
// stops the run (its error reaches RunMain), so only throw for errors
// worth stopping training for.
class TrainingObserver {
 public:
  virtual ~TrainingObserver() = default;
  virtual void OnStep(const StepRecord& step) { (void)step; }
  virtual void OnEpoch(const nlohmann::json& record) { (void)record; }
  virtual void OnImage(const std::string& tag, int64_t step,
                       const at::Tensor& image) {
    (void)tag, (void)step, (void)image;
  }
  virtual void OnFinish() {}
};

// Appends each epoch's record (plus "time", seconds since the epoch) as a
// line of <output_dir>/metrics.jsonl and logs it ("metrics {...}"); rank 0
// only. Throws WorkerError when the file cannot be appended to. Under
// restart scope "failed" (World::reforms()) an epoch's end that is redone
// after a failure may come twice: a record whose epoch and step equal the
// file's last line's is not appended again.
class MetricsFileObserver : public TrainingObserver {
 public:
  MetricsFileObserver(worker::World world, std::string output_dir)
      : world_(std::move(world)), output_dir_(std::move(output_dir)) {}
  void OnEpoch(const nlohmann::json& record) override;

 private:
  worker::World world_;
  std::string output_dir_;
};

}  // namespace ddprun::examples
