#include "examples/segmentation/segmentation_batches.h"

#include <algorithm>
#include <string>

#include "examples/frame/trainer_support.h"

namespace ddprun::examples {

StatusOr<SegBatch> LoadSegBatch(const std::vector<SegRecord>& records,
                                const Vocabulary& vocab, const SegOptions& opt,
                                const std::vector<int64_t>& items) {
  std::vector<torch::Tensor> images, masks, tokens;
  for (int64_t item : items) {
    DDP_ASSIGN_OR_RETURN(SegSample s,
                         AtRow(records[item].where,
                               LoadSegSample(records[item], opt.image_size)));
    images.push_back(s.image);
    masks.push_back(s.mask);
    tokens.push_back(
        torch::tensor(vocab.Encode(records[item].prompt, opt.prompt_length)));
  }
  return SegBatch{torch::stack(images), torch::stack(masks),
                  torch::stack(tokens)};
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> SplitRecords(
    TrainerSession& session, const std::vector<SegRecord>& records,
    const SegOptions& opt) {
  std::vector<int64_t> train, val;
  int64_t test = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string& split = records[i].split;
    if (split == "val") {
      val.push_back(static_cast<int64_t>(i));
    } else if (split == "test") {
      ++test;
    } else {
      train.push_back(static_cast<int64_t>(i));
    }
  }
  if (std::all_of(records.begin(), records.end(),
                  [](const SegRecord& r) { return r.split.empty(); })) {
    return session.Split(records.size(), opt.val_fraction, opt.data_path, 16,
                         8);
  }
  std::string how = "split column: " + std::to_string(train.size()) +
                    " train, " + std::to_string(val.size()) + " val, " +
                    std::to_string(test) + " test rows (test rows unused)";
  if (val.empty() && train.size() > 1) {
    auto [t, v] = SplitTrainVal(static_cast<int64_t>(train.size()),
                                opt.val_fraction, session.common().seed);
    std::vector<int64_t> kept, held;
    for (int64_t p : t) kept.push_back(train[p]);
    for (int64_t p : v) held.push_back(train[p]);
    train = std::move(kept);
    val = std::move(held);
    how += "; no val rows, so --val_fraction " +
           std::to_string(opt.val_fraction) + " of the train rows validate";
  }
  session.LogMain("segmentation data: " + how);
  return session.Split(std::move(train), std::move(val), opt.data_path, 16, 8);
}

}  // namespace ddprun::examples
