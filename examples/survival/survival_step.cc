#include "examples/survival/survival_step.h"

#include <string>

#include "examples/frame/batch_loader.h"
#include "examples/frame/eval_metrics.h"
#include "examples/frame/trainer_support.h"
#include "examples/survival/risk_groups.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

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
    SurvivalBatch b =
        ValueOrThrow(MakeSurvivalBatch(records, items, [&](int64_t item) {
          return LoadSurvivalRecord(records[item], image_size);
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

}  // namespace

double SurvivalTrainStep(TrainerSession& session, ResNet3d& model,
                         std::vector<SurvivalBatch>& micro) {
  model->train();
  return session.Step(micro.size(), [&](int64_t m) {
    SurvivalBatch& b = micro[m];
    ToDevice(session.world().device(), {&b.images, &b.time, &b.event});
    return SurvivalLoss(model, b, [&] { return session.Autocast(); });
  });
}

nlohmann::json ValidateSurvival(TrainerSession& session, ResNet3d& model,
                                const std::vector<SurvivalRecord>& records,
                                const std::vector<int64_t>& val,
                                const std::vector<int64_t>& image_size,
                                int64_t batch_size, int64_t epoch) {
  const dw::World& world = session.world();
  const torch::Tensor gathered =
      PredictValidation(session, model, records, RankShare(world, val),
                        image_size, batch_size)
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
}

}  // namespace ddprun::examples
