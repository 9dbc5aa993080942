#pragma once

#include <string>
#include <vector>

#include <torch/types.h>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// One line of the prompts JSONL: {"image": "images/0001.png",
// "mask": "masks/0001.png", "prompt": "lesion in the upper left"}. Paths are
// resolved against the JSONL's folder when relative.
struct SegRecord {
  std::string image;
  std::string mask;
  std::string prompt;
  // "train", "val" or "test" from an annotations CSV's split column
  // (prs_med_layout.h); empty when the list has none (JSONL).
  std::string split;
  std::string where;  // "<list>:<line>: " for errors about its files
};

// Reads the JSONL. Errors name the file and line (missing field, bad JSON),
// NOT_FOUND for a missing file, INVALID_ARGUMENT when it has no records.
StatusOr<std::vector<SegRecord>> ReadSegJsonl(const std::string& path);

// Image [1,S,S] in [0,1] and binary mask [1,S,S] (pixels > 0.5), both
// resized to `size`. Errors name the image or mask file.
struct SegSample {
  torch::Tensor image;
  torch::Tensor mask;
};
StatusOr<SegSample> LoadSegSample(const SegRecord& record, int64_t size);

// Writes `n` PNG images (size x size) with two bright lesions in different
// quadrants and masks with only one of them, whose prompt names that one's
// quadrant ("lesion in the upper left", ...). Segmenting both lesions caps
// Dice near 0.67, so Dice well above that needs the prompt. The files are
// in the guide's --data_root layout (prs_med_layout.h), data set "lesions",
// every 5th image (0, 5, ...) in the val split:
//   dir/annotations/lesions.csv   image_path,question,answer,split
//   dir/images_and_masks/lesions/{train,val}_{images,masks}/<NNNN>.png
// and listed again in dir/prompts.jsonl ({image, mask, prompt}, no split).
Status WriteSyntheticSegmentation(const std::string& dir, int64_t n,
                                  int64_t size, uint64_t seed);

}  // namespace ddprun::examples
