// survival_trainer: time-to-event prediction (MACE) from 3D volumes with a
// 3D ResNet and the Cox partial likelihood, data parallel over ranks.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <tuple>

#include <torch/torch.h>

#include "ddprun/worker/worker.h"
#include "examples/common/batch_loader.h"
#include "examples/common/metrics.h"
#include "examples/common/trainer_session.h"
#include "examples/survival/cox_loss.h"
#include "examples/survival/resnet3d.h"
#include "examples/survival/risk_groups.h"
#include "examples/survival/smart_cache.h"
#include "examples/survival/survival_data.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

struct SurvivalOptions {
  std::string csv_path;
  double val_fraction = 0.25;
  std::string resnet = "resnet10";
  int64_t width = 8;
  std::vector<int64_t> image_size{32, 32, 32};
  int64_t batch_size = 8;  // total across ranks
  double learning_rate = 2e-3;
  double weight_decay = 1e-4;
  bool use_smart_cache = false;
  double cache_rate = 0.5;
  double replace_rate = 0.25;
  int64_t synthetic_size = 32;
  bool gradient_checkpointing = false;
  double clip_grad = 0;
  // The guide's split (finetune_survival_distributed.py): a fold column.
  std::string fold_column = "Fold_1";
  std::string train_fold = "train";
  std::string val_fold = "val";
};

// The guide's names (survival-mace-monai.md and the scripts it runs) where
// ours differ; the common ones (--lr, --log_dir, ...) are in guide_flags.cc.
std::vector<FlagAlias> SurvivalAliases() {
  return {
      {"max_grad_norm", "clip_grad", ""},
      {"activation_checkpointing", "gradient_checkpointing", ""},
  };
}

std::vector<ForeignFlag> SurvivalForeignFlags() {
  return {
      {"output", ForeignFlag::Arity::kOne,
       "no separate .pth: the final model is the last checkpoint "
       "<checkpoint_dir>/ckpt-<step>.pt and the best by validation C-index "
       "is best.pt beside it (LibTorch archives; --resume_from takes both)"},
  };
}

struct Batch {
  torch::Tensor images;  // [B, 1, D, H, W]
  torch::Tensor time;    // [B]
  torch::Tensor event;   // [B]
};

StatusOr<Batch> MakeBatch(
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
  return Batch{torch::stack(images), torch::tensor(time), torch::tensor(event)};
}

// Risk scores of `mine` (this rank's share of the validation set), gathered
// from every rank as [N, 3] rows (risk, time, event).
torch::Tensor PredictValidation(TrainerSession& session, ResNet3d& model,
                                const std::vector<SurvivalRecord>& records,
                                const std::vector<int64_t>& mine,
                                const std::vector<int64_t>& image_size,
                                int64_t batch_size) {
  torch::NoGradGuard no_grad;
  model->eval();
  const dw::World& world = session.world();
  std::vector<torch::Tensor> rows;
  for (const auto& items : MakeBatches(mine, batch_size, false)) {
    Batch b = ValueOrThrow(MakeBatch(records, items, [&](int64_t item) {
      return AtRow(records[item].where,
                   LoadSurvivalVolume(records[item].image, image_size));
    }));
    ToDevice(world.device(), {&b.images, &b.time, &b.event});
    torch::Tensor risk;
    {
      auto autocast = session.Autocast();
      risk = model->forward(b.images);
    }
    rows.push_back(torch::stack(
        {risk.reshape({-1}).to(torch::kFloat32), b.time, b.event}, 1));
  }
  torch::Tensor local =
      rows.empty() ? torch::zeros({0, 3}, torch::Device(world.device()))
                   : torch::cat(rows);
  return world.AllGatherVariable(local);
}

int Train(int argc, char** argv) {
  SurvivalOptions opt;
  TrainerCli cli(
      "survival_trainer: 3D ResNet + Cox partial likelihood on NIfTI volumes "
      "listed in a CSV (image,time,event or the guide's NIFTI "
      "path,time,event,Fold_1). Runs alone or under "
      "ddprun/torchrun (one process per rank).",
      {"runs/survival", /*epochs=*/4, /*synthetic_n=*/160});
  CLI::App& app = cli.app();
  CommonOptions& common = cli.common();
  cli.AddDataOptions("--csv_path", &opt.csv_path,
                     "CSV listing the volumes: columns image (or the guide's "
                     "'NIFTI path'), time, event and optionally the fold "
                     "column; or a data root holding the guide's dataset.csv",
                     &opt.val_fraction);
  app.add_option("--resnet", opt.resnet, "Backbone depth")
      ->check(CLI::IsMember(ResNet3dDepths()));
  app.add_option("--width", opt.width, "Stem channels (stages: w, 2w, 4w, 8w)")
      ->check(CLI::PositiveNumber);
  app.add_option("--image_size", opt.image_size,
                 "Volume size D H W fed to the network")
      ->expected(3);
  cli.AddBatchSize(&opt.batch_size,
                   "TOTAL batch over all ranks (per rank = total / world "
                   "size)");
  app.add_option("--learning_rate", opt.learning_rate, "Adam learning rate");
  app.add_option("--weight_decay", opt.weight_decay, "Adam weight decay");
  app.add_flag(
      "--use_smart_cache", opt.use_smart_cache,
      "Train each epoch on a cached fraction refreshed in the background");
  app.add_option("--cache_rate", opt.cache_rate,
                 "Fraction of the training set cached")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--replace_rate", opt.replace_rate,
                 "Fraction of the cache replaced each epoch")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--synthetic_size", opt.synthetic_size,
                 "Edge of the volumes written by --make_synthetic");
  app.add_flag("--gradient_checkpointing", opt.gradient_checkpointing,
               "Activation checkpointing: keep only the input of the stem and "
               "of each residual block, recompute the rest in backward (less "
               "memory, ~1/3 more compute, same gradients)");
  app.add_option("--clip_grad", opt.clip_grad,
                 "Clip the global gradient norm to this value (0: off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--fold_column", opt.fold_column,
                 "CSV column with each row's fold (the guide's Fold_1): rows "
                 "with --train_fold train, rows with --val_fold validate; "
                 "without the column, --val_fraction splits");
  app.add_option("--train_fold", opt.train_fold,
                 "Value of --fold_column for training rows");
  app.add_option("--val_fold", opt.val_fold,
                 "Value of --fold_column for validation rows");
  cli.AddAliases(SurvivalAliases());
  cli.AddForeignFlags(SurvivalForeignFlags());
  if (auto code = cli.Parse(argc, argv)) return *code;
  if (cli.MakeSynthetic(
          [&] {
            return WriteSyntheticSurvival(common.make_synthetic,
                                          common.synthetic_n,
                                          opt.synthetic_size, common.seed);
          },
          "subjects",
          "survival.csv and " + common.make_synthetic +
              "/dataset.csv (the guide's columns: NIFTI path, time, event, "
              "Fold_1)")) {
    return 0;
  }
  TrainerCli::Require("--csv_path", opt.csv_path);
  opt.csv_path = ValueOrThrow(ResolveSurvivalCsv(opt.csv_path));

  TrainerSession session(cli);
  const dw::World& world = session.world();
  if (opt.batch_size % world.world_size() != 0) {
    throw dw::ConfigError(
        "--batch_size " + std::to_string(opt.batch_size) +
        " is the total over ranks and must be divisible by the world size " +
        std::to_string(world.world_size()));
  }
  const int64_t per_rank = opt.batch_size / world.world_size();
  const int64_t accum = common.gradient_accumulation_steps;
  const SurvivalTable table = ValueOrThrow(
      ReadSurvivalCsv(opt.csv_path, opt.fold_column, cli.IsSet("fold_column")));
  const std::vector<SurvivalRecord>& records = table.records;
  std::vector<int64_t> train, val;
  if (table.has_fold) {
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
    std::tie(train, val) = session.Split(
        std::move(folds.train), std::move(folds.val), opt.csv_path, 16, 8);
  } else {
    std::tie(train, val) =
        session.Split(records.size(), opt.val_fraction, opt.csv_path, 16, 8);
  }
  session.LogMain(
      "survival: " + std::to_string(train.size()) + " train / " +
      std::to_string(val.size()) + " val subjects, world " +
      std::to_string(world.world_size()) + ", batch " +
      std::to_string(opt.batch_size) + " total (" + std::to_string(per_rank) +
      " per rank)" +
      (accum > 1 ? " x accumulation " + std::to_string(accum) : "") + ", " +
      std::to_string(session.num_workers()) + " loader threads, " +
      session.precision().description +
      (opt.gradient_checkpointing ? ", activation checkpointing" : ""));

  ResNet3dOptions model_options;
  model_options.depth = opt.resnet;
  model_options.width = opt.width;
  model_options.gradient_checkpointing = opt.gradient_checkpointing;
  // Backward recomputes under the forward's autocast.
  model_options.recompute_scope = [&session](const std::function<void()>& run) {
    auto autocast = session.Autocast();
    run();
  };
  ResNet3d model(model_options);
  session.PlaceOnDevice(*model);
  torch::optim::Adam optimizer(model->parameters(),
                               torch::optim::AdamOptions(opt.learning_rate)
                                   .weight_decay(opt.weight_decay));
  TrainingSetup setup{model.ptr(), &optimizer};
  setup.clip_grad_norm = opt.clip_grad;
  session.Prepare(setup);

  auto load_volume = [&](int64_t item) {
    return AtRow(records[item].where,
                 LoadSurvivalVolume(records[item].image, opt.image_size));
  };
  std::unique_ptr<SmartCache> cache;
  if (opt.use_smart_cache) {
    const int64_t cache_num =
        std::max<int64_t>(1, std::llround(train.size() * opt.cache_rate));
    cache = std::make_unique<SmartCache>(
        train, cache_num, std::llround(cache_num * opt.replace_rate),
        load_volume);
    session.LogMain("smart cache: " + std::to_string(cache->size()) + " of " +
                    std::to_string(train.size()) +
                    " training subjects cached, " +
                    std::to_string(cache->replace_num()) +
                    " replaced per epoch in the background");
  }
  LoopConfig loop;
  loop.dataset_size =
      cache ? cache->size() : static_cast<int64_t>(train.size());
  loop.micro_batch = per_rank;
  loop.accumulation = accum;
  loop.min_micro_batch = ResNet3dMinTrainBatch(opt.image_size);
  loop.min_micro_batch_reason =
      "batch norm over its 1x1x1 deepest feature maps at --image_size " +
      [&] {
        std::string sizes;
        for (int64_t v : opt.image_size)
          sizes += (sizes.empty() ? "" : " ") + std::to_string(v);
        return sizes;
      }() + " needs more than one value per channel";
  loop.batch_flag_scale = world.world_size();
  loop.samples_per_step = opt.batch_size * accum;
  loop.best = {"val_cindex", /*higher_is_better=*/true};

  auto begin_epoch = [&](int64_t epoch) {
    if (!cache) return;
    OkOrThrow(cache->BeginEpoch(epoch));
    const SmartCache::EpochStats& s = cache->last_epoch_stats();
    session.LogMain("smart cache epoch " + std::to_string(epoch + 1) + ": " +
                    std::to_string(s.kept) + " kept, " +
                    std::to_string(s.prefetched) +
                    " prefetched in the background, " +
                    std::to_string(s.loaded) + " loaded now");
  };
  // Sampler positions are cache slots or places in `train`.
  auto load_batch =
      [&](const std::vector<int64_t>& positions) -> StatusOr<Batch> {
    std::vector<int64_t> items;
    for (int64_t p : positions) {
      items.push_back(cache ? cache->ItemAt(p) : train[p]);
    }
    size_t next = 0;
    return MakeBatch(records, items,
                     [&](int64_t item) -> StatusOr<torch::Tensor> {
                       const int64_t position = positions[next++];
                       if (!cache) return load_volume(item);
                       return cache->Get(position);
                     });
  };
  // Each micro-batch is its own Cox risk set.
  auto train_step = [&](std::vector<Batch>& micro) {
    model->train();
    return session.Step(micro.size(), [&](int64_t m) {
      Batch& b = micro[m];
      ToDevice(world.device(), {&b.images, &b.time, &b.event});
      torch::Tensor risk;
      {
        auto autocast = session.Autocast();
        risk = model->forward(b.images);
      }
      return CoxPartialLikelihoodLoss(risk, b.time, b.event);
    });
  };
  auto validate = [&](int64_t epoch) -> nlohmann::json {
    const torch::Tensor gathered =
        PredictValidation(session, model, records, RankShare(world, val),
                          opt.image_size, per_rank)
            .cpu();
    std::vector<double> risk, time, event;
    for (int64_t i = 0; i < gathered.size(0); ++i) {
      risk.push_back(gathered[i][0].item<double>());
      time.push_back(gathered[i][1].item<double>());
      event.push_back(gathered[i][2].item<double>());
    }
    const double val_loss =
        CoxPartialLikelihoodLoss(gathered.select(1, 0), gathered.select(1, 1),
                                 gathered.select(1, 2))
            .item<double>();
    if (world.is_main()) {
      StatusOr<torch::Tensor> picture = RiskGroupsPicture(
          risk, time, event, "epoch " + std::to_string(epoch + 1));
      if (picture.ok()) {
        session.EmitImage("val/risk_groups", *picture);
      } else {
        session.LogMain("warning: no risk-group picture: " +
                        picture.status().message());
      }
    }
    // The count is not a val_ key: those become validation curves.
    return {{"val_loss", val_loss},
            {"val_cindex", ConcordanceIndex(risk, time, event)},
            {"validation_subjects", gathered.size(0)}};
  };
  session.Run<Batch>(loop, {begin_epoch, load_batch, train_step, validate});
  session.Done("val C-index " +
               std::to_string(session.last_metrics().value("val_cindex", 0.5)));
  return 0;
}

}  // namespace
}  // namespace ddprun::examples

int main(int argc, char** argv) {
  return ddprun::worker::RunMain(
      [&] { return ddprun::examples::Train(argc, argv); });
}
