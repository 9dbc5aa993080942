// What only ddpm_trainer does, run as a user would: synthetic 4-modality
// NIfTI, a debug run that writes sampled volumes and PSNR/SSIM, a short run
// that beats a constant guess, bad volumes, options, batch norm
// synchronised over ranks. What every trainer promises (--help, re-run and
// resume, kill -9) is trainer_contract_test.cc.
#include <cmath>
#include <filesystem>
#include <string>

#include "ddprun_catch.h"

#include "tests/examples/trainer_run.h"

namespace ddprun::examples::testing {
namespace {

std::string SyntheticCsv() {
  return SyntheticData("ddpm", "--n 12 --synthetic_size 16 --seed 9",
                       "cases.csv");
}

TEST_CASE(
    "ddpm_trainer: a debug run samples volumes on the short schedule and "
    "scores them",
    "[ddpm][train]") {
  const std::string out = FreshDir("ddpm_debug");
  CommandResult r = RunCommand(
      Bin("ddpm_trainer") + " --csv_path " + SyntheticCsv() + " --output_dir " +
          out + " --debug --stages 8 --width 4 --v_parameterization",
      240);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find(
            "effective batch 1 x 1 ranks x 4 accumulation = 4, 10 timesteps, "
            "v-prediction") != std::string::npos);
  auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 1);
  CHECK(metrics[0]["step"] == 2);  // 8 cases / (1 x 4 accumulation)
  CHECK(metrics[0]["val_cases"] == 2);
  // Two steps learn nothing measurable (the learning bars are the 12^3 and
  // 8^3 tests' below): the validation ran and gave numbers.
  CHECK(std::isfinite(metrics[0]["val_psnr"].get<double>()));
  CHECK(std::isfinite(metrics[0]["val_psnr_constant"].get<double>()));
  CHECK(metrics[0].contains("val_ssim"));
  CHECK(std::filesystem::exists(out + "/samples/epoch1_size8.nii"));
}

// Trains on 40 synthetic cases of `size`^3 (seed 1) with v-prediction,
// a total batch of 2 and no accumulation for `epochs` epochs, alone or
// under `launch` (2 ranks: batch 1 each), with `extra` flags; returns the
// last metrics line.
nlohmann::json LearnRun(int size, int epochs, const std::string& launch = "",
                        const std::string& extra = "") {
  const std::string edge = std::to_string(size);
  const std::string csv = SyntheticData(
      "ddpm", "--n 40 --synthetic_size " + edge + " --seed 1", "cases.csv");
  const std::string out =
      FreshDir("ddpm_learn" + edge + (launch.empty() ? "" : "_2ranks") +
               (extra.empty() ? "" : "_extra"));
  CommandResult r =
      RunCommand(launch + Bin("ddpm_trainer") + " --csv_path " + csv +
                     " --output_dir " + out + " --v_parameterization --stages " +
                     edge + " --epochs " + std::to_string(epochs) +
                     " --gradient_accumulation_steps 1 --batch_size " +
                     (launch.empty() ? "2" : "1") + extra,
                 300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto metrics = ReadMetrics(out);
  REQUIRE(!metrics.empty());
  return metrics.back();
}

// CI-sized learning test: 12^3 volumes, 128 optimizer steps (batch 2),
// 8 validation cases sampled on the 10-step schedule per epoch; ~13 s with
// one thread (20 s on the busy shared box). The margin is on SSIM: the
// constant guess scores ~0.01, samples of a model after <= 32 steps
// 0.04-0.16, this run 0.40 (0.40-0.56 over seeds 0-4). PSNR beats the
// constant guess only for most seeds at this size (seed 0: 19.1 vs 16.2 dB,
// seed 3: 16.04 vs 16.10), so it is asserted on 8^3 volumes below.
TEST_CASE(
    "ddpm_trainer: 128 steps on 12^3 volumes beat a constant guess (SSIM + "
    "0.3)",
    "[ddpm][train]") {
  const nlohmann::json last = LearnRun(12, 8);
  INFO(last.dump());
  CHECK(last["step"] == 128);
  CHECK(last["val_cases"] == 8);
  CHECK(last["val_ssim"].get<double>() >
        last["val_ssim_constant"].get<double>() + 0.3);
}

#ifdef DDPRUN_LAUNCHER_BIN
// The same learning at 2 ranks, one volume each: the step where LibTorch's
// CPU conv3d takes its slow batch-of-one kernel unless worker::Conv3d
// reroutes it (a 20x slower step; the reroute must not change the model).
TEST_CASE(
    "ddpm_trainer: 2 ranks at batch 1 learn like 1 rank at batch 2 (SSIM + "
    "0.3)",
    "[ddpm][train][scaling]") {
  const nlohmann::json last = LearnRun(12, 8, Launch(""));
  INFO(last.dump());
  CHECK(last["step"] == 128);
  CHECK(last["world_size"] == 2);
  CHECK(last["val_cases"] == 8);
  CHECK(last["val_ssim"].get<double>() >
        last["val_ssim_constant"].get<double>() + 0.3);
}
#endif

// Fast PSNR margin: 8^3 volumes, 256 optimizer steps (batch 2), 8
// validation cases sampled per epoch; ~6 s with one thread. Samples scored
// 20.5-21.5 dB against 15.9-17.0 dB for the constant guess over seeds 0-4
// (margins 4.3-5.0 dB); the 12^3 runs above are too short for a PSNR
// margin that holds for every seed.
TEST_CASE(
    "ddpm_trainer: 256 steps on 8^3 volumes beat a constant guess (PSNR + "
    "2 dB)",
    "[ddpm][train]") {
  const nlohmann::json last = LearnRun(8, 16);
  INFO(last.dump());
  CHECK(last["step"] == 256);
  CHECK(last["val_cases"] == 8);
  CHECK(last["val_psnr"].get<double>() >
        last["val_psnr_constant"].get<double>() + 2.0);
}

// A model that never learns (--learning_rate 0: the same runs, untrained)
// fails both bars above: its samples are the sampler's noise through an
// untrained network.
TEST_CASE("ddpm_trainer: a run with --learning_rate 0 fails the learning bars",
          "[ddpm][train]") {
  const nlohmann::json ssim_run = LearnRun(12, 8, "", " --learning_rate 0");
  INFO(ssim_run.dump());
  CHECK(ssim_run["step"] == 128);
  CHECK_FALSE(ssim_run["val_ssim"].get<double>() >
              ssim_run["val_ssim_constant"].get<double>() + 0.3);
  const nlohmann::json psnr_run = LearnRun(8, 16, "", " --learning_rate 0");
  INFO(psnr_run.dump());
  CHECK(psnr_run["step"] == 256);
  CHECK_FALSE(psnr_run["val_psnr"].get<double>() >
              psnr_run["val_psnr_constant"].get<double>() + 2.0);
}

TEST_CASE("ddpm_trainer: --sync_batchnorm needs --norm batch",
          "[ddpm][errors][norm]") {
  CommandResult r = RunCommand(Bin("ddpm_trainer") + " --csv_path " +
                                   SyntheticCsv() + " --sync_batchnorm",
                               60);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--sync_batchnorm needs --norm batch") !=
        std::string::npos);
}

TEST_CASE("ddpm_trainer: a volume without 4 modalities fails naming the file",
          "[ddpm][errors]") {
  const std::string dir = FreshDir("ddpm_bad");
  // A survival volume has one channel.
  CommandResult make =
      RunCommand(Bin("survival_trainer") + " --make_synthetic " + dir +
                     " --n 1 --synthetic_size 8",
                 60);
  REQUIRE(make.exit_code == 0);
  WriteText(dir + "/cases.csv",
            "image\nimages/subject_0000.nii\nimages/subject_0000.nii\n");
  CommandResult r = RunCommand(
      Bin("ddpm_trainer") + " --csv_path " + dir +
          "/cases.csv --debug --stages 8 --output_dir " + dir + "/out",
      60);
  CHECK(r.exit_code == 2);
  CHECK(
      r.output.find(
          dir + "/images/subject_0000.nii: wrong shape 1x8x8x8 (expected 4") !=
      std::string::npos);
  CHECK(r.output.find(dir + "/cases.csv:") != std::string::npos);  // the row
}

}  // namespace
}  // namespace ddprun::examples::testing

#ifdef DDPRUN_LAUNCHER_BIN
namespace ddprun::examples::testing {
namespace {

// With --sync_batchnorm the trainer turns off DDP's per-step broadcast of
// rank 0's buffers, so equal running statistics on both ranks can only come
// from SyncBatchNorm's all-reduced batch statistics (vqa_process_test shows
// that unsynchronised batch norm without a broadcast diverges).
TEST_CASE(
    "ddpm_trainer: --norm batch --sync_batchnorm trains 2 ranks with "
    "identical running stats",
    "[ddpm][ddprun][norm]") {
  const std::string out = FreshDir("ddpm_syncbn");
  CommandResult r = RunCommand(
      Launch("") + Bin("ddpm_trainer") + " --csv_path " + SyntheticCsv() +
          " --output_dir " + out +
          " --debug --stages 8 --width 4 --norm batch --sync_batchnorm "
          "--v_parameterization",
      120);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("v-prediction, sync_batch norm") != std::string::npos);
  auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 1);
  CHECK(metrics[0]["step"] == 1);  // 8 cases / (1 x 2 ranks x 4 accumulation)
  CHECK(metrics[0]["norm_stats_rank_spread"] == 0.0);
  CHECK(std::isfinite(metrics[0]["train_loss"].get<double>()));
  CHECK(std::isfinite(metrics[0]["val_psnr"].get<double>()));
}

}  // namespace
}  // namespace ddprun::examples::testing
#endif  // DDPRUN_LAUNCHER_BIN
