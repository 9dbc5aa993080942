// ddpm_trainer against its guide, ../shared/seeds/fast-ddpm-3d-brats.md:
// the guide's command lines and configs/fast_ddpm_3d.yml as written
// (`python scripts/train_multi_gpu.py` / `scripts/train_3d.py` ->
// ddpm_trainer, torchrun -> ddprun, the data path -> synthetic BraTS case
// folders), its batch-size table, the BraTS data root and its errors, and
// what a run leaves to look at. Lines after the first get our size flags
// (kSmall) appended so they take seconds; the first runs as written: it is
// the default run, which must beat its constant guess.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "ddprun_catch.h"

#include "tests/examples/trainer_run.h"

namespace ddprun::examples::testing {
namespace {

namespace fs = std::filesystem;

// The default synthetic data (--make_synthetic DIR, no other flag: 40 cases
// of 16^3) as BraTS case folders.
std::string DefaultRoot() {
  return fs::path(SyntheticData("ddpm", "", "cases.csv")).parent_path();
}

// 12 cases of 8^3 (10 train, 2 validation).
std::string SmallRoot() {
  return fs::path(SyntheticData("ddpm", "--n 12 --synthetic_size 8 --seed 2",
                                "cases.csv"))
      .parent_path();
}

// Our flags that make a guide line quick: one stage of 8^3, a narrow UNet,
// one epoch.
const std::string kSmall = " --stages 8 --width 4 --epochs 1";

// "cd DIR && ": the guide's lines write to relative paths (runs/<doc>).
std::string In(const std::string& dir) { return "cd " + dir + " && "; }

TEST_CASE(
    "ddpm_trainer: the guide's first command as written is the default run: "
    "it beats the constant guess by 3 dB and writes events, curves and "
    "sample pictures",
    "[ddpm][guide][train]") {
  const std::string cwd = FreshDir("ddpm_default_run");
  // python scripts/train_multi_gpu.py \
  //     --data_root /path/to/brats/data \
  //     --use_wandb \
  //     --wandb_project "fast-ddpm-3d-brats-multigpu"
  CommandResult r = RunCommand(In(cwd) + Bin("ddpm_trainer") +
                                   " \\\n    --data_root " + DefaultRoot() +
                                   " \\\n    --use_wandb \\\n    "
                                   "--wandb_project "
                                   "\"fast-ddpm-3d-brats-multigpu\"",
                               1200);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(LinesWith(r.output, "note: --use_wandb: ").size() == 1);
  CHECK(
      LinesWith(r.output, "note: --wandb_project fast-ddpm-3d-brats-multigpu: ")
          .size() == 1);
  CHECK(r.output.find("32 train / 8 val cases, stages 12,16, effective batch "
                      "1 x 1 ranks x 4 accumulation = 4, 10 timesteps, "
                      "x0-prediction") != std::string::npos);
  const std::string out = cwd + "/runs/ddpm";
  auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 6);  // 3 epochs at 12^3, 3 at 16^3
  const nlohmann::json& last = metrics.back();
  INFO(last.dump());
  CHECK(last["step"] == 48);  // 32 cases / 4 per step, 6 epochs
  CHECK(last["image_size"] == 16);
  CHECK(last["effective_batch"] == 4);
  CHECK(last["val_cases"] == 8);
  // Measured: 22.8 dB against 16.5 dB, SSIM 0.65 against 0.05.
  CHECK(last["val_psnr"].get<double>() >
        last["val_psnr_constant"].get<double>() + 3.0);
  CHECK(last["val_ssim"].get<double>() >
        last["val_ssim_constant"].get<double>() + 0.3);

  // TensorBoard events, read back with every CRC checked.
  std::vector<std::string> events = EventFiles(out);
  REQUIRE(events.size() == 1);
  nlohmann::json tb = ReadEvents(events[0]);
  CHECK_FALSE(tb["truncated"].get<bool>());
  std::map<std::string, std::vector<int64_t>> steps;
  std::map<std::string, nlohmann::json> images;
  for (const auto& record : tb["records"]) {
    for (const auto& v : record["values"]) {
      const std::string tag = v["tag"];
      steps[tag].push_back(record["step"]);
      if (v.contains("image")) images[tag] = v["image"];
    }
  }
  const std::vector<int64_t> epoch_ends{8, 16, 24, 32, 40, 48};
  CHECK(steps["train/loss"].size() == 48);
  CHECK(steps["train/lr"].size() == 48);
  // Each stage's first step starts its clock and has no rate (not a 0).
  const std::vector<int64_t>& rates = steps["train/samples_per_s"];
  CHECK(rates.size() == 46);
  CHECK(std::count(rates.begin(), rates.end(), 1) == 0);
  CHECK(std::count(rates.begin(), rates.end(), 25) == 0);
  CHECK(steps["train/epoch_loss"] == epoch_ends);
  for (const char* tag : {"val/psnr", "val/ssim", "val/psnr_constant",
                          "val/ssim_constant", "val/samples"}) {
    INFO(tag);
    CHECK(steps[tag] == epoch_ends);
  }
  // The picture: 3 conditions, the sample and the truth per case, 2 cases.
  REQUIRE(images.count("val/samples"));
  CHECK(images["val/samples"]["png_width"].get<int>() >= 5 * 128);
  CHECK(images["val/samples"]["png_height"].get<int>() >= 2 * 128);
  for (int64_t step : epoch_ends) {
    char name[64];
    std::snprintf(name, sizeof(name), "/images/val_samples_step%08lld.png",
                  static_cast<long long>(step));
    INFO(name);
    CHECK(PngSize(out + name).first >= 5 * 128);
  }
  CHECK(PngSize(out + "/training_curves.png").first > 0);
  CHECK(fs::exists(out + "/checkpoints/stage2_best.pt"));
}

TEST_CASE("ddpm_trainer: the guide's debug-mode command as written",
          "[ddpm][guide]") {
  const std::string cwd = FreshDir("ddpm_guide_debug");
  // python scripts/train_multi_gpu.py \
  //     --data_root /path/to/brats/data \
  //     --debug \
  //     --gpus "0,1"
  CommandResult r = RunCommand(In(cwd) + Bin("ddpm_trainer") + " --data_root " +
                                   SmallRoot() + " --debug --gpus \"0,1\"",
                               300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(LinesWith(r.output, "note: --gpus 0,1: ").size() == 1);
  auto metrics = ReadMetrics(cwd + "/runs/ddpm");
  REQUIRE(metrics.size() == 1);  // --debug: the first stage, one epoch
  CHECK(metrics[0]["image_size"] == 12);
  CHECK(metrics[0]["step"] == 2);  // 8 cases / (1 x 4 accumulation)
}

// Renames every case file of a copy of `from` to BraTS 2023's names
// (<case>-t1n.nii.gz, -t1c, -t2w, -t2f, -seg).
void CopyAsBrats2023(const std::string& from, const std::string& to) {
  const std::map<std::string, std::string> names{{"_t1.", "-t1n."},
                                                 {"_t1ce.", "-t1c."},
                                                 {"_t2.", "-t2w."},
                                                 {"_flair.", "-t2f."},
                                                 {"_seg.", "-seg."}};
  for (const auto& c : fs::directory_iterator(from)) {
    if (!c.is_directory()) continue;
    fs::create_directories(to + "/" + c.path().filename().string());
    for (const auto& f : fs::directory_iterator(c.path())) {
      std::string name = f.path().filename();
      for (const auto& [old, now] : names) {
        const size_t at = name.find(old);
        if (at != std::string::npos) name.replace(at, old.size(), now);
      }
      fs::copy_file(f.path(),
                    to + "/" + c.path().filename().string() + "/" + name);
    }
  }
}

TEST_CASE(
    "ddpm_trainer: the guide's local-development command as written, on "
    "BraTS 2023 names, writes to runs/<doc>",
    "[ddpm][guide]") {
  const std::string cwd = FreshDir("ddpm_guide_dev");
  CopyAsBrats2023(SmallRoot(), cwd + "/data/BraTS2023");
  // python scripts/train_multi_gpu.py \
  //     --data_root ./data/BraTS2023 \
  //     --gpus "0,1" \
  //     --debug \
  //     --use_wandb \
  //     --doc "dev_multigpu_test"
  CommandResult r = RunCommand(
      In(cwd) + Bin("ddpm_trainer") +
          " --data_root ./data/BraTS2023 --gpus \"0,1\" --debug --use_wandb "
          "--doc \"dev_multigpu_test\"",
      300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto metrics = ReadMetrics(cwd + "/runs/dev_multigpu_test");
  REQUIRE(metrics.size() == 1);
  CHECK(metrics[0]["val_cases"] == 2);
}

TEST_CASE(
    "ddpm_trainer: the guide's train_3d.py DataParallel line and its config "
    "example as written",
    "[ddpm][guide]") {
  const std::string cwd = FreshDir("ddpm_guide_config");
  // python scripts/train_3d.py \
  //     --data_root /path/to/brats/data \
  //     --multi_gpu \
  //     --use_wandb
  CommandResult dp =
      RunCommand(In(cwd) + Bin("ddpm_trainer") + " --data_root " + SmallRoot() +
                     " --multi_gpu --use_wandb" + kSmall,
                 300);
  INFO(dp.output);
  REQUIRE(dp.exit_code == 0);
  CHECK(LinesWith(dp.output, "note: --multi_gpu: no DataParallel").size() == 1);

  // "Update configs/fast_ddpm_3d.yml", verbatim.
  fs::create_directories(cwd + "/configs");
  WriteText(cwd + "/configs/fast_ddpm_3d.yml",
            "training:\n"
            "    batch_size: 1                  # Per-GPU batch size\n"
            "    gradient_accumulation_steps: 4   # Adjust based on memory\n"
            "    multi_gpu: true               # Enable multi-GPU\n"
            "    distributed: false            # Use DP (false) or DDP "
            "(true)\n"
            "    sync_batchnorm: true         # Sync batch norm across GPUs\n");
  CommandResult r = RunCommand(
      In(cwd) + Bin("ddpm_trainer") + " --data_root " + SmallRoot() +
          " --config configs/fast_ddpm_3d.yml --output_dir cfg" + kSmall,
      300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (const char* note :
       {"note: configs/fast_ddpm_3d.yml:4: training.multi_gpu: ",
        "note: configs/fast_ddpm_3d.yml:5: training.distributed: ",
        "note: configs/fast_ddpm_3d.yml:6: training.sync_batchnorm: the UNet "
        "uses group norm"}) {
    INFO(note);
    CHECK(LinesWith(r.output, note).size() == 1);
  }
  CHECK(r.output.find("effective batch 1 x 1 ranks x 4 accumulation = 4") !=
        std::string::npos);
  auto metrics = ReadMetrics(cwd + "/cfg");
  REQUIRE(metrics.size() == 1);
  CHECK(metrics[0]["step"] == 3);  // 10 cases / 4 per step, rounded up
  // On the command line the combination stays an error.
  CommandResult cli = RunCommand(
      Bin("ddpm_trainer") + " --data_root " + SmallRoot() + " --sync_batchnorm",
      60);
  CHECK(cli.exit_code == 2);
}

TEST_CASE(
    "ddpm_trainer: the guides' diffusion names (--num_timesteps, --lr, "
    "--num_epochs, --checkpoint_dir, --scheduler_type)",
    "[ddpm][guide]") {
  const std::string out = FreshDir("ddpm_guide_names");
  CommandResult r =
      RunCommand(Bin("ddpm_trainer") + " --data_root " + SmallRoot() +
                     " --output_dir " + out +
                     " --stages 8 --width 4 --num_timesteps 500 --timesteps 5 "
                     "--scheduler_type non-uniform --lr 1e-3 --num_epochs 1 "
                     "--checkpoint_dir " +
                     out + "/ckpts --prediction eps",
                 300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("timesteps (non-uniform of 500): 0,175,349,424,499") !=
        std::string::npos);
  CHECK(r.output.find("5 timesteps, eps-prediction") != std::string::npos);
  CHECK(fs::exists(out + "/ckpts/stage1_best.pt"));
  CHECK(ReadMetrics(out).size() == 1);
}

TEST_CASE(
    "ddpm_trainer: a BraTS data root without a modality, without cases or "
    "not a folder fails naming the case and the modality",
    "[ddpm][errors][brats]") {
  const std::string root = FreshDir("ddpm_brats_bad") + "/data";
  fs::copy(SmallRoot(), root, fs::copy_options::recursive);
  fs::remove(root + "/SynBraTS_00003/SynBraTS_00003_t1ce.nii.gz");
  auto run = [](const std::string& flags) {
    return RunCommand(Bin("ddpm_trainer") + " " + flags + kSmall, 60);
  };
  CommandResult missing = run("--data_root " + root);
  INFO(missing.output);
  CHECK(missing.exit_code == 2);
  CHECK(LinesWith(missing.output,
                  root + "/SynBraTS_00003: case 'SynBraTS_00003' has no t1ce "
                         "volume (looked for SynBraTS_00003_t1ce.nii.gz, "
                         "SynBraTS_00003_t1ce.nii, SynBraTS_00003-t1c.nii.gz, "
                         "SynBraTS_00003-t1c.nii)")
            .size() == 1);

  const std::string empty = FreshDir("ddpm_brats_empty");
  CommandResult none = run("--data_root " + empty);
  CHECK(none.exit_code == 2);
  CHECK(none.output.find(empty + ": no BraTS case folders (expected "
                                 "<case>/<case>_t1.nii.gz, _t1ce, _t2 and "
                                 "_flair") != std::string::npos);

  CommandResult file = run("--data_root " + root + "/cases.csv");
  CHECK(file.exit_code == 2);
  CHECK(file.output.find("cases.csv: not a directory (--data_root takes a "
                         "folder of BraTS case folders; a CSV list goes to "
                         "--csv_path)") != std::string::npos);

  CommandResult neither = run("");
  CHECK(neither.exit_code == 2);
  CHECK(neither.output.find("--data_root DIR (BraTS case folders) or "
                            "--csv_path FILE is required") !=
        std::string::npos);
}

TEST_CASE(
    "ddpm_trainer: --make_synthetic writes BraTS case folders and a CSV of "
    "them, and --synthetic_layout csv the 4-channel list",
    "[ddpm][brats]") {
  const std::string brats = SmallRoot();
  for (const char* m : {"t1", "t1ce", "t2", "flair", "seg"}) {
    CHECK(fs::exists(brats + "/SynBraTS_00000/SynBraTS_00000_" +
                     std::string(m) + ".nii.gz"));
  }
  // The same cases through the CSV.
  const std::string out = FreshDir("ddpm_csv_of_brats");
  CommandResult csv = RunCommand(Bin("ddpm_trainer") + " --csv_path " + brats +
                                     "/cases.csv --output_dir " + out + kSmall,
                                 120);
  INFO(csv.output);
  CHECK(csv.exit_code == 0);

  const std::string four = FreshDir("ddpm_four_channel");
  REQUIRE(RunCommand(Bin("ddpm_trainer") + " --make_synthetic " + four +
                         " --n 12 --synthetic_size 8 --synthetic_layout csv",
                     60)
              .exit_code == 0);
  CHECK(fs::exists(four + "/volumes/case_0000.nii"));
  CommandResult r =
      RunCommand(Bin("ddpm_trainer") + " --csv_path " + four +
                     "/cases.csv --output_dir " + four + "/out" + kSmall,
                 120);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(ReadMetrics(four + "/out").size() == 1);
}

// One epoch of 8 cases learns nothing measurable: this checks that bf16
// autocast runs with group norm and gives finite numbers (the learning
// under bf16 is ddpm_unit_test's).
TEST_CASE("ddpm_trainer: --amp (bf16) runs an epoch with group norm on the CPU",
          "[ddpm][amp]") {
  const std::string out = FreshDir("ddpm_amp");
  CommandResult r =
      RunCommand(Bin("ddpm_trainer") + " --data_root " + SmallRoot() +
                     " --output_dir " + out + " --amp" + kSmall,
                 300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("group norm, bf16 autocast") != std::string::npos);
  auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 1);
  CHECK(std::isfinite(metrics[0]["train_loss"].get<double>()));
  CHECK(std::isfinite(metrics[0]["val_psnr"].get<double>()));
}

// Trains 2 epochs on SmallRoot() with and without --gradient_checkpointing
// (`launch`: "" alone, or the launcher prefix) and checks both give the same
// losses and validation PSNR per epoch; returns the checkpointed run's log.
std::string CheckSameWithCheckpointing(const std::string& launch,
                                       const std::string& tag) {
  auto run = [&](const std::string& name, const std::string& flags) {
    const std::string out = FreshDir(tag + name);
    CommandResult r = RunCommand(
        launch + Bin("ddpm_trainer") + " --data_root " + SmallRoot() +
            " --output_dir " + out + " --stages 8 --width 4 --epochs 2" + flags,
        300);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return std::make_pair(r.output, ReadMetrics(out));
  };
  auto [plain_log, plain] = run("_plain", "");
  auto [ckpt_log, ckpt] = run("_ckpt", " --gradient_checkpointing");
  REQUIRE(plain.size() == 2);
  REQUIRE(ckpt.size() == 2);
  for (size_t e = 0; e < 2; ++e) {
    CHECK(ckpt[e]["train_loss"].get<double>() ==
          Approx(plain[e]["train_loss"].get<double>()).epsilon(1e-5));
    CHECK(ckpt[e]["val_psnr"].get<double>() ==
          Approx(plain[e]["val_psnr"].get<double>()).epsilon(1e-5));
  }
  return ckpt_log;
}

TEST_CASE(
    "ddpm_trainer: --gradient_checkpointing trains to the same losses and "
    "samples",
    "[ddpm][checkpointing]") {
  const std::string log = CheckSameWithCheckpointing("", "ddpm");
  CHECK(log.find("group norm, fp32, gradient checkpointing") !=
        std::string::npos);
  CommandResult batch =
      RunCommand(Bin("ddpm_trainer") + " --data_root " + SmallRoot() +
                     " --gradient_checkpointing --norm batch" + kSmall,
                 60);
  CHECK(batch.exit_code == 2);
  CHECK(batch.output.find("--gradient_checkpointing needs --norm group") !=
        std::string::npos);
}

}  // namespace
}  // namespace ddprun::examples::testing

#ifdef DDPRUN_LAUNCHER_BIN
namespace ddprun::examples::testing {
namespace {

TEST_CASE(
    "ddpm_trainer: the guide's DDP lines (train_multi_gpu.py --use_ddp, "
    "torchrun --standalone) under ddprun",
    "[ddpm][guide][ddprun]") {
  const std::string cwd = FreshDir("ddpm_guide_ddp");
  // python scripts/train_multi_gpu.py \
  //     --data_root /path/to/brats/data \
  //     --gpus "0,1,2,3" \
  //     --use_ddp \
  //     --use_wandb \
  //     --wandb_project "fast-ddpm-3d-brats-multigpu"
  CommandResult ddp = RunCommand(
      In(cwd) + Launch("") + Bin("ddpm_trainer") + " --data_root " +
          SmallRoot() +
          " --gpus \"0,1,2,3\" --use_ddp --use_wandb --wandb_project "
          "\"fast-ddpm-3d-brats-multigpu\" --output_dir ddp" +
          kSmall,
      300);
  INFO(ddp.output);
  REQUIRE(ddp.exit_code == 0);
  // Notes come from rank 0 only.
  CHECK(LinesWith(ddp.output, "note: --use_ddp: ").size() == 1);
  CHECK(ddp.output.find("effective batch 1 x 2 ranks x 4 accumulation = 8") !=
        std::string::npos);
  auto metrics = ReadMetrics(cwd + "/ddp");
  REQUIRE(metrics.size() == 1);
  CHECK(metrics[0]["effective_batch"] == 8);
  CHECK(metrics[0]["step"] == 2);  // 10 cases: 5 per rank, 4 per step

  // torchrun --standalone --nproc_per_node=4 scripts/train_3d.py \
  //     --data_root /path/to/brats/data \
  //     --distributed \
  //     --use_wandb
  CommandResult run = RunCommand(
      In(cwd) + Launch("") + Bin("ddpm_trainer") + " --data_root " +
          SmallRoot() + " --distributed --use_wandb --output_dir torchrun" +
          kSmall,
      300);
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(LinesWith(run.output, "note: --distributed: ").size() == 1);
  CHECK(ReadMetrics(cwd + "/torchrun").size() == 1);
}

TEST_CASE(
    "ddpm_trainer: the guide's production and 256^3 lines under ddprun, "
    "and its batch-size table",
    "[ddpm][guide][ddprun]") {
  const std::string cwd = FreshDir("ddpm_guide_prod");
  // python scripts/train_multi_gpu.py \
  //     --data_root /datasets/BraTS2023 \
  //     --gpus auto \
  //     --use_ddp \
  //     --use_wandb \
  //     --wandb_project "fast-ddpm-3d-production" \
  //     --doc "production_4gpu_$(date +%Y%m%d)"
  CommandResult prod =
      RunCommand(In(cwd) + Launch("") + Bin("ddpm_trainer") + " --data_root " +
                     SmallRoot() +
                     " --gpus auto --use_ddp --use_wandb --wandb_project "
                     "\"fast-ddpm-3d-production\" --doc "
                     "\"production_4gpu_$(date +%Y%m%d)\"" +
                     kSmall,
                 300);
  INFO(prod.output);
  REQUIRE(prod.exit_code == 0);
  bool found = false;
  for (const auto& e : fs::directory_iterator(cwd + "/runs")) {
    found = found ||
            (e.path().filename().string().rfind("production_4gpu_", 0) == 0 &&
             ReadMetrics(e.path()).size() == 1);
  }
  CHECK(found);

  // The 256^3 line; the guide does not show configs/fast_ddpm_3d_large.yml:
  // its table's 256^3 row (batch 1, accumulation 8) and its advice (gradient
  // checkpointing for large volumes), with 8^3 standing in for 256^3.
  fs::create_directories(cwd + "/configs");
  WriteText(cwd + "/configs/fast_ddpm_3d_large.yml",
            "training:\n"
            "    batch_size: 1\n"
            "    gradient_accumulation_steps: 8\n"
            "    gradient_checkpointing: true\n"
            "stages: [8]\n"
            "width: 4\n"
            "epochs: 1\n");
  // python scripts/train_multi_gpu.py \
  //     --data_root /datasets/BraTS2023 \
  //     --config configs/fast_ddpm_3d_large.yml \
  //     --gpus "0,1,2,3,4,5,6,7" \
  //     --use_ddp \
  //     --use_wandb
  CommandResult large = RunCommand(
      In(cwd) + Launch("") + Bin("ddpm_trainer") + " --data_root " +
          SmallRoot() +
          " --config configs/fast_ddpm_3d_large.yml --gpus "
          "\"0,1,2,3,4,5,6,7\" --use_ddp --use_wandb --output_dir large",
      300);
  INFO(large.output);
  REQUIRE(large.exit_code == 0);
  CHECK(large.output.find("effective batch 1 x 2 ranks x 8 accumulation = "
                          "16") != std::string::npos);
  CHECK(large.output.find("gradient checkpointing") != std::string::npos);
  auto metrics = ReadMetrics(cwd + "/large");
  REQUIRE(metrics.size() == 1);
  CHECK(metrics[0]["step"] == 1);  // 5 cases per rank, 8 per step

  // The table's 2-GPU rows: 64^3 (per-GPU batch 2, accumulation 4 ->
  // effective 16) and 128^3 (1, 4 -> 8); 8^3 stands in for both. Steps
  // show the effective batch is real: 10 training cases, 5 per rank.
  for (const auto& [batch, accum, effective, steps] :
       std::vector<std::tuple<int, int, int, int>>{{2, 4, 16, 1},
                                                   {1, 4, 8, 2}}) {
    const std::string out = cwd + "/table" + std::to_string(effective);
    CommandResult row =
        RunCommand(Launch("") + Bin("ddpm_trainer") + " --data_root " +
                       SmallRoot() + " --batch_size " + std::to_string(batch) +
                       " --gradient_accumulation_steps " +
                       std::to_string(accum) + " --output_dir " + out + kSmall,
                   300);
    INFO(row.output);
    REQUIRE(row.exit_code == 0);
    auto m = ReadMetrics(out);
    REQUIRE(m.size() == 1);
    CHECK(m[0]["effective_batch"] == effective);
    CHECK(m[0]["step"] == steps);
  }
}

TEST_CASE(
    "ddpm_trainer: gradient checkpointing under DDP (2 ranks) gives the "
    "losses of the run without it",
    "[ddpm][ddprun][checkpointing]") {
  CheckSameWithCheckpointing(Launch(""), "ddpm_ddp");
}

}  // namespace
}  // namespace ddprun::examples::testing
#endif  // DDPRUN_LAUNCHER_BIN
