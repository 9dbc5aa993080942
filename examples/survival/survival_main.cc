// survival_trainer: time-to-event prediction (MACE) from 3D volumes with a
// 3D ResNet and the Cox partial likelihood, data parallel over ranks.
// Train() composes the frame (TrainerSession) with the trainer's pieces:
// options (survival_options), data (survival_batches), model (survival_model)
// and step and validation (survival_step).
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "ddprun/worker/worker.h"
#include "examples/frame/trainer_session.h"
#include "examples/survival/survival_batches.h"
#include "examples/survival/survival_model.h"
#include "examples/survival/survival_options.h"
#include "examples/survival/survival_step.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

int Train(int argc, char** argv) {
  SurvivalCli cli;
  if (auto code = cli.Parse(argc, argv)) return *code;
  if (cli.MakeSynthetic()) return 0;
  cli.ResolveData();
  const SurvivalOptions& opt = cli.options();
  const int64_t accum = cli.common().gradient_accumulation_steps;

  TrainerSession session(cli.trainer());
  const dw::World& world = session.world();
  if (opt.batch_size % world.world_size() != 0) {
    throw dw::ConfigError(
        "--batch_size " + std::to_string(opt.batch_size) +
        " is the total over ranks and must be divisible by the world size " +
        std::to_string(world.world_size()));
  }
  const int64_t per_rank = opt.batch_size / world.world_size();
  const SurvivalTable table =
      ValueOrThrow(ReadSurvivalCsv(opt.csv_path, opt.fold_column,
                                   cli.trainer().IsSet("fold_column")));
  std::vector<int64_t> train, val;
  std::tie(train, val) = SplitSurvival(session, cli.trainer(), opt, table);
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

  // Backward recomputes under the forward's autocast.
  ResNet3d model = MakeSurvivalModel(
      opt, [&session](const std::function<void()>& run) {
        auto autocast = session.Autocast();
        run();
      });
  session.PlaceOnDevice(*model);
  auto optimizer = MakeSurvivalOptimizer(model->parameters(), opt);
  TrainingSetup setup{model.ptr(), optimizer.get()};
  setup.clip_grad_norm = opt.clip_grad;
  session.Prepare(setup);

  SurvivalTrainSet train_set(session, opt, table.records, std::move(train));
  const LoopConfig loop = SurvivalLoop(opt, world, accum, train_set.size());
  session.Run<SurvivalBatch>(
      loop,
      {[&](int64_t epoch) { train_set.BeginEpoch(epoch); },
       [&](const std::vector<int64_t>& positions) {
         return train_set.Load(positions);
       },
       [&](std::vector<SurvivalBatch>& micro) {
         return SurvivalTrainStep(session, model, micro);
       },
       [&](int64_t epoch) {
         return ValidateSurvival(session, model, table.records, val,
                                 opt.image_size, per_rank, epoch);
       }});
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
