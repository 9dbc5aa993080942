// ddpm_trainer: Fast-DDPM 3D (BraTS): synthesizes one MRI modality from the
// other three with a conditional 3D diffusion UNet trained and sampled on a
// 10-step schedule, with progressive volume sizes. Takes the command lines
// and configs/fast_ddpm_3d.yml of the Fast-DDPM 3D BraTS multi-GPU guide
// (../shared/seeds/fast-ddpm-3d-brats.md).
#include <filesystem>
#include <sstream>

#include <torch/torch.h>

#include "ddprun/worker/worker.h"
#include "examples/common/guide_flags.h"
#include "examples/common/norm_layer.h"
#include "examples/common/trainer_session.h"
#include "examples/ddpm/brats_data.h"
#include "examples/ddpm/ddpm_validation.h"
#include "examples/ddpm/fast_ddpm.h"
#include "examples/ddpm/unet3d.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

struct DdpmOptions {
  std::string data_root;  // BraTS case folders
  std::string csv_path;   // or a case list
  double val_fraction = 0.2;
  // CPU-sized defaults: a default run on the synthetic data takes ~40 s of
  // CPU with one thread (16,24 with 24^3 data took 90 s under ddprun).
  std::vector<int64_t> stages{12, 16};
  int64_t target_modality = 3;
  int64_t width = 8;
  std::string norm = "group";
  bool sync_batchnorm = false;
  int64_t batch_size = 1;  // per GPU
  int64_t timesteps = 10;
  int64_t num_diffusion_timesteps = 1000;
  double beta_start = 1e-4;
  double beta_end = 0.02;
  std::string scheduler_type = "uniform";
  // x0: see examples/README.md, ddpm, for why it is the default.
  std::string prediction = "x0";
  bool v_parameterization = false;
  double learning_rate = 2e-3;
  double weight_decay = 0;
  double clip_grad = 1.0;
  bool gradient_checkpointing = false;
  int64_t synthetic_size = 16;
  std::string synthetic_layout = "brats";
  std::string exp = "runs";
  std::string doc = "ddpm";
};

// The guide's names (fast-ddpm-3d-brats.md and the scripts it runs,
// scripts/train_multi_gpu.py and scripts/train_3d.py) beside ours.
void AddGuideNames(TrainerCli& cli) {
  cli.AddAliases({
      {"num_timesteps", "num_diffusion_timesteps", ""},
      {"resume_path", "resume_from", ""},
      {"dist_backend", "backend", ""},
      {"gradient_clip", "clip_grad", ""},
      {"save_every", "checkpoint_every", ""},
  });
  using A = ForeignFlag::Arity;
  std::string no_wandb;
  for (const ForeignFlag& f : CommonForeignFlags()) {
    if (f.name == "use_wandb") no_wandb = f.explanation;
  }
  cli.AddForeignFlags({
      {"wandb_entity", A::kOne, no_wandb},
      {"gpu", A::kOne,
       "each rank uses cuda:LOCAL_RANK under NCCL (the launcher starts one "
       "process per GPU; CUDA_VISIBLE_DEVICES picks them), else the CPU"},
      {"rank", A::kOne,
       "RANK, LOCAL_RANK and WORLD_SIZE come from the launcher (ddprun sets "
       "them, with MASTER_ADDR and MASTER_PORT)"},
      {"port", A::kOne,
       "the rendezvous port is the launcher's: ddprun --master_port=P"},
      {"resume", A::kNone,
       "a run resumes from the newest checkpoint of its checkpoint dir by "
       "itself; --resume_from FILE (= --resume_path) starts from another"},
      {"log_every_n_steps", A::kOne,
       "rank 0 prints progress every --progress_interval seconds, and each "
       "epoch's metrics"},
      {"validate_every", A::kOne,
       "validation (every validation case sampled and scored) runs at the "
       "end of every epoch"},
  });
}

int Train(int argc, char** argv) {
  DdpmOptions opt;
  TrainerCli cli(
      "ddpm_trainer: Fast-DDPM 3D. Synthesizes one modality of BraTS cases "
      "(a folder of case folders with one NIfTI per modality, or a CSV) "
      "from the other three with a conditional 3D UNet trained and sampled "
      "on a short schedule.",
      {"runs/ddpm", /*epochs (per stage)=*/3, /*synthetic_n=*/40,
       /*gradient_accumulation_steps=*/4});
  CLI::App& app = cli.app();
  CommonOptions& common = cli.common();
  app.get_option("--epochs")->description("Training epochs PER STAGE");
  app.add_option("--data_root", opt.data_root,
                 "BraTS data root: case folders <case>/<case>_t1.nii.gz, "
                 "_t1ce, _t2, _flair (.nii.gz or .nii; BraTS 2023 -t1n, -t1c, "
                 "-t2w, -t2f too)");
  cli.AddDataOptions("--csv_path", &opt.csv_path,
                     "Or a CSV: an `image` column of 4-channel NIfTI, or "
                     "columns t1,t1ce,t2,flair",
                     &opt.val_fraction);
  app.add_option("--exp", opt.exp,
                 "With --doc: the run goes to EXP/DOC unless --output_dir "
                 "is given (the guide's experiment dir)");
  app.add_option("--doc", opt.doc, "Experiment name (see --exp)");
  app.add_option("--stages", opt.stages,
                 "Progressive cubic volume sizes, e.g. 32,48,64 (even "
                 "numbers); each stage trains --epochs epochs and is "
                 "resumable")
      ->delimiter(',');
  app.add_option("--target_modality", opt.target_modality,
                 "Channel synthesized (0-3: t1, t1ce, t2, flair)")
      ->check(CLI::Range(0, 3));
  app.add_option("--width", opt.width, "UNet channels of the first level");
  cli.AddNormOptions(&opt.norm, &opt.sync_batchnorm);
  cli.AddBatchSize(&opt.batch_size, "Volumes per GPU per micro-batch");
  app.add_option("--timesteps", opt.timesteps,
                 "Fast-DDPM steps used for training and sampling")
      ->check(CLI::Range(1, 1000));
  app.add_option("--num_diffusion_timesteps", opt.num_diffusion_timesteps,
                 "Length of the linear beta schedule")
      ->check(CLI::Range(2, 100000));
  app.add_option("--beta_start", opt.beta_start, "First beta of the schedule");
  app.add_option("--beta_end", opt.beta_end, "Last beta of the schedule");
  app.add_option("--scheduler_type", opt.scheduler_type,
                 "Which timesteps: uniform or non-uniform (Fast-DDPM's two)")
      ->check(CLI::IsMember({"uniform", "non-uniform", "non_uniform"}));
  app.add_option("--prediction", opt.prediction,
                 "What the UNet predicts: x0 (the clean volume), eps (the "
                 "noise, as Fast-DDPM) or v")
      ->check(CLI::IsMember({"x0", "eps", "v"}));
  app.add_flag("--v_parameterization", opt.v_parameterization,
               "Same as --prediction v: predict v = sqrt(abar) eps - "
               "sqrt(1 - abar) x0 instead of eps");
  app.add_option("--learning_rate", opt.learning_rate, "Adam learning rate");
  app.add_option("--weight_decay", opt.weight_decay, "Adam weight decay");
  app.add_option("--clip_grad", opt.clip_grad, "Global gradient-norm clip");
  app.add_flag("--gradient_checkpointing", opt.gradient_checkpointing,
               "Recompute the UNet blocks' activations in the backward pass "
               "instead of keeping them (less memory, one more forward)");
  app.add_option("--synthetic_size", opt.synthetic_size,
                 "Edge of --make_synthetic volumes");
  app.add_option("--synthetic_layout", opt.synthetic_layout,
                 "--make_synthetic writes BraTS case folders and a CSV of "
                 "them (brats) or 4-channel volumes and a CSV (csv)")
      ->check(CLI::IsMember({"brats", "csv"}));
  AddGuideNames(cli);
  if (auto code = cli.Parse(argc, argv)) return *code;
  for (int64_t s : opt.stages) {
    if (s < 4 || s % 2)
      throw dw::ConfigError("--stages sizes must be even and >= 4");
  }
  if (opt.v_parameterization) {
    if (cli.IsSet("prediction") && opt.prediction != "v") {
      throw dw::ConfigError("--v_parameterization and --prediction " +
                            opt.prediction + " disagree; give one of them");
    }
    opt.prediction = "v";
  }
  // The guide's configs/fast_ddpm_3d.yml asks for synchronised batch norm;
  // Fast-DDPM's UNet (and ours, by default) has group norm, which has no
  // batch statistics: nothing to synchronise. On the command line the
  // combination stays an error (ParseNormKind).
  std::string sync_note;
  if (const std::string where = cli.ConfigSource("sync_batchnorm");
      opt.sync_batchnorm && opt.norm == "group" && !where.empty()) {
    sync_note = "note: " + where +
                ": the UNet uses group norm (per sample): no batch "
                "statistics to synchronise; for synchronised batch norm: "
                "--norm batch --sync_batchnorm";
    opt.sync_batchnorm = false;
  }
  const NormKind norm = ParseNormKind(opt.norm, opt.sync_batchnorm);
  if (cli.MakeSynthetic(
          [&] {
            return WriteSyntheticBrats(
                common.make_synthetic, common.synthetic_n, opt.synthetic_size,
                common.seed,
                opt.synthetic_layout == "csv" ? SyntheticLayout::kFourChannelCsv
                                              : SyntheticLayout::kBrats);
          },
          "cases", "cases.csv")) {
    return 0;
  }
  if (opt.data_root.empty() == opt.csv_path.empty()) {
    throw dw::ConfigError(
        opt.data_root.empty()
            ? "--data_root DIR (BraTS case folders) or --csv_path FILE is "
              "required (or --make_synthetic DIR)"
            : "give --data_root or --csv_path, not both");
  }
  if (!cli.IsSet("output_dir") && (cli.IsSet("exp") || cli.IsSet("doc")))
    common.output_dir = opt.exp + "/" + opt.doc;
  FastDdpmOptions ddpm_options;
  ddpm_options.steps = opt.timesteps;
  ddpm_options.total_steps = opt.num_diffusion_timesteps;
  ddpm_options.beta_start = opt.beta_start;
  ddpm_options.beta_end = opt.beta_end;
  ddpm_options.schedule = ParseTimestepSchedule(opt.scheduler_type);
  ddpm_options.prediction = ParsePrediction(opt.prediction);
  const FastDdpm ddpm(ddpm_options);

  TrainerSession session(cli);
  const dw::World& world = session.world();
  if (!sync_note.empty()) session.LogMain(sync_note);
  const std::string source =
      opt.data_root.empty() ? opt.csv_path : opt.data_root;
  const std::vector<BratsCase> cases =
      ValueOrThrow(opt.data_root.empty() ? ReadBratsCsv(opt.csv_path)
                                         : ScanBratsRoot(opt.data_root));
  auto [train, val] =
      session.Split(cases.size(), opt.val_fraction, source, 8, 2);
  if (common.debug) opt.stages.resize(1);
  const int64_t accum = common.gradient_accumulation_steps;
  const int64_t effective_batch = opt.batch_size * world.world_size() * accum;
  std::ostringstream stages;
  for (size_t i = 0; i < opt.stages.size(); ++i)
    stages << (i ? "," : "") << opt.stages[i];
  std::ostringstream ts;
  for (size_t i = 0; i < ddpm.timesteps().size(); ++i)
    ts << (i ? "," : "") << ddpm.timesteps()[i];
  session.LogMain(
      "ddpm: " + std::to_string(train.size()) + " train / " +
      std::to_string(val.size()) + " val cases, stages " + stages.str() +
      ", effective batch " + std::to_string(opt.batch_size) + " x " +
      std::to_string(world.world_size()) + " ranks x " + std::to_string(accum) +
      " accumulation = " + std::to_string(effective_batch) + ", " +
      std::to_string(ddpm.timesteps().size()) + " timesteps, " +
      opt.prediction + "-prediction, " + NormKindName(norm) + " norm, " +
      session.precision().description +
      (opt.gradient_checkpointing ? ", gradient checkpointing" : ""));
  session.LogMain("timesteps (" + opt.scheduler_type + " of " +
                  std::to_string(opt.num_diffusion_timesteps) +
                  "): " + ts.str());

  UNet3dOptions model_options;
  model_options.width = opt.width;
  model_options.norm = norm;
  model_options.world = world;
  model_options.gradient_checkpointing = opt.gradient_checkpointing;
  model_options.recompute_autocast = {
      session.precision().autocast, world.device(), session.precision().dtype};
  UNet3d model(model_options);
  session.PlaceOnDevice(*model);
  torch::optim::Adam optimizer(model->parameters(),
                               torch::optim::AdamOptions(opt.learning_rate)
                                   .weight_decay(opt.weight_decay));
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
  const std::string samples_dir = common.output_dir + "/samples";
  if (world.is_main()) std::filesystem::create_directories(samples_dir);

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
    auto load_case = [&](int64_t item) {
      return AtRow(cases[item].where, LoadBratsCase(cases[item], size));
    };
    auto load =
        [&](const std::vector<int64_t>& positions) -> StatusOr<torch::Tensor> {
      std::vector<torch::Tensor> volumes;
      for (int64_t p : positions) {
        DDP_ASSIGN_OR_RETURN(torch::Tensor v, load_case(train[p]));
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
    ValidationSetup validation;
    validation.world = world;
    validation.ddpm = &ddpm;
    validation.net = net;
    validation.load = [&](int64_t item) {
      return ValueOrThrow(load_case(item));
    };
    validation.target_modality = opt.target_modality;
    validation.samples_dir = samples_dir;
    auto validate = [&](int64_t epoch) -> nlohmann::json {
      torch::NoGradGuard no_grad;
      model->eval();
      // Ranks must sample with the same batch-norm statistics.
      const double norm_spread =
          norm == NormKind::kGroup ? 0.0 : AlignBuffersWithRank0(world, *model);
      ValidationResult v =
          Validate(validation, RankShare(world, val), epoch, size);
      if (!v.panel.empty()) {
        session.EmitImage("val/samples",
                          SamplePanel(v.panel, opt.target_modality,
                                      "epoch " + std::to_string(epoch + 1) +
                                          ", " + std::to_string(size) +
                                          "^3: conditions, sample, "
                                          "truth"));
      }
      nlohmann::json record = {{"stage", stage + 1},
                               {"image_size", size},
                               {"effective_batch", effective_batch}};
      record.update(v.record);
      if (norm != NormKind::kGroup)
        record["norm_stats_rank_spread"] = norm_spread;
      return record;
    };
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
