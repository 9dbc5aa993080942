#include "examples/cascade/cascade_options.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "ddprun/worker/errors.h"
#include "examples/cascade/cascade_data.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

}  // namespace

CascadeCli::CascadeCli()
    : cli_(
          "cascade_trainer: CT volumes from X-ray views with a cascade of "
          "3D ViT diffusion stages, trained coarse to fine (the guide's "
          "hybrid ViT cascade). Reads the guide's JSON config (--config: "
          "xray_config, stage_configs, training, data) and patient folders "
          "(<id>/<id>_pa_drr.png, <id>_lat_drr.png, <id>.nii.gz). Runs "
          "alone or under ddprun / ddprun-accelerate (one process per GPU).",
          {"runs/cascade", /*epochs (per stage)=*/24, /*synthetic_n=*/40}) {
  CascadeOptions& o = options_;
  o.stage_defaults.sizes = {8, 16};
  o.stage_defaults.voxel_dim = 32;
  o.stage_defaults.vit_depth = 2;
  o.stage_defaults.num_heads = 2;
  o.stage_defaults.patch_size = 2;
  o.stage_defaults.physics_weight = 0.3;
  CLI::App& app = cli_.app();
  app.get_option("--epochs")
      ->description("Training epochs PER STAGE (num_epochs_per_stage)");
  cli_.AddDataOptions("--dataset_path", &o.dataset_path,
                      "Folder of patient folders (data.dataset_path)",
                      &o.val_fraction);
  const std::string every = " (every stage; beats the stage_configs entries)";
  app.add_option("--stages", o.stage_defaults.sizes,
                 "Cubic volume size of each stage, coarse to fine, e.g. "
                 "64,128,256 (replaces the config's stage_configs)")
      ->delimiter(',');
  app.add_option("--voxel_dim", o.stage_defaults.voxel_dim, "ViT width" + every)
      ->check(CLI::PositiveNumber);
  app.add_option("--vit_depth", o.stage_defaults.vit_depth,
                 "ViT blocks" + every)
      ->check(CLI::PositiveNumber);
  app.add_option("--num_heads", o.stage_defaults.num_heads,
                 "Attention heads" + every)
      ->check(CLI::PositiveNumber);
  app.add_option("--patch_size", o.stage_defaults.patch_size,
                 "Voxel patch edge: one token per patch_size^3 voxels" + every)
      ->check(CLI::PositiveNumber);
  app.add_option("--physics_weight", o.stage_defaults.physics_weight,
                 "Weight of the physics (projection) loss" + every)
      ->check(CLI::NonNegativeNumber);
  app.add_option("--img_size", o.xray.img_size,
                 "X-ray views are resized to img_size^2 (xray_config)")
      ->check(CLI::PositiveNumber);
  app.add_option("--num_views", o.xray.num_views,
                 "1: frontal; 2: frontal and lateral (xray_config)")
      ->check(CLI::Range(1, 2));
  app.add_option("--xray_patch_size", o.xray.patch_size,
                 "View pixels per X-ray patch edge (xray_config.patch_size)")
      ->check(CLI::PositiveNumber);
  cli_.AddBatchSize(&o.batch_size,
                    "Patients per GPU (per rank) per micro-batch");
  app.add_option("--learning_rate", o.learning_rate, "AdamW learning rate");
  app.add_option("--weight_decay", o.weight_decay, "AdamW weight decay");
  app.add_option("--num_timesteps", o.num_timesteps,
                 "Diffusion steps of the noise schedule")
      ->check(CLI::Range(2, 100000));
  app.add_option("--v_parameterization", o.v_parameterization,
                 "Predict v = sqrt(abar) eps - sqrt(1 - abar) x0 (true) or "
                 "the noise (false)");
  app.add_option("--sampling_steps", o.sampling_steps,
                 "DDIM steps when reconstructing a volume (validation)")
      ->check(CLI::PositiveNumber);
  app.add_option("--train_on_sampling_steps", o.train_on_sampling_steps,
                 "Train at the sampling steps' noise levels only (true, as "
                 "Fast-DDPM: learns in far fewer steps) or at all "
                 "num_timesteps (false)");
  cli_.AddClipGrad(&o.clip_grad);
  cli_.AddGradientCheckpointing(
      &o.gradient_checkpointing,
      "Recompute each ViT block's activations in backward instead of keeping "
      "them (less memory, ~1/3 more compute)");
  app.add_option("--conditioning_noise", o.conditioning_noise,
                 "Largest noise level added to the previous stage's input "
                 "in training (conditioning augmentation)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--augmentation", o.augmentation,
               "Mirror patients left-right at random (volume and views)");
  app.add_flag("--cache_in_memory", o.cache_in_memory,
               "Keep decoded patients in memory after their first load");
  app.add_flag("--flip_drrs_vertical", o.flip_drrs_vertical,
               "Flip the views upside down on load (DRRs made with rows "
               "running the other way)");
  app.add_option("--hu_window", o.hu_window,
                 "HU mapped to [-1, 1] (clamped): LOW HIGH")
      ->expected(2);
  cli_.AddAliases({{"num_epochs_per_stage", "epochs", ""},
                   {"accumulation_steps", "gradient_accumulation_steps", ""},
                   {"xray_config.patch_size", "xray_patch_size", ""},
                   {"val_split", "val_fraction", ""}});
  cli_.AddForeignFlags(
      {{"wandb", ForeignFlag::Arity::kNone,
        "no Weights & Biases here (no network needed): metrics go to "
        "<output_dir>/metrics.jsonl and TensorBoard event files"}});
  cli_.AddConfigSection("stage_configs",
                        [this](const std::string& at, const ConfigEntry& e) {
                          return stage_reader_.Add(at, e);
                        });
}

std::optional<int> CascadeCli::Parse(int argc, char** argv) {
  if (auto code = cli_.Parse(argc, argv)) return code;
  CascadeOptions& o = options_;
  StatusOr<std::vector<StageConfig>> stages = stage_reader_.Resolve(
      o.stage_defaults,
      [this](const std::string& name) { return cli_.IsSet(name); });
  if (!stages.ok()) throw dw::ConfigError(stages.status().message());
  stages_ = std::move(stages).value();
  if (o.xray.img_size % o.xray.patch_size != 0 ||
      o.xray.img_size < o.xray.patch_size) {
    throw dw::ConfigError("img_size " + std::to_string(o.xray.img_size) +
                          " must be a multiple of the X-ray patch size " +
                          std::to_string(o.xray.patch_size));
  }
  if (o.hu_window[1] <= o.hu_window[0]) {
    throw dw::ConfigError("--hu_window: LOW must be below HIGH");
  }
  if (o.sampling_steps > o.num_timesteps) {
    throw dw::ConfigError("--sampling_steps must be at most num_timesteps");
  }
  CommonOptions& common = cli_.common();
  const char* env = std::getenv("ACCELERATE_MIXED_PRECISION");
  if (!cli_.IsSet("amp") && !cli_.IsSet("mixed_precision") && env != nullptr &&
      *env != '\0') {
    const std::string precision = Lower(env);
    if (precision == "fp8") {
      throw dw::ConfigError(
          "ACCELERATE_MIXED_PRECISION=fp8 (accelerate launch "
          "--mixed_precision fp8): no fp8 training here; use fp16 or bf16");
    }
    if (precision != "no" && precision != "fp16" && precision != "bf16") {
      throw dw::ConfigError("ACCELERATE_MIXED_PRECISION=" + std::string(env) +
                            ": expected no, fp16 or bf16");
    }
    common.mixed_precision = precision;
  }
  return std::nullopt;
}

std::string CascadeCli::StagesText() const {
  std::string text;
  for (const StageConfig& s : stages_)
    text += (text.empty() ? "" : " -> ") + SizeText(s.volume_size);
  return text;
}

nlohmann::ordered_json CascadeCli::GuideConfig(
    const std::string& dataset_path) {
  const CascadeOptions& o = options_;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const StageConfig& s : stages_) {
    stages.push_back({{"name", s.name},
                      {"volume_size", s.volume_size},
                      {"voxel_dim", s.voxel_dim},
                      {"vit_depth", s.vit_depth},
                      {"num_heads", s.num_heads},
                      {"patch_size", s.patch_size},
                      {"physics_weight", s.physics_weight}});
  }
  const CommonOptions& common = cli_.common();
  nlohmann::ordered_json training = {
      {"batch_size", o.batch_size},
      {"learning_rate", o.learning_rate},
      {"num_epochs_per_stage", common.epochs},
      {"num_timesteps", o.num_timesteps},
      {"v_parameterization", o.v_parameterization},
      {"gradient_checkpointing", o.gradient_checkpointing},
      {"accumulation_steps", common.gradient_accumulation_steps}};
  // Left out unless asked for, so that accelerate launch's
  // --mixed_precision still reaches a run of this file.
  if (!common.mixed_precision.empty())
    training["mixed_precision"] = common.mixed_precision;
  return {{"xray_config",
           {{"img_size", o.xray.img_size},
            {"num_views", o.xray.num_views},
            {"patch_size", o.xray.patch_size}}},
          {"stage_configs", stages},
          {"training", training},
          {"data",
           {{"dataset_path", dataset_path},
            {"augmentation", o.augmentation},
            {"cache_in_memory", o.cache_in_memory},
            {"num_workers", common.num_workers}}}};
}

bool CascadeCli::MakeSynthetic() {
  const CommonOptions& common = cli_.common();
  const std::string& dir = common.make_synthetic;
  if (dir.empty()) return false;
  OkOrThrow(WriteSyntheticPatients(
      dir, common.synthetic_n, stages_.back().volume_size,
      options_.xray.img_size, options_.xray.num_views, common.seed));
  const std::string path = dir + "/config.json";
  std::ofstream out(path);
  out << GuideConfig(dir).dump(2) << "\n";
  if (!out.flush()) throw dw::ConfigError("cannot write " + path);
  std::printf("wrote %lld patients to %s/ and their config to %s\n",
              static_cast<long long>(common.synthetic_n), dir.c_str(),
              path.c_str());
  return true;
}

}  // namespace ddprun::examples
