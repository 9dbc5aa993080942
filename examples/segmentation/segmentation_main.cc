// segmentation_trainer: text-prompted 2D segmentation (PRS-Med): a UNet whose
// bottleneck is conditioned on a position prompt, Dice + BCE, data parallel.
// Train() composes the frame (TrainerSession) with the trainer's pieces:
// options (segmentation_options), data (segmentation_batches), model and loss
// (segmentation_model) and step and validation (segmentation_step).
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "ddprun/worker/worker.h"
#include "examples/formats/vocabulary.h"
#include "examples/frame/trainer_session.h"
#include "examples/segmentation/prs_med_layout.h"
#include "examples/segmentation/segmentation_batches.h"
#include "examples/segmentation/segmentation_model.h"
#include "examples/segmentation/segmentation_options.h"
#include "examples/segmentation/segmentation_step.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

int Train(int argc, char** argv) {
  SegmentationCli cli;
  if (auto code = cli.Parse(argc, argv)) return *code;
  if (cli.MakeSynthetic()) return 0;
  const SegOptions& opt = cli.options();
  const int64_t accum = cli.common().gradient_accumulation_steps;

  TrainerSession session(cli.trainer());
  const dw::World& world = session.world();
  const std::vector<SegRecord> records =
      ValueOrThrow(ReadSegData(opt.data_path));
  std::vector<int64_t> train, val;
  std::tie(train, val) = SplitRecords(session, records, opt);
  std::vector<std::string> prompts;
  for (int64_t i : train) prompts.push_back(records[i].prompt);
  const Vocabulary vocab = Vocabulary::Build(prompts);
  const double lr =
      dw::ScaleLearningRate(opt.learning_rate, world.world_size(),
                            opt.no_lr_scaling ? "none" : "linear");
  session.LogMain(
      "segmentation: " + std::to_string(train.size()) + " train / " +
      std::to_string(val.size()) + " val images, vocabulary " +
      std::to_string(vocab.size()) + ", world " +
      std::to_string(world.world_size()) + ", batch " +
      std::to_string(opt.batch_size) + " per rank" +
      (accum > 1 ? " x accumulation " + std::to_string(accum) : "") + ", lr " +
      std::to_string(lr) +
      (opt.no_lr_scaling ? " (not scaled)"
                         : " (--learning_rate x world " +
                               std::to_string(world.world_size()) + ")") +
      ", effective batch " +
      std::to_string(opt.batch_size * accum * world.world_size()) + ", " +
      session.precision().description);

  PromptUNet model = MakeSegmentationModel(opt, vocab.size());
  session.PlaceOnDevice(*model);
  auto optimizer = MakeSegmentationOptimizer(model->parameters(), lr);
  session.Prepare({model.ptr(), optimizer.get()});

  LoopConfig loop;
  loop.dataset_size = static_cast<int64_t>(train.size());
  loop.micro_batch = opt.batch_size;
  loop.accumulation = accum;
  loop.best = {"val_dice", /*higher_is_better=*/true};
  auto load = [&](const std::vector<int64_t>& positions) {
    std::vector<int64_t> items;
    for (int64_t p : positions) items.push_back(train[p]);
    return LoadSegBatch(records, vocab, opt, items);
  };
  auto step = [&](std::vector<SegBatch>& micro) {
    return SegmentationTrainStep(session, model, opt, micro);
  };
  auto validate = [&](int64_t epoch) {
    return ValidateSegmentation(session, model, opt, records, vocab, val,
                                epoch);
  };
  session.Run<SegBatch>(loop, {nullptr, load, step, validate});
  session.Done("val Dice " +
               std::to_string(session.last_metrics().value("val_dice", 0.0)));
  return 0;
}

}  // namespace
}  // namespace ddprun::examples

int main(int argc, char** argv) {
  return ddprun::worker::RunMain(
      [&] { return ddprun::examples::Train(argc, argv); });
}
