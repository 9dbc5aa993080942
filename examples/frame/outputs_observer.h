#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "ddprun/worker/world.h"
#include "examples/frame/training_observer.h"

namespace ddprun::examples {
namespace outputs {
class RunOutputs;
struct RasterImage;
}

// A picture drawn by examples/outputs (8-bit, interleaved) as what
// TrainerSession::EmitImage takes: [C, H, W] float in [0, 1], its own
// memory (exact: the observer writes k / 255 back as k).
at::Tensor RasterToImage(const outputs::RasterImage& raster);

// Hands what the loop sees to the run outputs (examples/outputs): per step
// train/loss, train/lr, train/samples_per_s (and train/loss_scale under
// fp16 loss scaling); per epoch every "train_<name>" number of the metrics
// record as train/epoch_<name> (train_loss: train/epoch_loss) and every
// "val_<name>" as val/<name>; the trainers' pictures (as
// PNG files under <output_dir>/images/ and TensorBoard images); at the end
// training_curves.png. Rank 0 writes, the others do nothing.
// Output problems (a full disk, a non-finite value) are logged once per
// kind and never stop training. Training thread only.
class RunOutputsObserver : public TrainingObserver {
 public:
  // `resumed_step`: the step training continues from (0 for a fresh run),
  // so the event files and the plot drop what a failed attempt did after it.
  RunOutputsObserver(const worker::World& world, const std::string& output_dir,
                     const std::string& trainer_name, int64_t resumed_step);
  ~RunOutputsObserver() override;

  void OnStep(const StepRecord& step) override;
  void OnEpoch(const nlohmann::json& record) override;
  void OnImage(const std::string& tag, int64_t step,
               const at::Tensor& image) override;
  void OnFinish() override;

 private:
  void Report(const std::string& what, const Status& status);

  worker::World world_;
  std::unique_ptr<outputs::RunOutputs> outputs_;  // null: not rank 0 / failed
  std::set<std::string> reported_;  // the kinds of problem logged
};

}  // namespace ddprun::examples
