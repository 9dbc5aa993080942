// ddpm_trainer: Fast-DDPM 3D (BraTS): synthesizes one MRI modality from the
// other three with a conditional 3D diffusion UNet trained and sampled on a
// 10-step schedule, with progressive volume sizes. Takes the command lines
// and configs/fast_ddpm_3d.yml of the Fast-DDPM 3D BraTS multi-GPU guide
// (../shared/seeds/fast-ddpm-3d-brats.md).
// Train() composes the frame (TrainerSession) with the trainer's pieces:
// options (ddpm_options), model, diffusion and loss (ddpm_model), data
// (ddpm_data) and the stages' step and validation (ddpm_step).
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "ddprun/worker/worker.h"
#include "examples/ddpm/ddpm_data.h"
#include "examples/ddpm/ddpm_model.h"
#include "examples/ddpm/ddpm_options.h"
#include "examples/ddpm/ddpm_step.h"
#include "examples/frame/trainer_session.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

int Train(int argc, char** argv) {
  DdpmCli cli;
  if (auto code = cli.Parse(argc, argv)) return *code;
  if (cli.MakeSynthetic()) return 0;
  const DdpmOptions& opt = cli.options();
  CommonOptions& common = cli.common();
  const NormKind norm = cli.norm();
  const FastDdpm ddpm(DdpmDiffusionOptions(opt));

  TrainerSession session(cli.trainer());
  const dw::World& world = session.world();
  if (!cli.sync_note().empty()) session.LogMain(cli.sync_note());
  const std::string source =
      opt.data_root.empty() ? opt.csv_path : opt.data_root;
  const std::vector<BratsCase> cases =
      ValueOrThrow(opt.data_root.empty() ? ReadBratsCsv(opt.csv_path)
                                         : ScanBratsRoot(opt.data_root));
  std::vector<int64_t> train, val;
  std::tie(train, val) =
      session.Split(cases.size(), opt.val_fraction, source, 8, 2);
  std::vector<int64_t> stages = opt.stages;
  if (common.debug) stages.resize(1);
  for (const std::string& line :
       DescribeDdpmRun(opt, ddpm, norm, train.size(), val.size(), stages,
                       common.gradient_accumulation_steps, world.world_size(),
                       session.precision().description)) {
    session.LogMain(line);
  }

  UNet3d model = MakeDdpmModel(
      opt, norm, world,
      {session.precision().autocast, world.device(), session.precision().dtype});
  session.PlaceOnDevice(*model);
  auto optimizer = MakeDdpmOptimizer(model->parameters(), opt);
  TrainingSetup setup;
  setup.model = model.ptr();
  setup.optimizer = optimizer.get();
  // SyncBatchNorm computes the same running statistics on every rank, so
  // DDP's per-step broadcast of rank 0's buffers would only hide a failure
  // to synchronise (norm_stats_rank_spread reports one).
  setup.ddp.broadcast_buffers = norm != NormKind::kSyncBatch;
  setup.clip_grad_norm = opt.clip_grad;
  setup.total_epochs = common.epochs * static_cast<int64_t>(stages.size());
  session.Prepare(setup);

  DdpmStages runner(session, opt, norm, model, ddpm, cases, std::move(train),
                    std::move(val), stages);
  for (size_t stage = 0; stage < stages.size(); ++stage) runner.Run(stage);
  const auto& last = session.last_metrics();
  session.Done("val PSNR " + std::to_string(last.value("val_psnr", 0.0)) +
               " dB (constant guess " +
               std::to_string(last.value("val_psnr_constant", 0.0)) +
               " dB), SSIM " + std::to_string(last.value("val_ssim", 0.0)));
  return 0;
}

}  // namespace
}  // namespace ddprun::examples

int main(int argc, char** argv) {
  return ddprun::worker::RunMain(
      [&] { return ddprun::examples::Train(argc, argv); });
}
