#pragma once

#include <string>
#include <vector>

#include <torch/types.h>

#include "common/status_or.h"

namespace ddprun::examples {

inline constexpr int64_t kBratsModalities = 4;  // e.g. T1, T1ce, T2, FLAIR

// One row of the case list.
struct BratsCase {
  std::string image;  // 4-channel NIfTI, resolved against the CSV's folder
  std::string where;  // "<csv>:<line>: " for errors about the image
};

// Reads the case list: a CSV with an `image` column of 4-channel NIfTI
// volumes (paths relative to the CSV's folder). Errors name file and row.
StatusOr<std::vector<BratsCase>> ReadBratsCsv(const std::string& csv_path);

// Loads one case as [4, S, S, S]: checks it has 4 channels (error naming the
// file otherwise), resizes to `size`, scales each channel to [-1, 1].
StatusOr<torch::Tensor> LoadBratsCase(const std::string& path, int64_t size);

// Writes `n` 4-modality volumes (size^3) and cases.csv. Two random tissue
// maps A and B (balls) in noise give the modalities A, B, A + B and A - B,
// so the last one is a fixed function of the first three: a model that
// learns it beats a constant guess by a wide PSNR margin.
Status WriteSyntheticBrats(const std::string& dir, int64_t n, int64_t size,
                           uint64_t seed);

}  // namespace ddprun::examples
