#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// Channel order of a case: T1, T1ce, T2, FLAIR (BraTS 2021 suffixes _t1,
// _t1ce, _t2, _flair; BraTS 2023: -t1n, -t1c, -t2w, -t2f).
inline constexpr int64_t kBratsModalities = 4;
const std::vector<std::string>& BratsModalityNames();  // t1, t1ce, t2, flair

// One case: either one 4-channel NIfTI (a CSV `image` column) or one 3D
// NIfTI per modality in channel order (a BraTS case folder, or CSV columns
// t1,t1ce,t2,flair).
struct BratsCase {
  std::string name;                // the case folder's name, or the file
  std::vector<std::string> files;  // 1 or kBratsModalities paths
  std::string where;               // "<csv>:<line>: " or "" (for errors)
};

// Reads a case list: a CSV with an `image` column of 4-channel NIfTI
// volumes, or with columns t1,t1ce,t2,flair of 3D volumes (paths relative to
// the CSV's folder). Errors name the file, and the row for an empty path.
StatusOr<std::vector<BratsCase>> ReadBratsCsv(const std::string& csv_path);

// Scans a BraTS data root: every (non-hidden) folder in `root` is a case
// <case> holding <case>_t1.nii.gz, _t1ce, _t2 and _flair (.nii.gz or .nii;
// BraTS 2023's <case>-t1n, -t1c, -t2w, -t2f also), sorted by name; the
// segmentation (_seg) is not used. Errors (INVALID_ARGUMENT, one line): no
// such directory, no case folder, and a case without one of the modalities
// (naming the case folder, the modality and the file names looked for).
StatusOr<std::vector<BratsCase>> ScanBratsRoot(const std::string& root);

// Loads one case as [4, S, S, S]: checks the channels (4 in one file, or one
// per modality file, all of the same shape; errors name the file), resizes to
// `size` (trilinear), scales each channel to [-1, 1] (min-max per case).
StatusOr<torch::Tensor> LoadBratsCase(const BratsCase& c, int64_t size);

// What --make_synthetic writes.
enum class SyntheticLayout {
  // <dir>/SynBraTS_<i>/SynBraTS_<i>_{t1,t1ce,t2,flair,seg}.nii.gz and
  // <dir>/cases.csv listing the four modality files per case, so the data
  // trains through --data_root <dir> and --csv_path <dir>/cases.csv alike.
  kBrats,
  // <dir>/volumes/case_<i>.nii (4 channels) and <dir>/cases.csv (`image`).
  kFourChannelCsv,
};

// Writes `n` synthetic cases (size^3). Two random tissue maps A and B
// (balls) in noise give the modalities A, B, A + B and A - B, so each one is
// a fixed function of the other three: a model that learns it beats a
// constant guess by a wide PSNR margin. The segmentation labels A only 1,
// B only 2, both 3.
Status WriteSyntheticBrats(const std::string& dir, int64_t n, int64_t size,
                           uint64_t seed, SyntheticLayout layout);

}  // namespace ddprun::examples
