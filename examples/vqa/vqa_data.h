#pragma once

#include <string>
#include <vector>

#include <torch/types.h>

#include "common/status_or.h"

namespace ddprun::examples {

inline constexpr int64_t kCheXpertLabels = 14;

// How uncertain (-1) CheXpert labels enter the BCE loss (CheXpert paper's
// U-Ignore / U-Zeros / U-Ones). Default kIgnore: masked out of the loss and
// of AUROC. Missing labels (null or absent) are always masked.
enum class UncertainPolicy { kIgnore, kZeros, kOnes };

// One JSONL line: {"image": "images/0001.png", "question": "...",
// "answer": "yes", "labels": [14 numbers in {1, 0, -1} or null]}.
struct VqaRecord {
  std::string image;
  std::string question;
  std::string answer;
  std::vector<float> labels;  // 14 targets after the policy
  std::vector<float> mask;    // 14: 1 = counts in the loss/AUROC
  std::string where;          // "<jsonl>:<line>: " for errors about image
  int64_t uncertain = 0;      // -1 labels on the line (before the policy)
};

// Reads the JSONL; errors name the file and line (bad JSON, missing field,
// labels not a list of 14, a label other than 1/0/-1/null).
StatusOr<std::vector<VqaRecord>> ReadVqaJsonl(const std::string& path,
                                              UncertainPolicy policy);

// Writes `n` chest-X-ray-like images (size x size; PNG, or JPEG when `jpeg`)
// with opacities in
// some of the four lung quadrants, vqa.jsonl with yes/no questions about a
// quadrant and "how many" questions, and 14 CheXpert-style labels: label i
// follows the opacity of quadrant i % 4 (10% flipped, 10% uncertain -1).
Status WriteSyntheticVqa(const std::string& dir, int64_t n, int64_t size,
                         uint64_t seed, bool jpeg = false);

}  // namespace ddprun::examples
