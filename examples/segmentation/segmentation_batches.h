#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "examples/formats/vocabulary.h"
#include "examples/frame/trainer_session.h"
#include "examples/segmentation/segmentation_data.h"
#include "examples/segmentation/segmentation_options.h"

namespace ddprun::examples {

// segmentation_trainer's data: the train/val split of the records and
// their batches.

struct SegBatch {
  torch::Tensor images;  // [B,1,S,S]
  torch::Tensor masks;   // [B,1,S,S]
  torch::Tensor tokens;  // [B,L]
};

// The records `items` as one batch: images and masks at --image_size,
// prompts encoded by `vocab` to --prompt_length tokens. Errors name the
// record's row. Thread-safe (reads only).
StatusOr<SegBatch> LoadSegBatch(const std::vector<SegRecord>& records,
                                const Vocabulary& vocab, const SegOptions& opt,
                                const std::vector<int64_t>& items);

// Train and validation positions in `records`: the split column where the
// data has one (the guide's annotations; test rows are left out, rows
// without a split train), else a seeded --val_fraction split. Without any
// val row, --val_fraction of the training rows is held out. Logs the
// split; TrainerSession::Split's --debug cut (16 / 8) and checks apply.
std::pair<std::vector<int64_t>, std::vector<int64_t>> SplitRecords(
    TrainerSession& session, const std::vector<SegRecord>& records,
    const SegOptions& opt);

}  // namespace ddprun::examples
