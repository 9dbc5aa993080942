#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "examples/cascade/cascade_batches.h"
#include "examples/cascade/cascade_data.h"
#include "examples/cascade/cascade_model.h"
#include "examples/cascade/cascade_options.h"
#include "examples/cascade/cascade_validation.h"
#include "examples/cascade/v_diffusion.h"
#include "examples/frame/trainer_session.h"

namespace ddprun::examples {

// How patients are read for this run: the views' size, the last stage's
// volume, the HU window and the flip of the views.
LoadOptions CascadeLoadOptions(const CascadeCli& cli);

// The run's line in rank 0's log: patients, views, stages, the effective
// batch, timesteps and sampling, prediction, precision.
std::string DescribeCascadeRun(const CascadeCli& cli, size_t train_patients,
                               size_t val_patients, int64_t accumulation,
                               int world_size, const std::string& precision);

// cascade_trainer's stages, trained one after the other (coarse to fine):
// per stage, only that stage's parameters train (the others are frozen and
// checked unchanged at each validation), the loop over the training
// patients at the stage's volume size (--epochs epochs, resumable), the
// training step (v-diffusion MSE plus the stage's weighted physics loss;
// training noise is a stream per (rank, optimizer step), so a resumed run
// draws what the uninterrupted one drew) and the validation
// (CascadeEvaluator). Everything given must outlive the object; Run() on
// the training thread.
class CascadeStages {
 public:
  // `stages`: those run (the config's, or its first under --debug).
  CascadeStages(TrainerSession& session, const CascadeOptions& opt,
                CascadeModel model, const VDiffusion& diffusion,
                PatientStore& store, std::vector<StageConfig> stages,
                std::vector<int64_t> train, std::vector<int64_t> val);

  // Trains stage `k` (0-based) to its last epoch; returns at once when the
  // session is past it (done before a resume).
  void Run(size_t k);

 private:
  double Step(size_t k, double physics_weight,
              std::vector<CascadeBatch>& micro);

  TrainerSession& session_;
  const CascadeOptions& opt_;
  CascadeModel model_;
  const VDiffusion& diffusion_;
  PatientStore& store_;
  const std::vector<StageConfig> stages_;
  const std::vector<int64_t> train_, val_;
  CascadeEvaluator evaluator_;
  std::atomic<int64_t> current_epoch_{0};  // read by loader threads
  TrainSums sums_;
};

}  // namespace ddprun::examples
