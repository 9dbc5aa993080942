#include "examples/cascade/cascade_step.h"

#include <ATen/CPUGeneratorImpl.h>

#include <string>
#include <utility>

#include "ddprun/worker/worker.h"
#include "examples/cascade/drr.h"
#include "examples/frame/trainer_support.h"

namespace ddprun::examples {
namespace {

// Sum of squares of every parameter of the stages other than `active`: a
// change means a frozen stage moved.
double FrozenChecksum(CascadeModel& model, size_t active) {
  torch::NoGradGuard no_grad;
  double sum = 0;
  for (size_t j = 0; j < model->num_stages(); ++j) {
    if (j == active) continue;
    for (const auto& p : model->stage(j)->parameters())
      sum += p.to(torch::kFloat64).pow(2).sum().item<double>();
  }
  return sum;
}

// Only stage `active` trains: the others need no gradient (DDP finds them
// unused; AdamW skips parameters without one).
void TrainOnly(CascadeModel& model, size_t active) {
  for (size_t j = 0; j < model->num_stages(); ++j) {
    for (auto& p : model->stage(j)->parameters()) {
      p.requires_grad_(j == active);
      if (j != active) p.mutable_grad() = torch::Tensor();
    }
  }
}

}  // namespace

CascadeStages::CascadeStages(TrainerSession& session,
                             const CascadeOptions& opt, CascadeModel model,
                             const VDiffusion& diffusion, PatientStore& store,
                             std::vector<StageConfig> stages,
                             std::vector<int64_t> train,
                             std::vector<int64_t> val)
    : session_(session),
      opt_(opt),
      model_(std::move(model)),
      diffusion_(diffusion),
      store_(store),
      stages_(std::move(stages)),
      train_(std::move(train)),
      val_(std::move(val)),
      evaluator_(&session, model_, &diffusion, &store, session.common().seed) {}

double CascadeStages::Step(size_t k, double physics_weight,
                           std::vector<CascadeBatch>& micro) {
  const worker::World& world = session_.world();
  model_->train();
  // Training noise: a stream per (rank, optimizer step), so a run is
  // repeatable and a resumed run draws what the uninterrupted one drew
  // (a stream per rank alone would start over at the restart).
  constexpr uint64_t kTrainingNoise = 3;
  at::Generator noise = at::detail::createCPUGenerator(worker::MixSeed(
      {session_.common().seed, static_cast<uint64_t>(world.rank()),
       static_cast<uint64_t>(session_.state().step), kTrainingNoise}));
  return session_.Step(micro.size(), [&](int64_t m) {
    CascadeBatch& b = micro[m];
    ToDevice(world.device(), {&b.views, &b.volume, &b.previous});
    const VDiffusion::Noised noised = diffusion_.AddNoise(b.volume, noise);
    torch::Tensor out;
    {
      auto autocast = session_.Autocast();
      out = model_->stage(k)->forward(noised.x_t, noised.t, b.views,
                                      b.previous);
    }
    out = out.to(torch::kFloat32);
    const torch::Tensor diffusion_loss = torch::mse_loss(out, noised.target);
    const torch::Tensor physics =
        PhysicsLoss(diffusion_.PredictX0(noised, out), b.views);
    sums_.diffusion += diffusion_loss.item<double>();
    sums_.physics += physics.item<double>();
    sums_.count += 1;
    return physics_weight > 0 ? diffusion_loss + physics_weight * physics
                              : diffusion_loss;
  });
}

void CascadeStages::Run(size_t k) {
  const int64_t per_stage = session_.common().epochs;
  LoopConfig loop;
  loop.end_epoch = per_stage * static_cast<int64_t>(k + 1);
  if (session_.state().epoch >= loop.end_epoch) return;  // done before
  const StageConfig& stage = stages_[k];
  const std::vector<int64_t> previous_size =
      k > 0 ? stages_[k - 1].volume_size : std::vector<int64_t>();
  const double weight = stage.use_physics_loss ? stage.physics_weight : 0.0;
  loop.dataset_size = static_cast<int64_t>(train_.size());
  loop.micro_batch = opt_.batch_size;
  loop.accumulation = session_.common().gradient_accumulation_steps;
  // PSNR compares within a stage only: one best file per stage, named
  // as the guide's (stage2_best.pt).
  loop.best = {"val_psnr", /*higher_is_better=*/true, stage.name + "_best.pt"};
  TrainOnly(model_, k);
  const double frozen = FrozenChecksum(model_, k);
  evaluator_.ComputeMeanVolume(k, train_);
  session_.LogMain("stage " + std::to_string(k + 1) + "/" +
                   std::to_string(stages_.size()) + " (" + stage.name +
                   "): volumes " + SizeText(stage.volume_size) + ", ViT " +
                   std::to_string(stage.vit_depth) + " x " +
                   std::to_string(stage.voxel_dim) + " (" +
                   std::to_string(stage.num_heads) + " heads, patches " +
                   std::to_string(stage.patch_size) + "^3), physics weight " +
                   std::to_string(weight));

  auto begin_epoch = [&](int64_t epoch) {
    current_epoch_ = epoch;
    sums_ = TrainSums();
  };
  auto load_batch =
      [&](const std::vector<int64_t>& positions) -> StatusOr<CascadeBatch> {
    std::vector<int64_t> items;
    for (int64_t p : positions) items.push_back(train_[p]);
    const uint64_t seed = session_.common().seed * 1000003 +
                          static_cast<uint64_t>(current_epoch_.load()) * 7919 +
                          static_cast<uint64_t>(positions.front()) * 31 + k;
    return store_.MakeBatch(items, stage.volume_size, previous_size,
                            opt_.conditioning_noise, opt_.augmentation, seed);
  };
  auto step = [&](std::vector<CascadeBatch>& micro) {
    return Step(k, weight, micro);
  };
  auto validate = [&](int64_t) {
    nlohmann::json record = evaluator_.Validate(k, val_, sums_);
    record["frozen_stages_changed"] = FrozenChecksum(model_, k) != frozen;
    return record;
  };
  session_.Run<CascadeBatch>(loop, {begin_epoch, load_batch, step, validate});
}

LoadOptions CascadeLoadOptions(const CascadeCli& cli) {
  const CascadeOptions& opt = cli.options();
  LoadOptions load;
  load.img_size = opt.xray.img_size;
  load.volume_size = cli.stages().back().volume_size;
  load.window = {opt.hu_window[0], opt.hu_window[1]};
  load.flip_views_vertical = opt.flip_drrs_vertical;
  return load;
}

std::string DescribeCascadeRun(const CascadeCli& cli, size_t train_patients,
                               size_t val_patients, int64_t accumulation,
                               int world_size, const std::string& precision) {
  const CascadeOptions& opt = cli.options();
  return "cascade: " + std::to_string(train_patients) + " train / " +
         std::to_string(val_patients) + " val patients, " +
         std::to_string(opt.xray.num_views) + " views of " +
         std::to_string(opt.xray.img_size) + "^2, stages " + cli.StagesText() +
         "; batch " + std::to_string(opt.batch_size) + " per rank x " +
         std::to_string(world_size) + " ranks x " +
         std::to_string(accumulation) + " accumulation = " +
         std::to_string(opt.batch_size * world_size * accumulation) + ", " +
         std::to_string(opt.num_timesteps) + " timesteps (" +
         std::to_string(opt.sampling_steps) + "-step DDIM sampling), " +
         (opt.v_parameterization ? "v" : "eps") + "-prediction, " + precision +
         (opt.gradient_checkpointing ? ", gradient checkpointing" : "");
}

}  // namespace ddprun::examples
