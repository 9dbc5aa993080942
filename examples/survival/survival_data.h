#pragma once

#include <string>
#include <vector>

#include <torch/types.h>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// One row of the survival CSV. `image` is resolved against the CSV's folder
// when relative (or against the working directory, where the guide's
// scripts resolve it, when only that one exists).
struct SurvivalRecord {
  std::string image;
  double time = 0;    // time to event or censoring, > 0
  double event = 0;   // 1 = event observed, 0 = censored
  std::string fold;   // the fold column's value ("" without one)
  std::string where;  // "<csv>:<line>: " for errors about the image
};

struct SurvivalTable {
  std::vector<SurvivalRecord> records;
  std::string image_column;  // "image" or the guide's "NIFTI path"
  bool has_fold = false;     // the CSV has `fold_column`
};

// The guide's CSV column for the volumes (MultiGPUSurvivalDataset's
// nifti_col); ours is "image". Matched without regard to case.
inline constexpr char kGuideImageColumn[] = "NIFTI path";

// The guide's layout: a data root holding dataset.csv (data/dataset.csv).
inline constexpr char kGuideCsvName[] = "dataset.csv";

// `csv_path` as given when it is not a directory; <dir>/dataset.csv for a
// data root in the guide's layout. INVALID_ARGUMENT for a directory without
// dataset.csv, naming the guide's layout and the CSV files that are there.
StatusOr<std::string> ResolveSurvivalCsv(const std::string& csv_path);

// Reads and validates the CSV: columns image (or NIFTI path), time, event,
// and `fold_column` when present (more columns, e.g. the guide's clinical
// features, are ignored). INVALID_ARGUMENT "<csv>:<line>: ..." for a
// missing column, a non-numeric or non-positive time, an event other than
// 0/1, or an empty image path; for a directory (as ResolveSurvivalCsv
// without dataset.csv); NOT_FOUND when the CSV is missing. Image files are
// checked when loaded, not here.
// `fold_required`: a CSV without `fold_column` is an error too (the user
// named the column).
StatusOr<SurvivalTable> ReadSurvivalCsv(const std::string& csv_path,
                                        const std::string& fold_column,
                                        bool fold_required = false);

// The split the guide's CSV defines: rows whose fold column is `train_fold`
// train, rows with `val_fold` validate, others (e.g. "test") are left out
// (`unused` counts them). INVALID_ARGUMENT naming the CSV, the column and
// the values it does hold when either side would be empty.
struct FoldSplit {
  std::vector<int64_t> train, val;
  int64_t unused = 0;
};
StatusOr<FoldSplit> SplitByFold(const SurvivalTable& table,
                                const std::string& csv_path,
                                const std::string& fold_column,
                                const std::string& train_fold,
                                const std::string& val_fold);

// Loads one volume as [1, D, H, W] resized (trilinear) to `size` and
// normalized to zero mean, unit variance. Errors name the file (see
// ReadNifti); a volume with more than one channel is INVALID_ARGUMENT.
StatusOr<torch::Tensor> LoadSurvivalVolume(const std::string& path,
                                           const std::vector<int64_t>& size);

// Writes `n` NIfTI volumes (size^3) under <dir>/images and two lists of
// them: <dir>/survival.csv (image,time,event; split by --val_fraction) and
// <dir>/dataset.csv in the guide's layout (NIFTI path,time,event,Fold_1
// with a quarter "val", the rest "train"). Each volume holds a bright ball
// in noise; its radius sets the hazard (larger ball, earlier event) and
// about 30% of subjects are censored, so a model that measures the ball
// beats a C-index of 0.5 by a wide margin (the true risk scores about
// 0.75). Deterministic for a given seed.
Status WriteSyntheticSurvival(const std::string& dir, int64_t n, int64_t size,
                              uint64_t seed);

}  // namespace ddprun::examples
