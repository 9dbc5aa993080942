#pragma once

#include <string>
#include <vector>

#include <torch/types.h>

#include "common/status_or.h"

namespace ddprun::examples {

// One row of the survival CSV (columns image,time,event; more columns are
// ignored). `image` is resolved against the CSV's folder when relative.
struct SurvivalRecord {
  std::string image;
  double time = 0;    // time to event or censoring, > 0
  double event = 0;   // 1 = event observed, 0 = censored
  std::string where;  // "<csv>:<line>: " for errors about the image
};

// Reads and validates the CSV. INVALID_ARGUMENT "<csv>:<line>: ..." for a
// missing column, a non-numeric or non-positive time, an event other than
// 0/1, or an empty image path; NOT_FOUND when the CSV is missing. Image files
// are checked when loaded, not here.
StatusOr<std::vector<SurvivalRecord>> ReadSurvivalCsv(
    const std::string& csv_path);

// Loads one volume as [1, D, H, W] resized (trilinear) to `size` and
// normalized to zero mean, unit variance. Errors name the file (see
// ReadNifti); a volume with more than one channel is INVALID_ARGUMENT.
StatusOr<torch::Tensor> LoadSurvivalVolume(const std::string& path,
                                           const std::vector<int64_t>& size);

// Writes `n` NIfTI volumes (size^3) and <dir>/survival.csv. Each volume holds
// a bright ball in noise; its radius sets the hazard (larger ball, earlier
// event) and about 30% of subjects are censored, so a model that measures
// the ball beats a C-index of 0.5 by a wide margin (the true risk scores
// about 0.75). Deterministic for a given seed.
Status WriteSyntheticSurvival(const std::string& dir, int64_t n, int64_t size,
                              uint64_t seed);

}  // namespace ddprun::examples
