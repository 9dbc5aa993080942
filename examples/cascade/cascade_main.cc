// cascade_trainer: CT volumes from X-ray views (the fifth guide's ViT
// cascade): per stage, an X-ray encoder conditions a 3D ViT that denoises
// the volume at that stage's size (v-parameterised diffusion); stages are
// trained one after the other, coarse to fine, each later one conditioned
// on the previous stage's output; a physics loss compares the radiographs
// of the predicted volume with the input views.
// Train() composes the frame (TrainerSession) with the trainer's pieces:
// options (cascade_options, cascade_config), data (cascade_data,
// cascade_batches), model (cascade_model, v_diffusion) and the stages'
// step and validation (cascade_step, cascade_validation).
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "ddprun/worker/worker.h"
#include "examples/cascade/cascade_data.h"
#include "examples/cascade/cascade_model.h"
#include "examples/cascade/cascade_options.h"
#include "examples/cascade/cascade_step.h"
#include "examples/cascade/v_diffusion.h"
#include "examples/frame/trainer_session.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

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
  PatientStore store(
      ValueOrThrow(ScanPatients(opt.dataset_path, opt.xray.num_views)),
      CascadeLoadOptions(cli), opt.cache_in_memory);
  std::vector<int64_t> train, val;
  std::tie(train, val) =
      session.Split(store.size(), opt.val_fraction, opt.dataset_path, 8, 4);
  session.LogMain(DescribeCascadeRun(
      cli, train.size(), val.size(), common.gradient_accumulation_steps,
      world.world_size(), session.precision().description));

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
  setup.clip_grad_norm = opt.clip_grad;
  setup.total_epochs = common.epochs * static_cast<int64_t>(stages.size());
  session.Prepare(setup);

  CascadeStages runner(session, opt, model, diffusion, store, stages,
                       std::move(train), std::move(val));
  for (size_t k = 0; k < stages.size(); ++k) runner.Run(k);
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
