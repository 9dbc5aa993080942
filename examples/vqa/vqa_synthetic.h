#pragma once

#include <cstdint>
#include <string>

#include "ddprun/common/status.h"

namespace ddprun::examples {

// Synthetic chest-X-ray-like data with a learnable signal: `n` images
// (size x size; PNG, or JPEG when `jpeg`) with opacities in some of the four
// lung quadrants, yes/no questions about a quadrant and "how many"
// questions, and 14 CheXpert-style labels: label i follows the opacity of
// quadrant i % 4 (10% flipped, 10% uncertain -1).

// The JSONL format: <dir>/images/NNNNN.png and <dir>/vqa.jsonl, one question
// per image.
Status WriteSyntheticVqa(const std::string& dir, int64_t n, int64_t size,
                         uint64_t seed, bool jpeg = false);

// The guide's MIMIC-CXR layout (ReadMimicCxrVqa): n studies, two per
// patient, each one image files/pXX/pSUBJECT/sSTUDY/<id>.jpg, its question
// file qa/pXX/pSUBJECT/sSTUDY.qa.json (one question; every fourth study a
// second one of the other kind) and a row of mimic-cxr-2.0.0-chexpert.csv.
Status WriteSyntheticMimic(const std::string& dir, int64_t n, int64_t size,
                           uint64_t seed, bool jpeg);

}  // namespace ddprun::examples
