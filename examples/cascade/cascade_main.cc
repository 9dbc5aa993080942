// cascade_trainer: CT volumes from X-ray views (the fifth guide's ViT
// cascade): per stage, an X-ray encoder conditions a 3D ViT that denoises
// the volume at that stage's size (v-parameterised diffusion); stages are
// trained one after the other, coarse to fine, each later one conditioned
// on the previous stage's output; a physics loss compares the radiographs
// of the predicted volume with the input views.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "ddprun/worker/worker.h"
#include "examples/cascade/cascade_batches.h"
#include "examples/cascade/cascade_cli.h"
#include "examples/cascade/cascade_eval.h"
#include "examples/cascade/cascade_model.h"
#include "examples/cascade/drr.h"
#include "examples/cascade/v_diffusion.h"
#include "examples/common/trainer_session.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

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

int Train(int argc, char** argv) {
  CascadeCli cli;
  if (auto code = cli.Parse(argc, argv)) return *code;
  const CascadeOptions& opt = cli.options();
  CommonOptions& common = cli.common();
  if (cli.MakeSynthetic()) return 0;
  TrainerCli::Require("--dataset_path (data.dataset_path)", opt.dataset_path);

  TrainerSession session(cli.trainer());
  const dw::World& world = session.world();
  std::vector<StageConfig> stages = cli.stages();
  if (common.debug) stages.resize(1);
  LoadOptions load;
  load.img_size = opt.xray.img_size;
  load.volume_size = cli.stages().back().volume_size;
  load.window = {opt.hu_window[0], opt.hu_window[1]};
  load.flip_views_vertical = opt.flip_drrs_vertical;
  PatientStore store(
      ValueOrThrow(ScanPatients(opt.dataset_path, opt.xray.num_views)), load,
      opt.cache_in_memory);
  auto [train, val] =
      session.Split(store.size(), opt.val_fraction, opt.dataset_path, 8, 4);
  const int64_t accum = common.gradient_accumulation_steps;
  session.LogMain(
      "cascade: " + std::to_string(train.size()) + " train / " +
      std::to_string(val.size()) + " val patients, " +
      std::to_string(opt.xray.num_views) + " views of " +
      std::to_string(opt.xray.img_size) + "^2, stages " + cli.StagesText() +
      "; batch " + std::to_string(opt.batch_size) + " per rank x " +
      std::to_string(world.world_size()) + " ranks x " + std::to_string(accum) +
      " accumulation = " +
      std::to_string(opt.batch_size * world.world_size() * accum) + ", " +
      std::to_string(opt.num_timesteps) + " timesteps (" +
      std::to_string(opt.sampling_steps) + "-step DDIM sampling), " +
      (opt.v_parameterization ? "v" : "eps") + "-prediction, " +
      session.precision().description +
      (opt.gradient_checkpointing ? ", gradient checkpointing" : ""));

  RecomputeAutocast recompute;
  recompute.enabled = session.precision().autocast;
  recompute.device = world.device();
  recompute.dtype = session.precision().dtype;
  CascadeModel model(cli.stages(), opt.xray, opt.gradient_checkpointing,
                     recompute);
  session.PlaceOnDevice(*model);
  torch::optim::AdamW optimizer(model->parameters(),
                                torch::optim::AdamWOptions(opt.learning_rate)
                                    .weight_decay(opt.weight_decay));
  const VDiffusion diffusion(opt.num_timesteps, opt.v_parameterization,
                             opt.sampling_steps, opt.train_on_sampling_steps);
  TrainingSetup setup;
  setup.model = model.ptr();
  setup.optimizer = &optimizer;
  // One stage trains at a time: the others' parameters get no gradient.
  setup.ddp.find_unused_parameters = true;
  setup.clip_grad_norm = opt.gradient_clip;
  const int64_t per_stage = common.epochs;
  setup.total_epochs = per_stage * static_cast<int64_t>(stages.size());
  session.Prepare(setup);

  CascadeEvaluator evaluator(&session, model, &diffusion, &store, common.seed);
  std::atomic<int64_t> current_epoch{0};
  TrainSums sums;
  for (size_t k = 0; k < stages.size(); ++k) {
    LoopConfig loop;
    loop.end_epoch = per_stage * static_cast<int64_t>(k + 1);
    if (session.state().epoch >= loop.end_epoch) continue;  // done before
    const StageConfig& stage = stages[k];
    const std::vector<int64_t> previous_size =
        k > 0 ? stages[k - 1].volume_size : std::vector<int64_t>();
    const double weight = stage.use_physics_loss ? stage.physics_weight : 0.0;
    loop.dataset_size = static_cast<int64_t>(train.size());
    loop.micro_batch = opt.batch_size;
    loop.accumulation = accum;
    // PSNR compares within a stage only: one best file per stage, named
    // as the guide's (stage2_best.pt).
    loop.best = {"val_psnr", /*higher_is_better=*/true,
                 stage.name + "_best.pt"};
    TrainOnly(model, k);
    const double frozen = FrozenChecksum(model, k);
    evaluator.ComputeMeanVolume(k, train);
    session.LogMain("stage " + std::to_string(k + 1) + "/" +
                    std::to_string(stages.size()) + " (" + stage.name +
                    "): volumes " + SizeText(stage.volume_size) + ", ViT " +
                    std::to_string(stage.vit_depth) + " x " +
                    std::to_string(stage.voxel_dim) + " (" +
                    std::to_string(stage.num_heads) + " heads, patches " +
                    std::to_string(stage.patch_size) + "^3), physics weight " +
                    std::to_string(weight));

    auto begin_epoch = [&](int64_t epoch) {
      current_epoch = epoch;
      sums = TrainSums();
    };
    auto load_batch =
        [&](const std::vector<int64_t>& positions) -> StatusOr<CascadeBatch> {
      std::vector<int64_t> items;
      for (int64_t p : positions) items.push_back(train[p]);
      const uint64_t seed = common.seed * 1000003 +
                            static_cast<uint64_t>(current_epoch.load()) * 7919 +
                            static_cast<uint64_t>(positions.front()) * 31 + k;
      return store.MakeBatch(items, stage.volume_size, previous_size,
                             opt.conditioning_noise, opt.augmentation, seed);
    };
    auto step = [&](std::vector<CascadeBatch>& micro) {
      model->train();
      // Training noise: a stream per (rank, optimizer step), so a run is
      // repeatable and a resumed run draws what the uninterrupted one drew
      // (a stream per rank alone would start over at the restart).
      constexpr uint64_t kTrainingNoise = 3;
      at::Generator noise = at::detail::createCPUGenerator(worker::MixSeed(
          {common.seed, static_cast<uint64_t>(world.rank()),
           static_cast<uint64_t>(session.state().step), kTrainingNoise}));
      return session.Step(micro.size(), [&](int64_t m) {
        CascadeBatch& b = micro[m];
        ToDevice(world.device(), {&b.views, &b.volume, &b.previous});
        const VDiffusion::Noised noised = diffusion.AddNoise(b.volume, noise);
        torch::Tensor out;
        {
          auto autocast = session.Autocast();
          out = model->stage(k)->forward(noised.x_t, noised.t, b.views,
                                         b.previous);
        }
        out = out.to(torch::kFloat32);
        const torch::Tensor diffusion_loss =
            torch::mse_loss(out, noised.target);
        const torch::Tensor physics =
            PhysicsLoss(diffusion.PredictX0(noised, out), b.views);
        sums.diffusion += diffusion_loss.item<double>();
        sums.physics += physics.item<double>();
        sums.count += 1;
        return weight > 0 ? diffusion_loss + weight * physics : diffusion_loss;
      });
    };
    auto validate = [&](int64_t) {
      nlohmann::json record = evaluator.Validate(k, val, sums);
      record["frozen_stages_changed"] = FrozenChecksum(model, k) != frozen;
      return record;
    };
    session.Run<CascadeBatch>(loop, {begin_epoch, load_batch, step, validate});
  }
  const auto& last = session.last_metrics();
  session.Done("val PSNR " + std::to_string(last.value("val_psnr", 0.0)) +
               " dB (mean training volume " +
               std::to_string(last.value("val_psnr_mean_volume", 0.0)) +
               " dB), SSIM " + std::to_string(last.value("val_ssim", 0.0)) +
               ", physics loss " +
               std::to_string(last.value("val_recon_physics_loss", 0.0)));
  return 0;
}

}  // namespace
}  // namespace ddprun::examples

int main(int argc, char** argv) {
  return ddprun::worker::RunMain(
      [&] { return ddprun::examples::Train(argc, argv); });
}
