// One training step of a trainer's model, for the side-by-side bench
// against Python (bench/model_step/README.md). Each trainer's ModelStep
// builds exactly the model its trainer builds by default (from the trainer's
// model library), the trainer's loss and optimizer with its default
// hyper-parameters, and one random batch of the trainer's default per-rank
// shape, made once on the device, so a step measures forward, loss,
// backward and the optimizer only (no data loading). The Python twins in
// twins.py mirror these classes layer for layer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "bench/model_step/step_precision.h"

namespace ddprun::bench {

struct StepConfig {
  torch::Device device = torch::kCPU;
  // fp32, bf16 or fp16 (StepPrecision).
  std::string precision = "fp32";
};

// Not thread-safe; one step at a time. Construction seeds nothing: call
// torch::manual_seed first for a reproducible model and batch.
class ModelStep {
 public:
  virtual ~ModelStep() = default;

  // Samples one Step trains on (per-rank batch x gradient accumulation).
  virtual int64_t samples_per_step() const = 0;
  // The batch's tensors in a fixed order (twins.py reads them in the same
  // order from an --export file), and a one-line description of it.
  virtual std::vector<torch::Tensor> batch() const = 0;
  virtual std::string batch_description() const = 0;
  virtual torch::nn::Module& model() = 0;

  // One optimizer step as the trainer's training step does it: forward
  // under the precision's autocast, loss in fp32, zero_grad, backward,
  // optimizer step (skipped after an fp16 overflow). Returns the loss as a
  // double, which waits for the device (the trainers read it every step).
  virtual double Step() = 0;
};

// The trainers this bench knows: survival, ddpm, vqa, segmentation.
const std::vector<std::string>& TrainerNames();

// Builds `trainer`'s ModelStep on config.device. Throws
// std::invalid_argument for an unknown trainer or precision (fp16 on CPU).
std::unique_ptr<ModelStep> MakeModelStep(const std::string& trainer,
                                         const StepConfig& config);

// Per trainer (model_step.cc dispatches to these).
std::unique_ptr<ModelStep> MakeSurvivalStep(const StepConfig& config);
std::unique_ptr<ModelStep> MakeDdpmStep(const StepConfig& config);
std::unique_ptr<ModelStep> MakeVqaStep(const StepConfig& config);
std::unique_ptr<ModelStep> MakeSegmentationStep(const StepConfig& config);

// "[8, 1, 32, 32, 32]".
std::string ShapeString(const torch::Tensor& t);

}  // namespace ddprun::bench
