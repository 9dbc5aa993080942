// vqa_trainer as mimic-cxr-vqa.md describes its script: the guide's command
// lines and config files as written (paths substituted), its data layout
// (MIMIC-CXR-JPG images + MIMIC-Ext-CXR-QBA questions + CheXpert CSV), its
// precision and memory options (fp16, DeepSpeed ZeRO-2 with CPU offload)
// and the per-label AUROC chart.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "ddprun_catch.h"

#include "tests/examples/trainer_run.h"

namespace ddprun::examples::testing {
namespace {

namespace fs = std::filesystem;

// The guide's data layout, written by --make_synthetic (small: the guide's
// lines run as written, 20 epochs included).
std::string MimicRoot(int n = 40) {
  const std::string marker =
      SyntheticData("vqa",
                    "--synthetic_layout mimic --n " + std::to_string(n) +
                        " --image_size 32 --seed 7",
                    "mimic-cxr-2.0.0-chexpert.csv");
  return fs::path(marker).parent_path().string();
}

std::string Vqa() { return Bin("vqa_trainer"); }

// configs/default_config.yaml: the guide names it without showing it; this
// is its training: section as the guide's L4 example and the data: keys of
// the guide's script (train_mimic_cxr.py's config), pointing at `root`.
std::string DefaultConfig(const std::string& dir, const std::string& root) {
  const std::string path = dir + "/default_config.yaml";
  WriteText(path,
            "training:\n"
            "  batch_size_per_gpu: 16\n"
            "  gradient_accumulation_steps: 4\n"
            "  num_epochs: 2\n"
            "  fp16: true\n"
            "  gradient_checkpointing: true\n"
            "  dataloader_num_workers: 12  # 3 per GPU\n"
            "\n"
            "data:\n"
            "  mimic_cxr_jpg_path: \"" +
                root +
                "\"\n"
                "  mimic_ext_cxr_qba_path: \"" +
                root + "\"\n");
  return path;
}

// configs/deepspeed_config.json exactly as the guide shows it.
std::string GuideDeepSpeedJson(const std::string& dir) {
  const std::string path = dir + "/deepspeed_config.json";
  WriteText(path,
            "{\n"
            "  \"zero_optimization\": {\n"
            "    \"stage\": 2,\n"
            "    \"offload_optimizer\": {\n"
            "      \"device\": \"cpu\",\n"
            "      \"pin_memory\": true\n"
            "    }\n"
            "  },\n"
            "  \"fp16\": {\n"
            "    \"enabled\": true\n"
            "  },\n"
            "  \"activation_checkpointing\": {\n"
            "    \"partition_activations\": true\n"
            "  }\n"
            "}\n");
  return path;
}

bool Has(const std::string& output, const std::string& text) {
  return output.find(text) != std::string::npos;
}

TEST_CASE(
    "vqa_trainer: --make_synthetic --synthetic_layout mimic writes the "
    "guide's MIMIC-CXR tree, which trains and beats chance",
    "[vqa][guide][data]") {
  const std::string root = MimicRoot(320);
  // MIMIC-CXR-JPG: files/pXX/pSUBJECT/sSTUDY/<dicom_id>.jpg; two studies per
  // patient; MIMIC-Ext-CXR-QBA: qa/pXX/pSUBJECT/sSTUDY.qa.json.
  const std::string study = root + "/files/p10/p10000000/s50000001";
  REQUIRE(fs::is_directory(study));
  int images = 0;
  for (const auto& e : fs::directory_iterator(study)) {
    CHECK(e.path().extension() == ".jpg");
    ++images;
  }
  CHECK(images == 1);
  CHECK(fs::exists(root + "/qa/p10/p10000000/s50000001.qa.json"));
  CHECK(fs::exists(root + "/qa/p10/p10000159/s50000319.qa.json"));
  std::ifstream csv(root + "/mimic-cxr-2.0.0-chexpert.csv");
  std::string header;
  std::getline(csv, header);
  CHECK(header.rfind("subject_id,study_id,Atelectasis,Cardiomegaly,", 0) == 0);

  const std::string out = FreshDir("vqa_mimic_root");
  CommandResult r =
      RunCommand(Vqa() + " --data_path " + root + " --output_dir " + out, 300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // 320 studies, one question each and a second one for every fourth.
  CHECK(Has(r.output,
            "data: MIMIC-CXR root " + root + ": 320 studies, 400 questions"));
  auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 6);
  CHECK(metrics.back()["val_questions"] == 80);
  CHECK(metrics.back()["val_mean_auroc"].get<double>() > 0.7);
  CHECK(metrics.back()["val_answer_accuracy"].get<double>() > 0.45);
}

TEST_CASE(
    "vqa_trainer: a data root without the guide's layout is one error naming "
    "what is missing",
    "[vqa][guide][data][errors]") {
  const std::string root = MimicRoot();
  const std::string dir = FreshDir("vqa_mimic_bad");
  auto run = [&](const std::string& data, const std::string& extra = "") {
    return RunCommand(Vqa() + " --data_path " + data + extra +
                          " --debug --output_dir " + dir + "/out",
                      60);
  };
  CommandResult none = run(dir + "/nothing");
  CHECK(none.exit_code == 2);
  CHECK(Has(none.output, dir + "/nothing: no such file or directory"));

  // An empty directory: no qa/ folder.
  fs::create_directories(dir + "/empty");
  CommandResult empty = run(dir + "/empty");
  CHECK(empty.exit_code == 2);
  CHECK(Has(empty.output,
            dir + "/empty: no qa/ folder of MIMIC-Ext-CXR-QBA question files "
                  "(qa/p10/p10000032/s50414267.qa.json)"));

  // Questions but no images.
  fs::create_directories(dir + "/qa_only");
  fs::copy(root + "/qa", dir + "/qa_only/qa", fs::copy_options::recursive);
  CommandResult no_files = run(dir + "/qa_only");
  CHECK(no_files.exit_code == 2);
  CHECK(Has(no_files.output, dir + "/qa_only: no files/ folder of "
                                   "MIMIC-CXR-JPG images"));

  // Questions and images, no CheXpert labels.
  fs::copy(root + "/files", dir + "/qa_only/files",
           fs::copy_options::recursive);
  CommandResult no_labels = run(dir + "/qa_only");
  CHECK(no_labels.exit_code == 2);
  CHECK(Has(no_labels.output,
            dir + "/qa_only: no mimic-cxr-2.0.0-chexpert.csv (or .csv.gz)"));

  // A label value CheXpert does not have names the CSV row and column.
  std::ifstream in(root + "/mimic-cxr-2.0.0-chexpert.csv");
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  WriteText(dir + "/qa_only/mimic-cxr-2.0.0-chexpert.csv",
            header + "\n" + row.substr(0, row.rfind(',')) + ",2.0\n");
  CommandResult bad_label = run(dir + "/qa_only");
  CHECK(bad_label.exit_code == 2);
  CHECK(Has(bad_label.output,
            "mimic-cxr-2.0.0-chexpert.csv:2: column 'Support Devices': '2.0' "
            "must be 1.0, 0.0, -1.0 or empty"));

  // With labels for one study only: the others train with masked labels;
  // a study without its image folder is left out and counted.
  WriteText(dir + "/qa_only/mimic-cxr-2.0.0-chexpert.csv",
            header + "\n" + row + "\n");
  fs::remove_all(dir + "/qa_only/files/p10/p10000000/s50000001");
  CommandResult partial = run(dir + "/qa_only");
  INFO(partial.output);
  CHECK(partial.exit_code == 0);
  CHECK(Has(partial.output,
            ": 39 studies, 49 questions, 1 studies left out without an "
            "image (the first: " +
                dir +
                "/qa_only/files/p10/p10000000/s50000001/), 38 without "
                "a CheXpert row (labels masked)"));

  // A question file that is not the QBA shape names the file.
  const std::string qa = dir + "/qa_only/qa/p10/p10000000/s50000000.qa.json";
  WriteText(qa, "{\"questions\": [{\"question\": \"q?\", \"answers\": []}]}");
  CommandResult bad_qa = run(dir + "/qa_only");
  CHECK(bad_qa.exit_code == 2);
  CHECK(Has(bad_qa.output,
            qa + ": question 1: 'answers' must be a non-empty list"));
  WriteText(qa, "not json");
  CommandResult not_json = run(dir + "/qa_only");
  CHECK(not_json.exit_code == 2);
  CHECK(Has(not_json.output, qa + ": not valid JSON"));

  // The questions apart from the images (--mimic_qa_path): its qa/ is
  // needed there.
  CommandResult apart = run(root, " --mimic_qa_path " + dir + "/empty");
  CHECK(apart.exit_code == 2);
  CHECK(Has(apart.output, dir + "/empty: no qa/ folder"));
}

// The guide's "Option 2: Direct Python Launch", first line, and its
// "Command Reference" python line (epochs 20 as written: the data set is
// small), against configs/default_config.yaml.
TEST_CASE("vqa_trainer: the guide's python command lines with its config",
          "[vqa][guide]") {
  const std::string root = MimicRoot();
  const std::string dir = FreshDir("vqa_guide_python");
  const std::string config = DefaultConfig(dir, root);

  // python train_mimic_cxr.py --config configs/default_config.yaml
  CommandResult plain = RunCommand(
      Vqa() + " --config " + config + " --output_dir " + dir + "/plain", 300);
  INFO(plain.output);
  REQUIRE(plain.exit_code == 0);
  CHECK(Has(plain.output, "note: " + config +
                              ":6: training.gradient_checkpointing: no "
                              "activation checkpointing in vqa"));
  // fp16: true on a CPU whose LibTorch 1.13 autocast has no float16: bf16
  // with a note (LibTorch >= 2.2: fp16 with loss scaling).
  CHECK((Has(plain.output, "bf16 autocast") ||
         Has(plain.output, "fp16 autocast with dynamic loss scaling")));
  CHECK(Has(plain.output,
            "batch 16 x accumulation 4 x world 1 = effective "
            "64, zero 0"));
  CHECK(Has(plain.output, "data: MIMIC-CXR root " + root + ": 40 studies"));
  auto metrics = ReadMetrics(dir + "/plain");
  REQUIRE(metrics.size() == 2);  // num_epochs: 2
  CHECK(std::isfinite(metrics.back()["train_loss"].get<double>()));

  // python train_mimic_cxr.py --config configs/default_config.yaml
  //   --auto_optimize --use_deepspeed --batch_size 16 --epochs 20
  CommandResult reference =
      RunCommand(Vqa() + " --config " + config +
                     " --auto_optimize --use_deepspeed --batch_size 16 "
                     "--epochs 20 --output_dir " +
                     dir + "/reference",
                 300);
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);
  // Explicit --batch_size and the config's accumulation beat the table.
  CHECK(Has(reference.output,
            "given, so kept: --batch_size "
            "--gradient_accumulation_steps --amp"));
  CHECK(Has(reference.output, "note: --use_deepspeed: no DeepSpeed library"));
  CHECK(Has(reference.output,
            "deepspeed: the guide's DeepSpeed config on our sharded Adam: "
            "ZeRO-2 (--zero 2); no offload on the CPU (nothing to gain "
            "there); given, so kept: --mixed_precision"));
  CHECK(Has(reference.output, "= effective 64, zero 2,"));
  CHECK(ReadMetrics(dir + "/reference").size() == 20);

  // python train_mimic_cxr.py --no_auto_optimize
  CommandResult no_auto =
      RunCommand(Vqa() + " --no_auto_optimize --data_path " + root +
                     " --debug --output_dir " + dir + "/no_auto",
                 120);
  INFO(no_auto.output);
  CHECK(no_auto.exit_code == 0);
  CHECK_FALSE(Has(no_auto.output, "auto_optimize: "));
}

// The guide's "Optimal configuration" YAML for 4x L4 (as written: its
// deepspeed: section included) and configs/deepspeed_config.json.
TEST_CASE(
    "vqa_trainer: the guide's L4 YAML and DeepSpeed JSON map to ZeRO-2, CPU "
    "offload and fp16",
    "[vqa][guide]") {
  const std::string root = MimicRoot();
  const std::string dir = FreshDir("vqa_guide_configs");
  const std::string l4 = dir + "/l4.yaml";
  WriteText(l4,
            "training:\n"
            "  batch_size_per_gpu: 16\n"
            "  gradient_accumulation_steps: 4\n"
            "  # Effective batch: 16 * 4 * 4 = 256\n"
            "  fp16: true\n"
            "  gradient_checkpointing: true\n"
            "  dataloader_num_workers: 12  # 3 per GPU\n"
            "\n"
            "deepspeed:\n"
            "  enabled: true\n"
            "  stage: 2\n");
  const std::string ds = GuideDeepSpeedJson(dir);
  const std::string data = " --data_path " + root + " --epochs 1";

  CommandResult yaml = RunCommand(
      Vqa() + " --config " + l4 + data + " --output_dir " + dir + "/l4", 240);
  INFO(yaml.output);
  REQUIRE(yaml.exit_code == 0);
  CHECK(Has(yaml.output, "note: " + l4 +
                             ":10: deepspeed.enabled: no "
                             "DeepSpeed library"));
  CHECK(Has(yaml.output, "= effective 64, zero 2,"));  // deepspeed.stage
  CHECK(Has(yaml.output,
            "deepspeed: the guide's DeepSpeed config on our "
            "sharded Adam: nothing left to set; no offload on "
            "the CPU (nothing to gain there); given, so kept: "
            "--zero --mixed_precision"));

  CommandResult json =
      RunCommand(Vqa() + " --config " + l4 + " --deepspeed_config " + ds +
                     data + " --output_dir " + dir + "/ds",
                 240);
  INFO(json.output);
  REQUIRE(json.exit_code == 0);
  // stage 2 and fp16 agree with the YAML; the offload comes from the JSON.
  CHECK(Has(json.output, "= effective 64, zero 2 + CPU offload,"));
  CHECK(Has(
      json.output,
      "note: " + ds + ":6: zero_optimization.offload_optimizer.pin_memory: "));
  CHECK(Has(json.output,
            "note: " + ds +
                ":13: activation_checkpointing.partition_activations: no "
                "activation checkpointing in vqa"));
  CHECK(Has(json.output, "0.00 MB per rank beside the parameters"));
  CHECK(ReadMetrics(dir + "/ds").size() == 1);

  // A DeepSpeed JSON that disagrees with the YAML is one error naming both.
  const std::string stage1 = dir + "/stage1.json";
  WriteText(stage1, "{\"zero_optimization\": {\"stage\": 1}}\n");
  CommandResult clash =
      RunCommand(Vqa() + " --config " + l4 + " --deepspeed_config " + stage1 +
                     data + " --output_dir " + dir + "/clash",
                 60);
  CHECK(clash.exit_code == 2);
  CHECK(Has(clash.output, stage1 +
                              ":1: key 'zero_optimization.stage' sets --zero "
                              "to 1, but " +
                              l4 +
                              " set it to 2 ('deepspeed.stage' at line "
                              "11); make them agree"));
  // ZeRO-3 does not exist here.
  const std::string stage3 = dir + "/stage3.json";
  WriteText(stage3, "{\"zero_optimization\": {\"stage\": 3}}\n");
  CommandResult three = RunCommand(Vqa() + " --deepspeed_config " + stage3 +
                                       data + " --output_dir " + dir + "/z3",
                                   60);
  CHECK(three.exit_code == 2);
  CHECK(Has(three.output, stage3 + ":1: key 'zero_optimization.stage': "));
  // Offload needs a sharded optimizer.
  CommandResult offload0 = RunCommand(
      Vqa() + data + " --offload_optimizer cpu --output_dir " + dir + "/o0",
      60);
  CHECK(offload0.exit_code == 2);
  CHECK(Has(offload0.output, "--offload_optimizer cpu needs --zero 1 or 2"));
}

// `--deepspeed ds.json` (HF Trainer's spelling) with a DeepSpeed JSON of
// the usual shape beyond the guide's (micro-batch,
// accumulation, bf16, optimizer, ZeRO-1 with offload), with the guide's
// --use_wandb on the command line: every key lands on its flag, the rest is
// named in one note line.
TEST_CASE(
    "vqa_trainer: --deepspeed FILE, a DeepSpeed JSON's micro-batch, "
    "accumulation, bf16 and stage set the run, --use_wandb is one note",
    "[vqa][guide]") {
  const std::string root = MimicRoot();
  const std::string dir = FreshDir("vqa_guide_ds_keys");
  const std::string ds = dir + "/ds.json";
  WriteText(ds,
            "{\n"
            "  \"train_micro_batch_size_per_gpu\": 8,\n"
            "  \"gradient_accumulation_steps\": 2,\n"
            "  \"bf16\": {\"enabled\": true},\n"
            "  \"optimizer\": {\"type\": \"AdamW\", \"params\": "
            "{\"lr\": 0.001}},\n"
            "  \"zero_optimization\": {\"stage\": 1,\n"
            "    \"offload_optimizer\": {\"device\": \"cpu\"}},\n"
            "  \"steps_per_print\": 10\n"
            "}\n");
  CommandResult r =
      RunCommand(Vqa() + " --data_path " + root + " --deepspeed " + ds +
                     " --use_wandb --epochs 1 --output_dir " + dir + "/out",
                 240);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(Has(r.output,
            "batch 8 x accumulation 2 x world 1 = effective 16, zero 1 + "
            "CPU offload,"));
  CHECK(Has(r.output, "bf16 autocast"));
  CHECK(Has(r.output, "0.00 MB per rank beside the parameters"));
  // HF Trainer's --deepspeed FILE: the JSON is read (and one note).
  CHECK(LinesWith(r.output, "note: --deepspeed: no DeepSpeed library").size() ==
        1);
  CHECK(LinesWith(r.output, "note: --use_wandb: no Weights & Biases here")
            .size() == 1);
  const auto unknown = LinesWith(
      r.output, "DeepSpeed settings with no counterpart here, ignored");
  REQUIRE(unknown.size() == 1);
  CHECK(Has(unknown[0], "optimizer.type"));
  CHECK(Has(unknown[0], "steps_per_print"));
  CHECK_FALSE(Has(unknown[0], "optimizer.params.lr"));
  CHECK(ReadMetrics(dir + "/out").size() == 1);
}

// The launch script's full line, its flags given to the trainer.
TEST_CASE("vqa_trainer: the launch script's --num_gpus 4 --deepspeed --debug",
          "[vqa][guide]") {
  const std::string root = MimicRoot();
  const std::string dir = FreshDir("vqa_guide_launch_script");
  const std::string config = DefaultConfig(dir, root);
  CommandResult r = RunCommand(Vqa() + " --config " + config +
                                   " --num_gpus 4 --deepspeed --debug "
                                   "--output_dir " +
                                   dir + "/out",
                               120);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(LinesWith(r.output, "note: --num_gpus 4: ").size() == 1);
  CHECK(LinesWith(r.output, "note: --deepspeed: no DeepSpeed library").size() ==
        1);
  CHECK(Has(r.output, ", zero 2,"));
  CHECK(ReadMetrics(dir + "/out").size() == 1);
}

// What people look at: the AUROC chart of every validation, in the event
// file and as a PNG, next to the scalars.
TEST_CASE("vqa_trainer: a per-label AUROC bar chart every validation epoch",
          "[vqa][guide][outputs]") {
  const std::string root = MimicRoot();
  const std::string out = FreshDir("vqa_auroc_chart");
  CommandResult r = RunCommand(
      Vqa() + " --data_path " + root + " --epochs 2 --output_dir " + out, 240);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 2);
  // The per-label numbers behind the chart, by CheXpert name (null: one
  // class only in the validation set).
  const auto& labels = metrics.back()["label_auroc"];
  REQUIRE(labels.size() == 14);
  CHECK(labels.contains("Atelectasis"));
  CHECK(labels.contains("Support Devices"));

  std::vector<std::string> events = EventFiles(out);
  REQUIRE(events.size() == 1);
  nlohmann::json tb = ReadEvents(events[0]);
  std::map<std::string, std::vector<int64_t>> steps;
  std::set<std::pair<int64_t, int64_t>> sizes;
  for (const auto& record : tb["records"]) {
    for (const auto& v : record["values"]) {
      steps[v["tag"].get<std::string>()].push_back(record["step"]);
      if (v.contains("image")) {
        sizes.insert({v["image"]["png_width"].get<int64_t>(),
                      v["image"]["png_height"].get<int64_t>()});
      }
    }
  }
  const int64_t last = metrics.back()["step"];
  const int64_t first = metrics.front()["step"];
  CHECK(steps["val/label_auroc"] == std::vector<int64_t>{first, last});
  CHECK(steps["val/mean_auroc"] == std::vector<int64_t>{first, last});
  CHECK(steps["val/answer_accuracy"] == std::vector<int64_t>{first, last});
  // 900 wide, 48 + 26 per label + 56 high (outputs::BarChart).
  CHECK(sizes == std::set<std::pair<int64_t, int64_t>>{{900, 468}});
  char name[64];
  std::snprintf(name, sizeof(name), "/images/val_label_auroc_step%08lld.png",
                static_cast<long long>(last));
  CHECK(PngSize(out + name) == std::make_pair(900, 468));
}

// The bar of the 2-epoch runs below: the second epoch's training loss and
// the validation mean AUROC beat the untrained model's (kVqaLossGain,
// kVqaAurocGain).
bool LearnedVqa(const nlohmann::json& trained,
                const nlohmann::json& untrained) {
  return trained["train_loss"].get<double>() <
             untrained["train_loss"].get<double>() - kVqaLossGain &&
         trained["val_mean_auroc"].get<double>() >
             untrained["val_mean_auroc"].get<double>() + kVqaAurocGain;
}

// --amp on the CPU: bf16 autocast through the group-norm encoder (LibTorch
// 1.13 used to fail with "expected scalar type BFloat16 but found Float"),
// and the guide's --mixed_precision fp16 (T4 row) with its CPU fallback.
TEST_CASE("vqa_trainer: --amp and --mixed_precision fp16 train on the CPU",
          "[vqa][guide][amp]") {
  const std::string root = MimicRoot();
  // The untrained model on the same questions and batches.
  const std::string base = FreshDir("vqa_amp_untrained");
  const nlohmann::json untrained = UntrainedMetrics(
      Vqa() + " --data_path " + root + " --amp --epochs 2 --output_dir " + base,
      base, 240);
  for (const char* precision : {"--amp", "--mixed_precision fp16"}) {
    const std::string out = FreshDir("vqa_amp");
    CommandResult r =
        RunCommand(Vqa() + " --data_path " + root + " " + precision +
                       " --epochs 2 --output_dir " + out,
                   240);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    // Each flag's own precision: --amp alone is bf16; fp16 is fp16 with loss
    // scaling, or (LibTorch < 2.2 on the CPU) bf16 after a note saying so.
    const bool fp16 = std::string(precision) != "--amp";
    const bool fallback =
        Has(r.output,
            "note: fp16: this LibTorch's CPU autocast computes in "
            "bfloat16 only");
    CHECK((fp16 || !fallback));
    CHECK(Has(r.output, fp16 && !fallback
                            ? "norm, fp16 autocast with dynamic loss scaling"
                            : "norm, bf16 autocast"));
    auto metrics = ReadMetrics(out);
    REQUIRE(metrics.size() == 2);
    CHECK(std::isfinite(metrics.back()["train_loss"].get<double>()));
    INFO("trained " << metrics.back().dump() << "\nuntrained "
                    << untrained.dump());
    CHECK(LearnedVqa(metrics.back(), untrained));
  }
}

// A model that never learns (--lr 0) fails the bar of the test above.
TEST_CASE("vqa_trainer: a run with --lr 0 fails the learning bar",
          "[vqa][guide][amp]") {
  const std::string root = MimicRoot();
  const std::string out = FreshDir("vqa_lr0");
  CommandResult r =
      RunCommand(Vqa() + " --data_path " + root +
                     " --amp --epochs 2 --lr 0 --output_dir " + out,
                 240);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 2);
  const std::string base = FreshDir("vqa_lr0_untrained");
  const nlohmann::json untrained = UntrainedMetrics(
      Vqa() + " --data_path " + root + " --amp --epochs 2 --output_dir " + base,
      base, 240);
  INFO("--lr 0 " << metrics.back().dump() << "\nuntrained "
                 << untrained.dump());
  CHECK_FALSE(LearnedVqa(metrics.back(), untrained));
}

#ifdef DDPRUN_LAUNCHER_BIN
// deepspeed --num_gpus=4 train_mimic_cxr.py --config ... --use_deepspeed:
// ddprun-deepspeed starts the ranks and appends --local_rank=N.
TEST_CASE(
    "vqa_trainer: the guide's deepspeed and torchrun lines under "
    "ddprun-deepspeed and ddprun",
    "[vqa][guide][ddprun]") {
  const std::string root = MimicRoot();
  const std::string dir = FreshDir("vqa_guide_launchers");
  const std::string config = DefaultConfig(dir, root);
  // Without GPUs deepspeed counts $LOCAL_SIZE slots (its CPU accelerator).
  CommandResult ds = RunCommand(
      "LOCAL_SIZE=2 " + std::string(DDPRUN_LAUNCHER_BIN) +
          "-deepspeed --num_gpus=2 --no_python " + Vqa() + " --config " +
          config + " --use_deepspeed --output_dir " + dir + "/ds",
      300);
  INFO(ds.output);
  REQUIRE(ds.exit_code == 0);
  CHECK(Has(ds.output, "x world 2 = effective 128, zero 2,"));
  auto metrics = ReadMetrics(dir + "/ds");
  REQUIRE(metrics.size() == 2);
  CHECK(metrics.back()["world_size"] == 2);

  // torchrun --nproc_per_node=4 train_mimic_cxr.py --config ... --use_ddp
  CommandResult ddp = RunCommand(Launch("") + Vqa() + " --config " + config +
                                     " --use_ddp --output_dir " + dir + "/ddp",
                                 300);
  INFO(ddp.output);
  REQUIRE(ddp.exit_code == 0);
  CHECK(Has(ddp.output, "x world 2 = effective 128, zero 0,"));
  CHECK(LinesWith(ddp.output, "note: --use_ddp: ").size() == 1);
}

// ZeRO-2 with the optimizer state offloaded to the CPU trains exactly as
// ZeRO-2 without it (same update, another memory), under 2 ranks.
TEST_CASE(
    "vqa_trainer: --zero 2 --offload_optimizer cpu under 2 ranks matches "
    "--zero 2",
    "[vqa][guide][ddprun][zero]") {
  const std::string root = MimicRoot();
  std::map<std::string, nlohmann::json> last;
  for (const std::string offload : {"none", "cpu"}) {
    const std::string out = FreshDir("vqa_offload_" + offload);
    CommandResult r =
        RunCommand(Launch("") + Vqa() + " --data_path " + root +
                       " --zero 2 --offload_optimizer " + offload +
                       " --epochs 3 --output_dir " + out,
                   300);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(Has(r.output, offload == "cpu"
                            ? "0.00 MB per rank beside the parameters"
                            : "MB offloaded to host memory"));
    auto metrics = ReadMetrics(out);
    REQUIRE(metrics.size() == 3);
    last[offload] = metrics.back();
  }
  CHECK(last["cpu"]["train_loss"].get<double>() ==
        Approx(last["none"]["train_loss"].get<double>()).margin(1e-5));
  CHECK(last["cpu"]["val_mean_auroc"].get<double>() ==
        Approx(last["none"]["val_mean_auroc"].get<double>()).margin(1e-5));
}
#endif  // DDPRUN_LAUNCHER_BIN

}  // namespace
}  // namespace ddprun::examples::testing
