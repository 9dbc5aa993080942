#include "examples/ddpm/ddpm_step.h"

#include <filesystem>
#include <sstream>
#include <utility>

#include "examples/ddpm/ddpm_model.h"
#include "examples/frame/trainer_support.h"

namespace ddprun::examples {

namespace dw = ddprun::worker;

namespace {

// "a,b,c".
template <typename T>
std::string JoinComma(const std::vector<T>& values) {
  std::ostringstream out;
  for (size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
  return out.str();
}

}  // namespace

std::vector<std::string> DescribeDdpmRun(const DdpmOptions& opt,
                                         const FastDdpm& ddpm, NormKind norm,
                                         size_t train_cases, size_t val_cases,
                                         const std::vector<int64_t>& stages,
                                         int64_t accumulation, int world_size,
                                         const std::string& precision) {
  const int64_t effective_batch = opt.batch_size * world_size * accumulation;
  return {"ddpm: " + std::to_string(train_cases) + " train / " +
              std::to_string(val_cases) + " val cases, stages " +
              JoinComma(stages) + ", effective batch " +
              std::to_string(opt.batch_size) + " x " +
              std::to_string(world_size) + " ranks x " +
              std::to_string(accumulation) +
              " accumulation = " + std::to_string(effective_batch) + ", " +
              std::to_string(ddpm.timesteps().size()) + " timesteps, " +
              opt.prediction + "-prediction, " + NormKindName(norm) +
              " norm, " + precision +
              (opt.gradient_checkpointing ? ", gradient checkpointing" : ""),
          "timesteps (" + opt.scheduler_type + " of " +
              std::to_string(opt.num_diffusion_timesteps) +
              "): " + JoinComma(ddpm.timesteps())};
}

DdpmStages::DdpmStages(TrainerSession& session, const DdpmOptions& opt,
                       NormKind norm, UNet3d model, const FastDdpm& ddpm,
                       const std::vector<BratsCase>& cases,
                       std::vector<int64_t> train, std::vector<int64_t> val,
                       std::vector<int64_t> stages)
    : session_(session),
      opt_(opt),
      norm_(norm),
      model_(std::move(model)),
      ddpm_(ddpm),
      cases_(cases),
      train_(std::move(train)),
      val_(std::move(val)),
      stages_(std::move(stages)),
      samples_dir_(session.common().output_dir + "/samples"),
      effective_batch_(opt.batch_size * session.world().world_size() *
                       session.common().gradient_accumulation_steps) {
  if (session_.world().is_main())
    std::filesystem::create_directories(samples_dir_);
}

StatusOr<torch::Tensor> DdpmStages::LoadCase(int64_t item,
                                             int64_t size) const {
  return AtRow(cases_[item].where, LoadBratsCase(cases_[item], size));
}

double DdpmStages::Step(std::vector<torch::Tensor>& micro) {
  model_->train();
  return session_.Step(micro.size(), [&](int64_t m) {
    ToDevice(session_.world().device(), {&micro[m]});
    return DdpmLoss(model_, ddpm_, micro[m], opt_.target_modality,
                    [&] { return session_.Autocast(); });
  });
}

nlohmann::json DdpmStages::ValidateEpoch(size_t stage, int64_t epoch) {
  const dw::World& world = session_.world();
  const int64_t size = stages_[stage];
  ValidationSetup validation;
  validation.world = world;
  validation.ddpm = &ddpm_;
  validation.net = [&](const torch::Tensor& x_t, const torch::Tensor& t,
                       const torch::Tensor& cond) {
    auto autocast = session_.Autocast();
    return model_->forward(torch::cat({x_t, cond}, 1), t);
  };
  validation.load = [&](int64_t item) {
    return ValueOrThrow(LoadCase(item, size));
  };
  validation.target_modality = opt_.target_modality;
  validation.samples_dir = samples_dir_;
  torch::NoGradGuard no_grad;
  model_->eval();
  // Ranks must sample with the same batch-norm statistics.
  const double norm_spread =
      norm_ == NormKind::kGroup ? 0.0 : AlignBuffersWithRank0(world, *model_);
  ValidationResult v =
      Validate(validation, RankShare(world, val_), epoch, size);
  if (!v.panel.empty()) {
    session_.EmitImage("val/samples",
                       SamplePanel(v.panel, opt_.target_modality,
                                   "epoch " + std::to_string(epoch + 1) +
                                       ", " + std::to_string(size) +
                                       "^3: conditions, sample, "
                                       "truth"));
  }
  nlohmann::json record = {{"stage", stage + 1},
                           {"image_size", size},
                           {"effective_batch", effective_batch_}};
  record.update(v.record);
  if (norm_ != NormKind::kGroup) record["norm_stats_rank_spread"] = norm_spread;
  return record;
}

void DdpmStages::Run(size_t stage) {
  const int64_t per_stage = session_.common().epochs;
  LoopConfig loop;
  loop.end_epoch = per_stage * static_cast<int64_t>(stage + 1);
  if (session_.state().epoch >= loop.end_epoch) return;  // done before
  const int64_t size = stages_[stage];
  loop.dataset_size = static_cast<int64_t>(train_.size());
  loop.micro_batch = opt_.batch_size;
  loop.accumulation = session_.common().gradient_accumulation_steps;
  // PSNR is comparable within a stage only: one best file per stage.
  loop.best = {"val_psnr", /*higher_is_better=*/true,
               "stage" + std::to_string(stage + 1) + "_best.pt"};
  session_.LogMain("stage " + std::to_string(stage + 1) + "/" +
                   std::to_string(stages_.size()) + ": volumes " +
                   std::to_string(size) + "^3");
  auto load =
      [&](const std::vector<int64_t>& positions) -> StatusOr<torch::Tensor> {
    std::vector<torch::Tensor> volumes;
    for (int64_t p : positions) {
      DDP_ASSIGN_OR_RETURN(torch::Tensor v, LoadCase(train_[p], size));
      volumes.push_back(v);
    }
    return torch::stack(volumes);
  };
  session_.Run<torch::Tensor>(
      loop, {nullptr, load,
             [&](std::vector<torch::Tensor>& micro) { return Step(micro); },
             [&](int64_t epoch) { return ValidateEpoch(stage, epoch); }});
}

}  // namespace ddprun::examples
