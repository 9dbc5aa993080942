#include "examples/survival/survival_batches.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "examples/frame/trainer_support.h"
#include "examples/survival/resnet3d.h"

namespace ddprun::examples {

StatusOr<SurvivalBatch> MakeSurvivalBatch(
    const std::vector<SurvivalRecord>& records,
    const std::vector<int64_t>& items,
    const std::function<StatusOr<torch::Tensor>(int64_t)>& volume) {
  std::vector<torch::Tensor> images;
  std::vector<float> time, event;
  for (int64_t item : items) {
    DDP_ASSIGN_OR_RETURN(torch::Tensor v, volume(item));
    images.push_back(v);
    time.push_back(static_cast<float>(records[item].time));
    event.push_back(static_cast<float>(records[item].event));
  }
  return SurvivalBatch{torch::stack(images), torch::tensor(time),
                       torch::tensor(event)};
}

StatusOr<torch::Tensor> LoadSurvivalRecord(const SurvivalRecord& record,
                                           const std::vector<int64_t>& size) {
  return AtRow(record.where, LoadSurvivalVolume(record.image, size));
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> SplitSurvival(
    TrainerSession& session, TrainerCli& cli, const SurvivalOptions& opt,
    const SurvivalTable& table) {
  if (!table.has_fold) {
    return session.Split(table.records.size(), opt.val_fraction, opt.csv_path,
                         16, 8);
  }
  FoldSplit folds = ValueOrThrow(SplitByFold(
      table, opt.csv_path, opt.fold_column, opt.train_fold, opt.val_fold));
  session.LogMain(
      "split by column " + opt.fold_column + ": " +
      std::to_string(folds.train.size()) + " rows '" + opt.train_fold +
      "', " + std::to_string(folds.val.size()) + " rows '" + opt.val_fold +
      "'" +
      (folds.unused ? ", " + std::to_string(folds.unused) + " others unused"
                    : "") +
      (cli.IsSet("val_fraction") ? " (--val_fraction is not used)" : ""));
  return session.Split(std::move(folds.train), std::move(folds.val),
                       opt.csv_path, 16, 8);
}

SurvivalTrainSet::SurvivalTrainSet(TrainerSession& session,
                                   const SurvivalOptions& opt,
                                   const std::vector<SurvivalRecord>& records,
                                   std::vector<int64_t> train)
    : session_(session),
      records_(records),
      image_size_(opt.image_size),
      train_(std::move(train)) {
  if (!opt.use_smart_cache) return;
  const int64_t cache_num =
      std::max<int64_t>(1, std::llround(train_.size() * opt.cache_rate));
  cache_ = std::make_unique<SmartCache>(
      train_, cache_num, std::llround(cache_num * opt.replace_rate),
      [this](int64_t item) {
        return LoadSurvivalRecord(records_[item], image_size_);
      });
  session_.LogMain("smart cache: " + std::to_string(cache_->size()) + " of " +
                   std::to_string(train_.size()) +
                   " training subjects cached, " +
                   std::to_string(cache_->replace_num()) +
                   " replaced per epoch in the background");
}

int64_t SurvivalTrainSet::size() const {
  return cache_ ? cache_->size() : static_cast<int64_t>(train_.size());
}

void SurvivalTrainSet::BeginEpoch(int64_t epoch) {
  if (!cache_) return;
  OkOrThrow(cache_->BeginEpoch(epoch));
  const SmartCache::EpochStats& s = cache_->last_epoch_stats();
  session_.LogMain("smart cache epoch " + std::to_string(epoch + 1) + ": " +
                   std::to_string(s.kept) + " kept, " +
                   std::to_string(s.prefetched) +
                   " prefetched in the background, " +
                   std::to_string(s.loaded) + " loaded now");
}

// Sampler positions are cache slots or places in `train_`.
StatusOr<SurvivalBatch> SurvivalTrainSet::Load(
    const std::vector<int64_t>& positions) {
  std::vector<int64_t> items;
  for (int64_t p : positions) {
    items.push_back(cache_ ? cache_->ItemAt(p) : train_[p]);
  }
  size_t next = 0;
  return MakeSurvivalBatch(
      records_, items, [&](int64_t item) -> StatusOr<torch::Tensor> {
        const int64_t position = positions[next++];
        if (!cache_) return LoadSurvivalRecord(records_[item], image_size_);
        return cache_->Get(position);
      });
}

LoopConfig SurvivalLoop(const SurvivalOptions& opt, const worker::World& world,
                        int64_t accumulation, int64_t dataset_size) {
  LoopConfig loop;
  loop.dataset_size = dataset_size;
  loop.micro_batch = opt.batch_size / world.world_size();
  loop.accumulation = accumulation;
  loop.min_micro_batch = ResNet3dMinTrainBatch(opt.image_size);
  std::string sizes;
  for (int64_t v : opt.image_size) {
    sizes += (sizes.empty() ? "" : " ") + std::to_string(v);
  }
  loop.min_micro_batch_reason =
      "batch norm over its 1x1x1 deepest feature maps at --image_size " +
      sizes + " needs more than one value per channel";
  loop.batch_flag_scale = world.world_size();
  loop.samples_per_step = opt.batch_size * accumulation;
  loop.best = {"val_cindex", /*higher_is_better=*/true};
  return loop;
}

}  // namespace ddprun::examples
