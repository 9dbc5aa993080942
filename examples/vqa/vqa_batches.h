#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "examples/formats/vocabulary.h"
#include "examples/vqa/vqa_cli.h"
#include "examples/vqa/vqa_data.h"

namespace ddprun::examples {

// vqa_trainer's batches and the one-line descriptions of its data.

struct VqaBatch {
  torch::Tensor images, tokens, answers, labels, mask;
};

// The records `items` as one batch: gray images at --image_size, questions
// encoded by `vocab` to --question_length tokens, answers as indices of
// `answers` (-1 for an answer not seen in training: ignored by the loss),
// the CheXpert labels and their mask. Errors name the record's row.
// Thread-safe (reads only).
StatusOr<VqaBatch> LoadVqaBatch(const std::vector<VqaRecord>& records,
                                const Vocabulary& vocab,
                                const LabelSet& answers, const VqaOptions& opt,
                                const std::vector<int64_t>& items);

// "7 answers (0, 1, 2, 3, 4, no, yes)": at most 10 are named.
std::string DescribeAnswers(const LabelSet& answers);

// What the policy did: "uncertain (-1) labels: 448, policy ignore (masked
// out of loss and AUROC)".
std::string DescribeUncertain(const std::vector<VqaRecord>& records,
                              const std::string& policy);

}  // namespace ddprun::examples
