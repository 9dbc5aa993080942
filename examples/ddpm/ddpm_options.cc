#include "examples/ddpm/ddpm_options.h"

#include "ddprun/worker/worker.h"
#include "examples/ddpm/ddpm_data.h"
#include "examples/formats/guide_flags.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

// The guide's names (fast-ddpm-3d-brats.md and the scripts it runs,
// scripts/train_multi_gpu.py and scripts/train_3d.py) beside ours.
void AddGuideNames(TrainerCli& cli) {
  cli.AddAliases({
      {"num_timesteps", "num_diffusion_timesteps", ""},
      {"resume_path", "resume_from", ""},
      {"dist_backend", "backend", ""},
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

// The data flags and the model's.
void AddModelFlags(TrainerCli& cli, DdpmOptions& opt) {
  CLI::App& app = cli.app();
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
}

// The diffusion's flags and the optimizer's.
void AddTrainingFlags(TrainerCli& cli, DdpmOptions& opt) {
  CLI::App& app = cli.app();
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
  cli.AddClipGrad(&opt.clip_grad);
  cli.AddGradientCheckpointing(
      &opt.gradient_checkpointing,
      "Recompute the UNet blocks' activations in the backward pass instead "
      "of keeping them (less memory, one more forward)");
  app.add_option("--synthetic_size", opt.synthetic_size,
                 "Edge of --make_synthetic volumes");
  app.add_option("--synthetic_layout", opt.synthetic_layout,
                 "--make_synthetic writes BraTS case folders and a CSV of "
                 "them (brats) or 4-channel volumes and a CSV (csv)")
      ->check(CLI::IsMember({"brats", "csv"}));
}

}  // namespace

TrainerDefaults DdpmTrainerDefaults() {
  return {"runs/ddpm", /*epochs (per stage)=*/3, /*synthetic_n=*/40,
          /*gradient_accumulation_steps=*/4};
}

DdpmCli::DdpmCli()
    : cli_("ddpm_trainer: Fast-DDPM 3D. Synthesizes one modality of BraTS "
           "cases (a folder of case folders with one NIfTI per modality, or "
           "a CSV) from the other three with a conditional 3D UNet trained "
           "and sampled on a short schedule.",
           DdpmTrainerDefaults()) {
  AddModelFlags(cli_, options_);
  AddTrainingFlags(cli_, options_);
  AddGuideNames(cli_);
}

std::optional<int> DdpmCli::Parse(int argc, char** argv) {
  if (auto code = cli_.Parse(argc, argv)) return code;
  DdpmOptions& opt = options_;
  for (int64_t s : opt.stages) {
    if (s < 4 || s % 2)
      throw dw::ConfigError("--stages sizes must be even and >= 4");
  }
  if (opt.v_parameterization) {
    if (cli_.IsSet("prediction") && opt.prediction != "v") {
      throw dw::ConfigError("--v_parameterization and --prediction " +
                            opt.prediction + " disagree; give one of them");
    }
    opt.prediction = "v";
  }
  // The guide's configs/fast_ddpm_3d.yml asks for synchronised batch norm;
  // Fast-DDPM's UNet (and ours, by default) has group norm, which has no
  // batch statistics: nothing to synchronise. On the command line the
  // combination stays an error (ParseNormKind).
  if (const std::string where = cli_.ConfigSource("sync_batchnorm");
      opt.sync_batchnorm && opt.norm == "group" && !where.empty()) {
    sync_note_ = "note: " + where +
                 ": the UNet uses group norm (per sample): no batch "
                 "statistics to synchronise; for synchronised batch norm: "
                 "--norm batch --sync_batchnorm";
    opt.sync_batchnorm = false;
  }
  norm_ = ParseNormKind(opt.norm, opt.sync_batchnorm);
  return std::nullopt;
}

bool DdpmCli::MakeSynthetic() {
  const DdpmOptions& opt = options_;
  CommonOptions& common = cli_.common();
  if (cli_.MakeSynthetic(
          [&] {
            return WriteSyntheticBrats(
                common.make_synthetic, common.synthetic_n, opt.synthetic_size,
                common.seed,
                opt.synthetic_layout == "csv" ? SyntheticLayout::kFourChannelCsv
                                              : SyntheticLayout::kBrats);
          },
          "cases", "cases.csv")) {
    return true;
  }
  if (opt.data_root.empty() == opt.csv_path.empty()) {
    throw dw::ConfigError(
        opt.data_root.empty()
            ? "--data_root DIR (BraTS case folders) or --csv_path FILE is "
              "required (or --make_synthetic DIR)"
            : "give --data_root or --csv_path, not both");
  }
  if (!cli_.IsSet("output_dir") && (cli_.IsSet("exp") || cli_.IsSet("doc")))
    common.output_dir = opt.exp + "/" + opt.doc;
  return false;
}

}  // namespace ddprun::examples
