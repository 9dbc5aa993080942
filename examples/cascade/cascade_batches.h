#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include <torch/torch.h>

#include "ddprun/common/status_or.h"
#include "examples/cascade/cascade_data.h"

namespace ddprun::examples {

// A micro-batch of one stage, built on a loader thread.
struct CascadeBatch {
  torch::Tensor views;     // [B, V, S, S] in [0, 1]
  torch::Tensor volume;    // [B, 1, D, H, W] at the stage's size
  torch::Tensor previous;  // the same size; undefined for the first stage
};

// The patients and how the stages see them: loads (through a cache with
// data.cache_in_memory), resamples the volume to a stage's size and makes
// the previous stage's input. Thread-safe (loader threads share it).
class PatientStore {
 public:
  PatientStore(std::vector<Patient> patients, LoadOptions options,
               bool cache_in_memory);

  size_t size() const { return patients_.size(); }
  const Patient& patient(int64_t i) const { return patients_.at(i); }

  // Patient `i` (errors name its folder and file).
  StatusOr<PatientSample> Load(int64_t i);

  // The stage input for training: patients `items` at `size`; for a stage
  // after the first, `previous` is the truth at `previous_size`, upsampled
  // back to `size`, plus Gaussian noise of a random level in
  // [0, conditioning_noise] (Cascaded Diffusion Models' conditioning
  // augmentation: at sampling time the previous stage's output takes its
  // place). With `augment`, each patient is mirrored left-right at random
  // (volume along W, the frontal view's columns; the lateral view is
  // unchanged, as the physics says). Randomness comes from `seed` only.
  StatusOr<CascadeBatch> MakeBatch(const std::vector<int64_t>& items,
                                   const std::vector<int64_t>& size,
                                   const std::vector<int64_t>& previous_size,
                                   double conditioning_noise, bool augment,
                                   uint64_t seed);

 private:
  const std::vector<Patient> patients_;
  const LoadOptions options_;
  const bool cache_in_memory_;
  std::mutex mu_;
  std::map<int64_t, PatientSample> cache_;  // guarded by mu_
};

}  // namespace ddprun::examples
