#pragma once

#include <string>
#include <vector>

#include "ddprun/common/status_or.h"
#include "examples/segmentation/segmentation_data.h"

namespace ddprun::examples {

// The data root of prs-med-segmentation.md (its train_prs_med.py
// --data_root), the layout of the PRS-Med data sets:
//   <root>/annotations/<dataset>.csv      one per data set, header with at
//       least image_path and question; split (train, val or test) and
//       answer are read when present, other columns are ignored
//   <root>/images_and_masks/<image_path>  e.g. brain_ct/train_images/0001.png
//   the mask: the same path with its <split>_images/ folder replaced by
//       <split>_masks/ (brain_ct/train_masks/0001.png)
// The question is the prompt the model is conditioned on. An absolute
// image_path is taken as is. Files are checked up front, so a missing image
// or mask is reported before training starts.
// Errors, each one line naming the file (and the CSV line) and what is
// missing: NOT_FOUND for a missing annotations/ or images_and_masks/ folder,
// an annotations/ without .csv files, an image or its mask missing;
// INVALID_ARGUMENT for a CSV without the image_path or question column, a
// split that is not train/val/test, an image_path not inside a
// train_images/, val_images/ or test_images/ folder (its mask cannot be
// found), and annotations without a single row.
StatusOr<std::vector<SegRecord>> ReadPrsMedRoot(const std::string& root);

// What --data_path (or the guide's --data_root) names: a JSONL file
// (ReadSegJsonl), a directory in the layout above (it has annotations/), or
// a directory with a prompts.jsonl (what --make_synthetic writes beside the
// guide's layout). A directory with neither is INVALID_ARGUMENT describing
// both layouts; a missing path is NOT_FOUND.
StatusOr<std::vector<SegRecord>> ReadSegData(const std::string& path);

}  // namespace ddprun::examples
