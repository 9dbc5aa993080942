#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "examples/formats/vocabulary.h"
#include "examples/vqa/vqa_data.h"
#include "examples/vqa/vqa_options.h"

namespace ddprun::examples {

// vqa_trainer's batches and the one-line descriptions of its data.

struct VqaBatch {
  torch::Tensor images, tokens, answers, labels, mask;
};

// What the model reads and predicts, built from the training questions
// only (validation answers unseen in training count as wrong).
struct VqaVocabularies {
  Vocabulary words;  // the questions' words
  LabelSet answers;
};
VqaVocabularies BuildVqaVocabularies(const std::vector<VqaRecord>& records,
                                     const std::vector<int64_t>& train);

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

// The run's line in rank 0's log: questions, answers, words, the effective
// batch, ZeRO and offload, norm, precision.
std::string DescribeVqaRun(const VqaOptions& opt, const VqaVocabularies& vocab,
                           size_t train_questions, size_t val_questions,
                           int64_t accumulation, int world_size, NormKind norm,
                           const std::string& precision);

// What the policy did: "uncertain (-1) labels: 448, policy ignore (masked
// out of loss and AUROC)".
std::string DescribeUncertain(const std::vector<VqaRecord>& records,
                              const std::string& policy);

}  // namespace ddprun::examples
