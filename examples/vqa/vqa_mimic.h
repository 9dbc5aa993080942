#pragma once

#include <string>
#include <vector>

#include "ddprun/common/status_or.h"
#include "examples/vqa/vqa_data.h"

namespace ddprun::examples {

// The file names of the MIMIC-CXR data root (as PhysioNet ships them).
inline constexpr char kMimicLabelsCsv[] = "mimic-cxr-2.0.0-chexpert.csv";
inline constexpr char kMimicImages[] = "files";  // MIMIC-CXR-JPG
inline constexpr char kMimicQuestions[] = "qa";  // MIMIC-Ext-CXR-QBA

struct MimicCxrVqa {
  std::vector<VqaRecord> records;
  // "MIMIC-CXR root R: 320 studies, 400 questions, ...": what was read and
  // what was left out.
  std::string description;
};

// Reads the guide's data layout, MIMIC-CXR-JPG images with
// MIMIC-Ext-CXR-QBA questions (the two roots may be one directory):
//   <image_root>/files/p10/p10000032/s50414267/<dicom_id>.jpg (or .png)
//   <image_root>/mimic-cxr-2.0.0-chexpert.csv (or .csv.gz): subject_id,
//       study_id and the 14 findings of CheXpertNames(), each 1.0, 0.0,
//       -1.0 or empty
//   <qa_root>/qa/p10/p10000032/s50414267.qa.json: {"questions": [{
//       "question": "...", "answers": [{"text": "yes", "answer_type":
//       "main_answer"}, ...], ...}, ...]}
// One record per question: the study's image (the first image file of its
// folder in name order), the question, its main answer's text (lowercase,
// trimmed; the first answer when none is marked main_answer) and the
// study's CheXpert labels under `policy`. Studies are read in path order.
// A study whose image folder is missing or empty is left out, and one
// without a label row trains with its labels masked; the description
// counts both. Errors (one line naming the path): no files/ or qa/ folder,
// no label CSV, no question file, a question file that is not JSON of that
// shape, a label CSV without the columns or with a value other than
// 1/0/-1/empty, or no study left with an image.
StatusOr<MimicCxrVqa> ReadMimicCxrVqa(const std::string& image_root,
                                      const std::string& qa_root,
                                      UncertainPolicy policy);

// "p10/p10000032/s50414267": a study's folder below files/ and qa/.
std::string MimicStudyPath(int64_t subject_id, int64_t study_id);

}  // namespace ddprun::examples
