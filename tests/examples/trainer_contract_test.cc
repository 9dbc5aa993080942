// The contract every trainer keeps, as one table: a row per trainer (its
// binary, its small data set and command, the options its --help must show,
// a data file that names a missing file, its kill -9 run) and one check per
// promise, registered for every row:
//   --help         the trainer's options with their defaults, the frame's
//   synthetic      --make_synthetic writes the same data set twice
//   re-run/resume  frame_checks.h's CheckRerunAndResume
//   flags/config   the guides' flags, a misspelt config key, an unknown flag
//   bad data       exit 2, one line naming the list's row and the file, the
//                  same message in TORCHELASTIC_ERROR_FILE, no checkpoint
//   2 ranks        under ddprun; kill -9 of rank 1, the group resumes and
//                  ends where the uninterrupted run ends
// What only one trainer has (its learning bar, its guide's command lines,
// its own bad files) stays in <trainer>_process_test.cc.
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ddprun_catch.h"

#include "tests/examples/frame_checks.h"
#include "tests/examples/small_runs.h"
#include "tests/examples/trainer_run.h"

namespace ddprun::examples::testing {
namespace {

// A data set whose list names a file that does not exist.
struct BadData {
  std::string flags;     // the trainer's data flag(s) pointing at it
  std::string expected;  // the one line's text (after "ConfigError: ")
};

struct ContractRow {
  std::string trainer;  // <trainer>_trainer
  std::string synthetic_args;
  std::vector<std::string> synthetic_files;  // identical in two runs
  std::vector<std::string> help;             // texts --help must show
  std::function<FrameCase()> frame;          // writes its data on first use
  // Writes the bad data set into `dir`.
  std::function<BadData(const std::string& dir)> bad_data;
  FaultCase fault;
  std::function<void(const FaultOutcome&)> after_fault = [](const auto&) {};
};

std::string Head(const std::string& path, int lines) {
  std::ifstream in(path);
  std::string text, line;
  for (int i = 0; i < lines && std::getline(in, line); ++i) text += line + "\n";
  return text;
}

// --- the rows ---------------------------------------------------------------

ContractRow Survival() {
  // Written on first use: --help needs no data.
  auto data = [] {
    return SyntheticData("survival", "--n 128 --seed 3", "survival.csv");
  };
  ContractRow row;
  row.trainer = "survival";
  row.synthetic_args = "--n 6 --synthetic_size 8 --seed 3";
  row.synthetic_files = {"survival.csv", "dataset.csv",
                         "images/subject_0005.nii"};
  row.help = {"--csv_path",
              "--resnet",
              "resnet10",
              "--image_size",
              "32 32 32",
              "--batch_size",
              "TOTAL",
              "--use_smart_cache",
              "--cache_rate",
              "--replace_rate",
              "--amp",
              "--num_workers",
              "--checkpoint_every",
              "--epochs INT:POSITIVE=4",
              "--clip_grad FLOAT:NONNEGATIVE=0",
              "--gradient_checkpointing",
              "--max_grad_norm (= --clip_grad)",
              "--activation_checkpointing (= --gradient_checkpointing)"};
  row.frame = [] { return FrameCase{"survival", SmallSurvival()}; };
  // The header and 8 good rows, then a row naming a missing volume (line 10).
  row.bad_data = [data](const std::string& dir) {
    // The synthetic rows name their volumes relative to the list.
    std::string rows = "image,time,event\n";
    std::istringstream good(Head(data(), 9));
    std::string line;
    std::getline(good, line);  // the header
    while (std::getline(good, line)) rows += DirOf(data()) + "/" + line + "\n";
    WriteText(dir + "/bad.csv", rows + dir + "/missing.nii,2,1\n");
    return BadData{
        "--csv_path " + dir + "/bad.csv",
        dir + "/bad.csv:10: NIfTI file not found: " + dir + "/missing.nii"};
  };
  row.fault = {"survival",
               [data](const std::string& out) {
                 return Bin("survival_trainer") + " --csv_path " + data() +
                        " --output_dir " + out +
                        " --progress_interval 1 --epochs 6 "
                        "--checkpoint_every 5";
               },
               240,
               AtStep(10),
               {{"epoch", 6}, {"step", 72}},
               {"train_loss", "val_cindex"}};
  return row;
}

ContractRow Segmentation() {
  // Written on first use: --help needs no data.
  auto data = [] {
    return SyntheticData("segmentation", "--n 128 --seed 5", "prompts.jsonl");
  };
  ContractRow row;
  row.trainer = "segmentation";
  row.synthetic_args = "--n 6 --image_size 16 --seed 5";
  row.synthetic_files = {"prompts.jsonl", "annotations/lesions.csv",
                         "images_and_masks/lesions/train_images/0001.png"};
  row.help = {"--data_path TEXT",
              "--batch_size INT:POSITIVE=8",
              "Batch PER RANK",
              "--learning_rate FLOAT=0.001",
              "multiplied by the world size",
              "--no_lr_scaling",
              "not scaled by the world size (off by default)",
              "--image_size INT:POSITIVE=64",
              "--width INT:POSITIVE=8",
              "--dice_weight FLOAT=1",
              "--prompt_length INT=12",
              "--val_fraction FLOAT:FLOAT in [0.01 - 0.9]=0.2",
              "--epochs INT:POSITIVE=8",
              "--n INT=192",
              "--output_dir TEXT=runs/segmentation",
              "--checkpoint_every INT:NONNEGATIVE=20",
              "--progress_interval FLOAT=5"};
  row.frame = [] { return FrameCase{"segmentation", SmallSegmentation()}; };
  // Six good lines, then one naming a missing mask (line 7).
  row.bad_data = [data](const std::string& dir) {
    std::string lines = Head(data(), 6);
    // The synthetic lines name their files relative to the data folder.
    std::filesystem::copy(DirOf(data()) + "/images_and_masks",
                          dir + "/images_and_masks",
                          std::filesystem::copy_options::recursive);
    WriteText(dir + "/p.jsonl",
              lines +
                  "{\"image\": \"images_and_masks/lesions/train_images/"
                  "0001.png\", \"mask\": \"nomask.png\", \"prompt\": "
                  "\"x\"}\n");
    return BadData{
        "--data_path " + dir + "/p.jsonl",
        dir + "/p.jsonl:7: image file not found: " + dir + "/nomask.png"};
  };
  row.fault = {"seg",
               [data](const std::string& out) {
                 return Bin("segmentation_trainer") + " --data_path " + data() +
                        " --output_dir " + out +
                        " --progress_interval 1 --epochs 6 "
                        "--checkpoint_every 5";
               },
               300,
               AtStep(10),
               {{"epoch", 6}, {"step", 42}},
               {"train_loss", "val_dice"}};
  return row;
}

ContractRow Vqa() {
  // Written on first use: --help needs no data.
  auto data = [] {
    return SyntheticData("vqa", "--n 320 --seed 7", "vqa.jsonl");
  };
  ContractRow row;
  row.trainer = "vqa";
  row.synthetic_args = "--n 6 --image_size 16 --seed 7";
  row.synthetic_files = {"vqa.jsonl"};
  row.help = {"--data_path TEXT",
              "--batch_size INT:POSITIVE=16",
              "Micro-batch per rank",
              "--gradient_accumulation_steps INT:POSITIVE=1",
              "--zero INT:INT in [0 - 2]=0",
              "--auto_optimize",
              "hardware table for those not given as flags or in --config "
              "(off by default)",
              "--target_batch INT=32",
              "--uncertain_policy TEXT:{ignore,zeros,ones}=ignore",
              "--norm TEXT:{group,batch}=group",
              "--image_size INT=64",
              "--width INT=16",
              "--learning_rate FLOAT=0.002",
              "--label_weight FLOAT=1",
              "--question_length INT=12",
              "--synthetic_format TEXT:{png,jpg}=png",
              "--epochs INT:POSITIVE=6",
              "--n INT=320",
              "--output_dir TEXT=runs/vqa",
              "Mixed precision: bf16 autocast on the CPU, or on the GPU under "
              "NCCL (off by default)"};
  row.frame = [] { return FrameCase{"vqa", SmallVqa()}; };
  // A question about an image that is not there, then four good ones.
  row.bad_data = [data](const std::string& dir) {
    auto line = [](const std::string& image) {
      return "{\"image\": \"" + image +
             "\", \"question\": \"q?\", \"answer\": \"yes\", \"labels\": "
             "[0,0,0,0,0,0,0,0,0,0,0,0,0,0]}\n";
    };
    std::string lines = line("none.png");
    for (int i = 0; i < 4; ++i)
      lines +=
          line(DirOf(data()) + "/images/0000" + std::to_string(i) + ".png");
    WriteText(dir + "/t.jsonl", lines);
    return BadData{
        "--data_path " + dir + "/t.jsonl",
        dir + "/t.jsonl:1: image file not found: " + dir + "/none.png"};
  };
  row.fault = {"vqa",
               [data](const std::string& out) {
                 return Bin("vqa_trainer") + " --data_path " + data() +
                        " --output_dir " + out +
                        " --progress_interval 1 --checkpoint_every 5";
               },
               300,
               AtStep(10),
               {{"step", 48}},
               {"train_loss", "val_mean_auroc"}};
  return row;
}

ContractRow Ddpm() {
  // Written on first use: --help needs no data.
  auto data = [] {
    return SyntheticData("ddpm", "--n 12 --synthetic_size 16 --seed 9",
                         "cases.csv");
  };
  ContractRow row;
  row.trainer = "ddpm";
  row.synthetic_args = "--n 3 --synthetic_size 8 --seed 9";
  row.synthetic_files = {"cases.csv",
                         "SynBraTS_00002/SynBraTS_00002_flair.nii.gz"};
  row.help = {"--csv_path TEXT",
              "--stages INT=12 16",
              "--epochs INT:POSITIVE=3",
              "Training epochs PER STAGE",
              "--v_parameterization",
              "instead of eps (off by default)",
              "--gradient_accumulation_steps INT:POSITIVE=4",
              "--batch_size INT:POSITIVE=1",
              "--timesteps INT:INT in [1 - 1000]=10",
              "--clip_grad FLOAT:NONNEGATIVE=1",
              "--gradient_clip (= --clip_grad)",
              "--target_modality INT:INT in [0 - 3]=3",
              "--norm TEXT:{group,batch}=group",
              "--sync_batchnorm",
              "(SyncBatchNorm) (off by default)",
              "--learning_rate FLOAT=0.002",
              "--width INT=8",
              "--synthetic_size INT=16",
              "--n INT=40",
              "--output_dir TEXT=runs/ddpm"};
  row.frame = [] { return FrameCase{"ddpm", SmallDdpm(), "stage1_best.pt"}; };
  // The header and 8 cases, then a case whose modalities are missing.
  row.bad_data = [data](const std::string& dir) {
    std::string rows = Head(data(), 9);
    // The synthetic rows name their volumes relative to the list.
    std::filesystem::copy(DirOf(data()), dir + "/data",
                          std::filesystem::copy_options::recursive);
    WriteText(dir + "/data/bad.csv",
              rows + "none.nii.gz,none.nii.gz,none.nii.gz,none.nii.gz\n");
    return BadData{"--csv_path " + dir + "/data/bad.csv --stages 8",
                   dir + "/data/bad.csv:10: NIfTI file not found: " + dir +
                       "/data/none.nii.gz"};
  };
  // Two stages of 4 epochs (2 steps each per rank); rank 1 is killed after
  // the checkpoint of step 4. The resumed run ends where the uninterrupted
  // one ends, to 1e-4: the training noise comes back with the checkpoint's
  // generator states and each validation samples from its own (seed,
  // epoch, rank) stream (worker::RngFork), while a resume that lost any
  // state would not (samples after 16 steps still differ by dBs from run to
  // run).
  row.fault = {"ddpm",
               [data](const std::string& out) {
                 return Bin("ddpm_trainer") + " --csv_path " + data() +
                        " --stages 8,12 --epochs 4 --checkpoint_every 2 "
                        "--width 4 --v_parameterization --progress_interval 1 "
                        "--output_dir " +
                        out;
               },
               300,
               AtStep(4),
               {{"step", 16}, {"image_size", 12}},
               {"train_loss", "val_psnr"}};
  row.after_fault = [](const FaultOutcome& o) {
    CHECK(o.clean.output.find(
              "effective batch 1 x 2 ranks x 4 accumulation = 8") !=
          std::string::npos);
  };
  return row;
}

ContractRow Cascade() {
  auto config = [] {
    return SyntheticData("cascade", "--n 24 --seed 3", "config.json");
  };
  auto small = [] {
    return SyntheticData("cascade", "--n 16 --stages 8 --seed 2",
                         "config.json");
  };
  ContractRow row;
  row.trainer = "cascade";
  row.synthetic_args = "--n 3 --stages 8 --seed 2";
  row.synthetic_files = {"patient_0002/patient_0002.nii.gz",
                         "patient_0002/patient_0002_pa_drr.png",
                         "patient_0002/patient_0002_lat_drr.png"};
  row.help = {"--dataset_path TEXT",
              "--stages INT=8 16",
              "--epochs INT:POSITIVE=24",
              "Training epochs PER STAGE",
              "--voxel_dim INT:POSITIVE=32",
              "--vit_depth INT:POSITIVE=2",
              "--num_heads INT:POSITIVE=2",
              "--patch_size INT:POSITIVE=2",
              "--physics_weight FLOAT:NONNEGATIVE=0.3",
              "--img_size INT:POSITIVE=32",
              "--num_views INT:INT in [1 - 2]=2",
              "--batch_size INT:POSITIVE=4",
              "--learning_rate FLOAT=0.003",
              "--num_timesteps INT:INT in [2 - 100000]=1000",
              "--v_parameterization BOOLEAN",
              "--sampling_steps INT:POSITIVE=3",
              "--clip_grad FLOAT:NONNEGATIVE=1",
              "--gradient_clip (= --clip_grad)",
              "--gradient_checkpointing",
              "--hu_window FLOAT=-1000 1000",
              "--n INT=40",
              "--output_dir TEXT=runs/cascade",
              "--checkpoint_dir",
              "--num_epochs_per_stage (= --epochs)",
              "--accumulation_steps (= --gradient_accumulation_steps)",
              "--wandb"};
  row.frame = [] {
    return FrameCase{"cascade", SmallCascade(), "stage1_best.pt"};
  };
  // A patient folder without its lateral view.
  row.bad_data = [small](const std::string& dir) {
    std::filesystem::copy(DirOf(small()), dir + "/data",
                          std::filesystem::copy_options::recursive);
    std::filesystem::remove(dir +
                            "/data/patient_0001/patient_0001_lat_drr.png");
    return BadData{"--dataset_path " + dir + "/data --stages 8",
                   dir + "/data/patient_0001: missing the lateral view"};
  };
  // Two stages of 3 epochs; rank 1 is killed once a checkpoint inside stage
  // 2 exists. The resumed run ends where the uninterrupted one ends, to
  // 1e-4: training noise is a stream per (rank, step) and validation's per
  // patient, so only lost state (model, optimizer, sampler position) could
  // change it.
  row.fault = {"cascade",
               [config](const std::string& out) {
                 return Bin("cascade_trainer") + " --dataset_path " +
                        DirOf(config()) +
                        " --epochs 3 --checkpoint_every 2 --voxel_dim 16 "
                        "--progress_interval 1 --output_dir " +
                        out;
               },
               300,
               [](const std::vector<nlohmann::json>& clean) {
                 REQUIRE(clean.size() == 6);
                 return clean[2]["step"].get<long long>() + 2;
               },
               {{"stage", 2}},
               {"step", "train_loss", "val_psnr"}};
  row.after_fault = [](const FaultOutcome& o) {
    CHECK(o.fault.saved_step > o.clean_metrics[2]["step"].get<long long>());
    CHECK(o.fault.result.output.find("stage 2/2 (stage2)") !=
          std::string::npos);
  };
  return row;
}

// Rows are made on first use (cheap: their data is written when a check
// first needs it).
const ContractRow& Row(const std::string& trainer) {
  static std::map<std::string, ContractRow> rows;
  static const std::map<std::string, std::function<ContractRow()>> make = {
      {"survival", Survival},
      {"segmentation", Segmentation},
      {"vqa", Vqa},
      {"ddpm", Ddpm},
      {"cascade", Cascade}};
  auto it = rows.find(trainer);
  if (it == rows.end()) it = rows.emplace(trainer, make.at(trainer)()).first;
  return it->second;
}

// --- the checks -------------------------------------------------------------

void CheckHelp(const ContractRow& row) {
  CommandResult r = RunCommand(Bin(row.trainer + "_trainer") + " --help", 30);
  REQUIRE(r.exit_code == 0);
  std::vector<std::string> texts = row.help;
  // Every trainer's frame options, with their defaults where they have one.
  for (const char* common :
       {"--config", "--resume_from", "--make_synthetic", "--seed",
        "--num_workers", "--gradient_accumulation_steps", "--debug",
        "one epoch, for a quick check (off by default)"}) {
    texts.push_back(common);
  }
  for (const std::string& text : texts) {
    INFO(text);
    CHECK(r.output.find(text) != std::string::npos);
  }
  // Values show "=default" and flags say they are off unless given; --help
  // itself is not a flag that is "off".
  CHECK(r.output.find("Print this help message and exit (off") ==
        std::string::npos);
}

void CheckSynthetic(const ContractRow& row) {
  const std::string a = FreshDir(row.trainer + "_synthetic_a");
  const std::string b = FreshDir(row.trainer + "_synthetic_b");
  for (const std::string& dir : {a, b}) {
    CommandResult r =
        RunCommand(Bin(row.trainer + "_trainer") + " --make_synthetic " + dir +
                       " " + row.synthetic_args,
                   120);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find(dir) != std::string::npos);  // says where it wrote
  }
  // The same seed writes the same data: a test, a bug report or a benchmark
  // can name its data set by its command line.
  for (const std::string& file : row.synthetic_files) {
    INFO(file);
    REQUIRE(std::filesystem::exists(a + "/" + file));
    std::ifstream fa(a + "/" + file, std::ios::binary);
    std::ifstream fb(b + "/" + file, std::ios::binary);
    const std::string da((std::istreambuf_iterator<char>(fa)), {});
    const std::string db((std::istreambuf_iterator<char>(fb)), {});
    CHECK(!da.empty());
    CHECK(da == db);
  }
}

void CheckBadData(const ContractRow& row) {
  const std::string dir = FreshDir(row.trainer + "_bad_data");
  const BadData bad = row.bad_data(dir);
  const std::string error_file = dir + "/error.json";
  CommandResult r =
      RunCommand("TORCHELASTIC_ERROR_FILE=" + error_file + " " +
                     Bin(row.trainer + "_trainer") + " " + bad.flags +
                     " --epochs 1 --output_dir " + dir + "/out",
                 120);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(LinesWith(r.output, bad.expected).size() == 1);
  // The launcher's failure summary comes from the error file.
  std::ifstream in(error_file);
  REQUIRE(in.good());
  const nlohmann::json error = nlohmann::json::parse(in);
  CHECK(error["message"]["message"].get<std::string>().find(bad.expected) !=
        std::string::npos);
  CHECK(NewestCheckpointStep(dir + "/out/checkpoints") == -1);
}

void CheckFault(const ContractRow& row) {
  row.after_fault(CheckKillRank1AndResume(row.fault));
}

// One set of test cases per row (ctest runs them apart, two at a time).
#define DDPRUN_TRAINER_CONTRACT(trainer)                                   \
  TEST_CASE(trainer                                                        \
            "_trainer contract: --help documents every option with "       \
            "its default",                                                 \
            "[contract][" trainer "]") {                                   \
    CheckHelp(Row(trainer));                                               \
  }                                                                        \
  TEST_CASE(trainer                                                        \
            "_trainer contract: --make_synthetic writes the same "         \
            "data set twice",                                              \
            "[contract][" trainer "]") {                                   \
    CheckSynthetic(Row(trainer));                                          \
  }                                                                        \
  TEST_CASE(trainer                                                        \
            "_trainer contract: a re-run of a finished run is a "          \
            "no-op and --resume_from takes the final and the best "        \
            "checkpoint",                                                  \
            "[contract][" trainer "]") {                                   \
    CheckRerunAndResume(Row(trainer).frame());                             \
  }                                                                        \
  TEST_CASE(trainer                                                        \
            "_trainer contract: the guides' flags and config "             \
            "sections work and a misspelt config key or flag is an error", \
            "[contract][" trainer "]") {                                   \
    CheckGuideFlags(Row(trainer).frame());                                 \
  }                                                                        \
  TEST_CASE(trainer                                                        \
            "_trainer contract: a data file naming a missing file "        \
            "stops the run with one line and the error file",              \
            "[contract][" trainer "]") {                                   \
    CheckBadData(Row(trainer));                                            \
  }                                                                        \
  TEST_CASE(trainer                                                        \
            "_trainer contract: 2 ranks under ddprun survive kill "        \
            "-9 of rank 1 and resume to the uninterrupted result",         \
            "[contract][" trainer "][ddprun][fault]") {                    \
    CheckFault(Row(trainer));                                              \
  }

DDPRUN_TRAINER_CONTRACT("survival")
DDPRUN_TRAINER_CONTRACT("segmentation")
DDPRUN_TRAINER_CONTRACT("vqa")
DDPRUN_TRAINER_CONTRACT("ddpm")
DDPRUN_TRAINER_CONTRACT("cascade")

}  // namespace
}  // namespace ddprun::examples::testing
