// ddpm_trainer: Fast-DDPM 3D (BraTS-like): synthesizes one MRI modality from
// the other three with a conditional 3D diffusion UNet trained and sampled
// on a 10-step schedule, with progressive volume sizes.
#include <filesystem>
#include <sstream>

#include <torch/torch.h>

#include "ddprun/worker/worker.h"
#include "examples/common/metrics.h"
#include "examples/common/nifti_io.h"
#include "examples/common/norm_layer.h"
#include "examples/common/trainer_session.h"
#include "examples/ddpm/brats_data.h"
#include "examples/ddpm/fast_ddpm.h"
#include "examples/ddpm/unet3d.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

struct DdpmOptions {
  std::string csv_path;
  double val_fraction = 0.2;
  // CPU-sized defaults: a default run on the synthetic data takes ~20 s
  // under ddprun on 2 cores (16,24 with 24^3 data took 90 s).
  std::vector<int64_t> stages{12, 16};
  int64_t target_modality = 3;
  int64_t width = 8;
  std::string norm = "group";
  bool sync_batchnorm = false;
  int64_t batch_size = 1;  // per GPU
  int64_t timesteps = 10;
  bool v_parameterization = false;
  double learning_rate = 2e-3;
  double clip_grad = 1.0;
  int64_t synthetic_size = 16;
};

// Channels: the target modality first (noised), then the conditions.
std::pair<torch::Tensor, torch::Tensor> SplitTarget(
    const torch::Tensor& volumes, int64_t target) {
  std::vector<int64_t> cond;
  for (int64_t c = 0; c < kBratsModalities; ++c) {
    if (c != target) cond.push_back(c);
  }
  return {volumes.narrow(1, target, 1),
          volumes.index_select(1, torch::tensor(cond))};
}

StatusOr<torch::Tensor> LoadCase(const BratsCase& c, int64_t size) {
  return AtRow(c.where, LoadBratsCase(c.image, size));
}

int Train(int argc, char** argv) {
  DdpmOptions opt;
  TrainerCli cli(
      "ddpm_trainer: Fast-DDPM 3D. Synthesizes one modality of 4-channel "
      "NIfTI volumes (BraTS-like, listed in a CSV with an `image` column) "
      "from the other three with a conditional 3D UNet trained and sampled "
      "on a short schedule.",
      {"runs/ddpm", /*epochs (per stage)=*/3, /*synthetic_n=*/40,
       /*gradient_accumulation_steps=*/4});
  CLI::App& app = cli.app();
  CommonOptions& common = cli.common();
  app.get_option("--epochs")->description("Training epochs PER STAGE");
  cli.AddDataOptions("--csv_path", &opt.csv_path,
                     "CSV with an `image` column of 4-channel NIfTI",
                     &opt.val_fraction);
  app.add_option("--stages", opt.stages,
                 "Progressive cubic volume sizes, e.g. 32,48,64 (even "
                 "numbers); each stage trains --epochs epochs and is "
                 "resumable")
      ->delimiter(',');
  app.add_option("--target_modality", opt.target_modality,
                 "Channel synthesized (0-3)")
      ->check(CLI::Range(0, 3));
  app.add_option("--width", opt.width, "UNet channels of the first level");
  cli.AddNormOptions(&opt.norm, &opt.sync_batchnorm);
  cli.AddBatchSize(&opt.batch_size, "Volumes per GPU per micro-batch");
  app.add_option("--timesteps", opt.timesteps,
                 "Fast-DDPM steps used out of 1000")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--v_parameterization", opt.v_parameterization,
               "Predict v = sqrt(abar) eps - sqrt(1 - abar) x0 instead of eps");
  app.add_option("--learning_rate", opt.learning_rate, "Adam learning rate");
  app.add_option("--clip_grad", opt.clip_grad, "Global gradient-norm clip");
  app.add_option("--synthetic_size", opt.synthetic_size,
                 "Edge of --make_synthetic volumes");
  if (auto code = cli.Parse(argc, argv)) return *code;
  for (int64_t s : opt.stages) {
    if (s < 4 || s % 2)
      throw dw::ConfigError("--stages sizes must be even and >= 4");
  }
  const NormKind norm = ParseNormKind(opt.norm, opt.sync_batchnorm);
  if (cli.MakeSynthetic(
          [&] {
            return WriteSyntheticBrats(common.make_synthetic,
                                       common.synthetic_n, opt.synthetic_size,
                                       common.seed);
          },
          "cases", "cases.csv")) {
    return 0;
  }
  TrainerCli::Require("--csv_path", opt.csv_path);

  TrainerSession session(cli);
  const dw::World& world = session.world();
  const std::vector<BratsCase> cases = ValueOrThrow(ReadBratsCsv(opt.csv_path));
  auto [train, val] =
      session.Split(cases.size(), opt.val_fraction, opt.csv_path, 8, 2);
  if (common.debug) opt.stages.resize(1);
  const int64_t accum = common.gradient_accumulation_steps;
  std::ostringstream stages;
  for (size_t i = 0; i < opt.stages.size(); ++i)
    stages << (i ? "," : "") << opt.stages[i];
  session.LogMain(
      "ddpm: " + std::to_string(train.size()) + " train / " +
      std::to_string(val.size()) + " val cases, stages " + stages.str() +
      ", effective batch " + std::to_string(opt.batch_size) + " x " +
      std::to_string(world.world_size()) + " ranks x " + std::to_string(accum) +
      " accumulation = " +
      std::to_string(opt.batch_size * world.world_size() * accum) + ", " +
      std::to_string(opt.timesteps) + " timesteps, " +
      (opt.v_parameterization ? "v" : "eps") + "-prediction, " +
      NormKindName(norm) + " norm, " + session.precision().description);

  UNet3dOptions model_options;
  model_options.width = opt.width;
  model_options.norm = norm;
  model_options.world = world;
  UNet3d model(model_options);
  session.PlaceOnDevice(*model);
  torch::optim::Adam optimizer(model->parameters(),
                               torch::optim::AdamOptions(opt.learning_rate));
  const FastDdpm ddpm(opt.timesteps, opt.v_parameterization);
  TrainingSetup setup;
  setup.model = model.ptr();
  setup.optimizer = &optimizer;
  // SyncBatchNorm computes the same running statistics on every rank, so
  // DDP's per-step broadcast of rank 0's buffers would only hide a failure
  // to synchronise (norm_stats_rank_spread reports one).
  setup.ddp.broadcast_buffers = norm != NormKind::kSyncBatch;
  setup.clip_grad_norm = opt.clip_grad;
  const int64_t per_stage = common.epochs;
  setup.total_epochs = per_stage * static_cast<int64_t>(opt.stages.size());
  session.Prepare(setup);
  auto net = [&](const torch::Tensor& x_t, const torch::Tensor& t,
                 const torch::Tensor& cond) {
    auto autocast = session.Autocast();
    return model->forward(torch::cat({x_t, cond}, 1), t);
  };

  for (size_t stage = 0; stage < opt.stages.size(); ++stage) {
    LoopConfig loop;
    loop.end_epoch = per_stage * static_cast<int64_t>(stage + 1);
    if (session.state().epoch >= loop.end_epoch) continue;  // done before
    const int64_t size = opt.stages[stage];
    loop.dataset_size = static_cast<int64_t>(train.size());
    loop.micro_batch = opt.batch_size;
    loop.accumulation = accum;
    // PSNR is comparable within a stage only: one best file per stage.
    loop.best = {"val_psnr", /*higher_is_better=*/true,
                 "stage" + std::to_string(stage + 1) + "_best.pt"};
    session.LogMain("stage " + std::to_string(stage + 1) + "/" +
                    std::to_string(opt.stages.size()) + ": volumes " +
                    std::to_string(size) + "^3");

    auto load =
        [&](const std::vector<int64_t>& positions) -> StatusOr<torch::Tensor> {
      std::vector<torch::Tensor> volumes;
      for (int64_t p : positions) {
        DDP_ASSIGN_OR_RETURN(torch::Tensor v, LoadCase(cases[train[p]], size));
        volumes.push_back(v);
      }
      return torch::stack(volumes);
    };
    auto step = [&](std::vector<torch::Tensor>& micro) {
      model->train();
      return session.Step(micro.size(), [&](int64_t m) {
        ToDevice(world.device(), {&micro[m]});
        auto [target, cond] = SplitTarget(micro[m], opt.target_modality);
        FastDdpm::Noised noised = ddpm.AddNoise(target);
        torch::Tensor out = net(noised.x_t, noised.t, cond).to(torch::kFloat32);
        return torch::mse_loss(out, noised.target);
      });
    };
    // Samples every validation case of this rank on the 10-step schedule;
    // PSNR/SSIM sums are reduced over ranks. A constant guess (the true
    // volume's mean) is scored the same way as a reference.
    auto validate = [&](int64_t epoch) -> nlohmann::json {
      torch::NoGradGuard no_grad;
      model->eval();
      // Ranks must sample with the same batch-norm statistics.
      const double norm_spread =
          norm == NormKind::kGroup ? 0.0 : AlignBuffersWithRank0(world, *model);
      double psnr = 0, ssim = 0, baseline = 0, ssim_baseline = 0, count = 0;
      for (int64_t item : RankShare(world, val)) {
        torch::Tensor v =
            ValueOrThrow(LoadCase(cases[item], size)).unsqueeze(0);
        ToDevice(world.device(), {&v});
        auto [target, cond] = SplitTarget(v, opt.target_modality);
        torch::Tensor sample =
            ddpm.Sample([&](const torch::Tensor& x,
                            const torch::Tensor& t) { return net(x, t, cond); },
                        target.sizes(), target.options());
        psnr += Psnr(sample, target, 2.0);
        ssim += Ssim(sample, target, 2.0);
        const torch::Tensor constant =
            torch::full_like(target, target.mean().item<double>());
        baseline += Psnr(constant, target, 2.0);
        ssim_baseline += Ssim(constant, target, 2.0);
        if (count == 0 && world.is_main()) {
          OkOrThrow(WriteNifti(
              common.output_dir + "/samples/epoch" + std::to_string(epoch + 1) +
                  "_size" + std::to_string(size) + ".nii",
              torch::cat({sample, target}, 1).squeeze(0).cpu()));
        }
        count += 1;
      }
      torch::Tensor sums =
          torch::tensor({psnr, ssim, baseline, count, ssim_baseline},
                        torch::kFloat64)
              .to(world.device());
      world.AllReduce(sums);
      sums = sums.cpu();
      auto s = sums.accessor<double, 1>();
      const double n = std::max(1.0, s[3]);
      nlohmann::json record = {{"stage", stage + 1},
                               {"image_size", size},
                               {"val_psnr", s[0] / n},
                               {"val_ssim", s[1] / n},
                               {"val_psnr_constant", s[2] / n},
                               {"val_ssim_constant", s[4] / n},
                               {"val_cases", static_cast<int64_t>(s[3])}};
      if (norm != NormKind::kGroup)
        record["norm_stats_rank_spread"] = norm_spread;
      return record;
    };
    if (world.is_main())
      std::filesystem::create_directories(common.output_dir + "/samples");
    session.Run<torch::Tensor>(loop, {nullptr, load, step, validate});
  }
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
