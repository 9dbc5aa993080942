#pragma once

#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

inline constexpr int64_t kCheXpertLabels = 14;

// The 14 CheXpert findings in the column order of MIMIC-CXR-JPG's
// mimic-cxr-2.0.0-chexpert.csv; labels[k] of a record is finding k.
const std::vector<std::string>& CheXpertNames();

// How uncertain (-1) CheXpert labels enter the BCE loss (CheXpert paper's
// U-Ignore / U-Zeros / U-Ones). Default kIgnore: masked out of the loss and
// of AUROC. Missing labels (null or absent) are always masked.
enum class UncertainPolicy { kIgnore, kZeros, kOnes };

// One question about one image, from either format.
struct VqaRecord {
  std::string image;
  std::string question;
  std::string answer;
  std::vector<float> labels;  // 14 targets after the policy
  std::vector<float> mask;    // 14: 1 = counts in the loss/AUROC
  std::string where;          // "<file>:<line>: " for errors about image
  int64_t uncertain = 0;      // -1 labels of the record (before the policy)
};

// Sets label k of `r` from a CheXpert value: 1 or 0 (known), -1 (uncertain:
// the policy decides), NaN (missing: masked). False for any other value.
bool SetCheXpertLabel(VqaRecord& r, int64_t k, double value,
                      UncertainPolicy policy);

// Reads a JSONL file, one question a line: {"image": "images/0001.png",
// "question": "...", "answer": "yes", "labels": [14 numbers in {1, 0, -1} or
// null]} (image paths relative to the file). Errors name the file and line
// (bad JSON, missing field, labels not a list of 14, a label other than
// 1/0/-1/null).
StatusOr<std::vector<VqaRecord>> ReadVqaJsonl(const std::string& path,
                                              UncertainPolicy policy);

// What --data_path held.
struct VqaData {
  std::vector<VqaRecord> records;
  std::string description;  // one line for the log: the format and counts
};

// --data_path: a JSONL file (ReadVqaJsonl) or a MIMIC-CXR data root
// (ReadMimicCxrVqa, vqa_mimic.h; `qa_root` empty = the same directory).
// NOT_FOUND when the path does not exist.
StatusOr<VqaData> ReadVqaData(const std::string& data_path,
                              const std::string& qa_root,
                              UncertainPolicy policy);

}  // namespace ddprun::examples
