// vqa_trainer: chest X-ray visual question answering (MIMIC-CXR VQA style)
// with a 14-label CheXpert head, data parallel, optional ZeRO sharding.
// Train() composes the frame (TrainerSession) with the trainer's pieces:
// options (vqa_options), data (vqa_data, vqa_batches) and model, optimizer,
// step and validation (vqa_step).
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "ddprun/worker/worker.h"
#include "examples/frame/trainer_session.h"
#include "examples/vqa/vqa_batches.h"
#include "examples/vqa/vqa_data.h"
#include "examples/vqa/vqa_options.h"
#include "examples/vqa/vqa_step.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

int Train(int argc, char** argv) {
  VqaCli cli;
  if (auto code = cli.Parse(argc, argv)) return *code;
  if (cli.MakeSynthetic()) return 0;
  const VqaOptions& opt = cli.options();
  const NormKind norm = cli.norm();

  TrainerSession session(cli.trainer());
  const dw::World& world = session.world();
  cli.ApplyGuideSettings(session);
  const VqaData data = ValueOrThrow(
      ReadVqaData(opt.data_path, opt.mimic_qa_path, cli.uncertain_policy()));
  const std::vector<VqaRecord>& records = data.records;
  session.LogMain("data: " + data.description);
  std::vector<int64_t> train, val;
  std::tie(train, val) =
      session.Split(records.size(), opt.val_fraction, opt.data_path, 32, 16);
  const VqaVocabularies vocab = BuildVqaVocabularies(records, train);
  const int64_t accum = cli.common().gradient_accumulation_steps;
  session.LogMain(DescribeVqaRun(opt, vocab, train.size(), val.size(), accum,
                                 world.world_size(), norm,
                                 session.precision().description));
  session.LogMain(DescribeUncertain(records, opt.uncertain_policy));

  VqaModel model =
      MakeVqaModel(opt, vocab.words.size(), vocab.answers.size(), norm, world);
  session.PlaceOnDevice(*model);
  VqaOptimizer optimizer = MakeVqaOptimizer(opt, world, model->parameters());
  session.LogMain(DescribeOptimizerState(*model, optimizer.sharded.get()));
  TrainingSetup setup;
  setup.model = model.ptr();
  setup.optimizer = optimizer.adam.get();
  setup.sharded_optimizer = optimizer.sharded.get();
  setup.use_ddp = opt.guide.zero < 2;  // ZeRO-2 reduces gradients itself
  session.Prepare(setup);

  auto load = [&](const std::vector<int64_t>& items) {
    return LoadVqaBatch(records, vocab.words, vocab.answers, opt, items);
  };
  LoopConfig loop;
  loop.dataset_size = static_cast<int64_t>(train.size());
  loop.micro_batch = opt.guide.batch_size;
  loop.accumulation = accum;
  loop.best = {"val_answer_accuracy", /*higher_is_better=*/true};
  session.Run<VqaBatch>(
      loop, {nullptr,
             [&](const std::vector<int64_t>& positions) {
               std::vector<int64_t> items;
               for (int64_t p : positions) items.push_back(train[p]);
               return load(items);
             },
             [&](std::vector<VqaBatch>& micro) {
               return VqaTrainStep(session, model, opt, micro);
             },
             [&](int64_t epoch) {
               return ValidateVqa(session, model, opt, norm, val, load, epoch);
             }});
  const auto& last = session.last_metrics();
  session.Done("answer accuracy " +
               std::to_string(last.value("val_answer_accuracy", 0.0)) +
               ", mean AUROC " +
               std::to_string(last.value("val_mean_auroc", 0.0)));
  return 0;
}

}  // namespace
}  // namespace ddprun::examples

int main(int argc, char** argv) {
  return ddprun::worker::RunMain(
      [&] { return ddprun::examples::Train(argc, argv); });
}
