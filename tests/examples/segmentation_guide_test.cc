// segmentation_trainer as prs-med-segmentation.md's user runs it: the
// guide's data root layout, its command lines (python, torchrun, the legacy
// launcher, two nodes, its run_multi_gpu_train.sh) with ddprun in place of
// torchrun and paths substituted, a config file in its vocabulary,
// precision, and what a run leaves behind (TensorBoard scalars and mask
// overlays, the curves plot).
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

// A small data root in the guide's layout (written once per test binary):
// 20 images of 32x32, every 5th in the val split: 16 train, 4 val.
std::string GuideRoot() {
  return fs::path(SyntheticData("segmentation",
                                "--n 20 --image_size 32 --seed 11",
                                "prompts.jsonl"))
      .parent_path()
      .string();
}

std::string Trainer() { return Bin("segmentation_trainer"); }

// `command` run in `cwd`, as the guide's lines are (their output and
// checkpoint dirs are relative).
CommandResult RunIn(const std::string& cwd, const std::string& command,
                    int timeout_s) {
  return RunCommand("cd " + cwd + " && " + command, timeout_s);
}

// A copy of the guide root to break.
std::string CopyOfRoot(const std::string& tag) {
  const std::string dir = FreshDir(tag) + "/data";
  fs::copy(GuideRoot(), dir, fs::copy_options::recursive);
  return dir;
}

// Tag -> steps of the scalar records; tag -> sizes of the image records.
struct Events {
  std::map<std::string, std::vector<long long>> scalars;
  std::map<std::string, std::vector<std::pair<int, int>>> images;
};
Events ReadAllEvents(const std::string& out) {
  Events e;
  for (const std::string& file : EventFiles(out)) {
    const nlohmann::json events = ReadEvents(file);
    for (const auto& record : events["records"]) {
      if (!record.contains("values")) continue;
      for (const auto& v : record["values"]) {
        const std::string tag = v["tag"];
        if (v.contains("image")) {
          e.images[tag].push_back(
              {v["image"]["png_width"], v["image"]["png_height"]});
        } else {
          e.scalars[tag].push_back(record["step"]);
        }
      }
    }
  }
  return e;
}

TEST_CASE(
    "segmentation_trainer: --make_synthetic writes the guide's data root "
    "layout",
    "[segmentation][guide]") {
  const std::string root = GuideRoot();
  CHECK(fs::is_regular_file(root + "/annotations/lesions.csv"));
  CHECK(fs::is_regular_file(root + "/prompts.jsonl"));
  for (const char* file :
       {"train_images/0001.png", "train_masks/0001.png", "val_images/0000.png",
        "val_masks/0000.png", "val_images/0015.png", "train_images/0019.png"}) {
    INFO(file);
    CHECK(PngSize(root + "/images_and_masks/lesions/" + file) ==
          std::make_pair(32, 32));
  }
  std::ifstream csv(root + "/annotations/lesions.csv");
  std::string header, row;
  std::getline(csv, header);
  std::getline(csv, row);
  CHECK(header == "image_path,question,answer,split");
  CHECK(row.rfind("lesions/val_images/0000.png,", 0) == 0);
  CHECK(row.substr(row.size() - 4) == ",val");
}

// "python train_prs_med.py --data_root data" (single GPU fallback), run in
// a fresh directory: the default output dir runs/segmentation is relative
// to it. Its outputs are what the README shows.
TEST_CASE(
    "segmentation_trainer: the guide's single-process line trains on its data "
    "root and leaves events, mask overlays and the curves plot",
    "[segmentation][guide][outputs]") {
  const std::string cwd = FreshDir("seg_guide_python");
  CommandResult r = RunIn(cwd, Trainer() + " --data_root " + GuideRoot(), 300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("segmentation data: split column: 16 train, 4 val, 0 "
                      "test rows") != std::string::npos);
  CHECK(r.output.find("world 1, batch 8 per rank, lr 0.001000 (--learning_rate "
                      "x world 1), effective batch 8") != std::string::npos);
  const std::string out = cwd + "/runs/segmentation";
  auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 8);  // the default --epochs
  CHECK(metrics.back()["val_images"] == 4);
  CHECK(metrics.back()["step"] == 16);  // 2 steps per epoch
  CHECK(fs::exists(out + "/checkpoints/best.pt"));

  // TensorBoard: every CRC checked by the independent reader.
  REQUIRE(EventFiles(out).size() == 1);
  const Events e = ReadAllEvents(out);
  const std::vector<long long> epoch_ends{2, 4, 6, 8, 10, 12, 14, 16};
  CHECK(e.scalars.at("train/loss").size() == 16);
  CHECK(e.scalars.at("train/lr").size() == 16);
  CHECK(e.scalars.at("train/epoch_loss") == epoch_ends);
  CHECK(e.scalars.at("val/dice") == epoch_ends);
  CHECK(e.scalars.at("val/loss") == epoch_ends);
  // One overlay per validation: 4 images of 64x64 (enlarged to 128) in one
  // row of 4 tiles under the title band: 4 * (128 + 8) + 8 by
  // 32 + 20 + 128 + 8 + 8.
  REQUIRE(e.images.count("val/mask_overlay") == 1);
  CHECK(e.images.at("val/mask_overlay").size() == 8);
  CHECK(e.images.at("val/mask_overlay").back() == std::make_pair(552, 196));
  for (long long step : epoch_ends) {
    char name[64];
    std::snprintf(name, sizeof(name), "/images/val_mask_overlay_step%08lld.png",
                  step);
    INFO(name);
    CHECK(PngSize(out + name) == std::make_pair(552, 196));
  }
  CHECK(PngSize(out + "/training_curves.png").first > 0);
}

// The same data as a JSONL list or the directory holding it; a directory
// with neither layout, a missing path.
TEST_CASE("segmentation_trainer: --data_path takes a JSONL or a directory",
          "[segmentation][guide]") {
  const std::string root = GuideRoot();
  const std::string out = FreshDir("seg_guide_jsonl");
  CommandResult jsonl =
      RunCommand(Trainer() + " --data_path " + root +
                     "/prompts.jsonl --debug --output_dir " + out + "/a",
                 120);
  INFO(jsonl.output);
  CHECK(jsonl.exit_code == 0);
  CHECK(jsonl.output.find("split column") == std::string::npos);  // seeded

  const std::string listed = FreshDir("seg_guide_listed");
  fs::copy_file(root + "/prompts.jsonl", listed + "/prompts.jsonl");
  fs::create_directory_symlink(root + "/images_and_masks",
                               listed + "/images_and_masks");
  CommandResult dir = RunCommand(Trainer() + " --data_path " + listed +
                                     " --debug --output_dir " + out + "/b",
                                 120);
  INFO(dir.output);
  CHECK(dir.exit_code == 0);
  CHECK(ReadMetrics(out + "/b").size() == 1);

  const std::string empty = FreshDir("seg_guide_empty");
  CommandResult neither =
      RunCommand(Trainer() + " --data_root " + empty + " --debug", 60);
  CHECK(neither.exit_code == 2);
  CHECK(neither.output.find(
            empty + ": a directory with neither annotations/ nor "
                    "prompts.jsonl (the guide's --data_root layout is "
                    "DIR/annotations/<dataset>.csv") != std::string::npos);
  CommandResult missing =
      RunCommand(Trainer() + " --data_root " + empty + "/nope --debug", 60);
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find(empty + "/nope: no such file or directory") !=
        std::string::npos);
}

TEST_CASE(
    "segmentation_trainer: a data root that breaks the guide's layout fails "
    "naming what is missing",
    "[segmentation][guide][errors]") {
  auto run = [](const std::string& root) {
    return RunCommand(Trainer() + " --data_root " + root +
                          " --debug --output_dir " + root + "/../out",
                      60);
  };
  const std::string lesions = "/images_and_masks/lesions/";
  {
    INFO("an image without its mask");
    const std::string root = CopyOfRoot("seg_layout_nomask");
    fs::remove(root + lesions + "train_masks/0003.png");
    CommandResult r = run(root);
    CHECK(r.exit_code == 2);
    // Line 5: header, then rows 0..3.
    CHECK(r.output.find(root + "/annotations/lesions.csv:5: image " + root +
                        lesions + "train_images/0003.png has no mask: " + root +
                        lesions + "train_masks/0003.png not found") !=
          std::string::npos);
  }
  {
    INFO("a missing image");
    const std::string root = CopyOfRoot("seg_layout_noimage");
    fs::remove(root + lesions + "val_images/0005.png");
    CommandResult r = run(root);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("lesions.csv:7: image not found: " + root + lesions +
                        "val_images/0005.png") != std::string::npos);
  }
  {
    INFO("no images_and_masks/");
    const std::string root = CopyOfRoot("seg_layout_nomedia");
    fs::remove_all(root + "/images_and_masks");
    CommandResult r = run(root);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(root + "/images_and_masks: no such folder (the "
                               "guide's --data_root layout is") !=
          std::string::npos);
  }
  {
    INFO("annotations/ without a CSV");
    const std::string root = CopyOfRoot("seg_layout_nocsv");
    fs::remove(root + "/annotations/lesions.csv");
    CommandResult r = run(root);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(root + "/annotations: no .csv files") !=
          std::string::npos);
  }
  const std::string root = CopyOfRoot("seg_layout_rows");
  const std::string good_row =
      "lesions/train_images/0001.png,lesion in the upper left,x,train\n";
  auto with_rows = [&](const std::string& text) {
    WriteText(root + "/annotations/lesions.csv", text);
    return run(root);
  };
  CommandResult no_question =
      with_rows("image_path,answer\nlesions/train_images/0001.png,x\n");
  CHECK(no_question.exit_code == 2);
  CHECK(no_question.output.find(
            "lesions.csv:1: missing column 'question' (header has: "
            "image_path,answer)") != std::string::npos);
  CommandResult bad_split =
      with_rows("image_path,question,answer,split\n" + good_row +
                "lesions/train_images/0002.png,q,a,training\n");
  CHECK(bad_split.exit_code == 2);
  CHECK(bad_split.output.find(
            "lesions.csv:3: column 'split': 'training' is not train, val or "
            "test") != std::string::npos);
  CommandResult flat = with_rows("image_path,question,answer,split\n" +
                                 good_row + "0002.png,q,a,train\n");
  CHECK(flat.exit_code == 2);
  CHECK(flat.output.find("lesions.csv:3: image_path '0002.png' is not inside "
                         "a train_images/, val_images/ or test_images/ folder, "
                         "so its mask cannot be found") != std::string::npos);
  CommandResult header_only = with_rows("image_path,question,answer,split\n");
  CHECK(header_only.exit_code == 2);
  CHECK(header_only.output.find("the annotation files have no rows") !=
        std::string::npos);

  // Without val rows (or without a split column) --val_fraction holds out
  // part of the training rows; test rows are not used.
  std::string rows = "image_path,question,answer,split\n";
  for (int i = 1; i <= 9; ++i) {
    if (i % 5 == 0) continue;
    char row[128];
    std::snprintf(row, sizeof(row),
                  "lesions/train_images/%04d.png,lesion,x,%s\n", i,
                  i == 9 ? "test" : "train");
    rows += row;
  }
  CommandResult no_val = with_rows(rows);
  INFO(no_val.output);
  CHECK(no_val.exit_code == 0);
  CHECK(no_val.output.find("split column: 7 train, 0 val, 1 test rows (test "
                           "rows unused); no val rows, so --val_fraction "
                           "0.200000 of the train rows validate") !=
        std::string::npos);
}

// A config file in the guide's vocabulary, as examples/README.md shows it.
TEST_CASE("segmentation_trainer: the README's config example",
          "[segmentation][guide][config]") {
  const std::string dir = FreshDir("seg_guide_config");
  const std::string yaml = dir + "/prs_med.yaml";
  WriteText(yaml,
            "# prs_med.yaml: the guide's settings in one file\n"
            "data:\n"
            "  data_root: " +
                GuideRoot() +
                "\n"
                "  num_workers: 4\n"
                "training:\n"
                "  batch_size: 8         # per GPU\n"
                "  learning_rate: 1.0e-4 # x the number of processes\n"
                "  num_epochs: 20\n"
                "  checkpoint_dir: " +
                dir +
                "/checkpoints\n"
                "  seed: 42\n"
                "  grad_accum_steps: 1\n"
                "  mixed_precision: \"no\"\n"
                "ddp:\n"
                "  use_ddp: true         # DDP needs no switch\n"
                "  dist_url: env://\n"
                "output_dir: " +
                dir + "/run\n");
  CommandResult r = RunCommand(Trainer() + " --config " + yaml, 300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("note: " + yaml +
                      ":14: ddp.use_ddp: DDP needs "
                      "no switch") != std::string::npos);
  CHECK(r.output.find("note: " + yaml +
                      ":15: ddp.dist_url: the "
                      "process group is set up from the "
                      "launcher's environment") != std::string::npos);
  CHECK(r.output.find("batch 8 per rank, lr 0.000100") != std::string::npos);
  auto metrics = ReadMetrics(dir + "/run");
  REQUIRE(metrics.size() == 20);
  CHECK(metrics.back()["step"] == 40);
  CHECK(NewestCheckpointStep(dir + "/checkpoints") == 40);
}

// fp16 on a CPU without float16 autocast (LibTorch 1.13) trains in bf16
// with one note; --mixed_precision bf16 and the PRS-Med scripts'
// --grad_accum_steps go through the frame.
TEST_CASE(
    "segmentation_trainer: --amp fp16, --mixed_precision bf16 and "
    "--grad_accum_steps on the CPU",
    "[segmentation][guide][precision]") {
  const std::string out = FreshDir("seg_guide_precision");
  const std::string base =
      Trainer() + " --data_root " + GuideRoot() + " --num_epochs 1";
  CommandResult fp16 =
      RunCommand(base + " --output_dir " + out + "/fp16 --amp fp16", 180);
  INFO(fp16.output);
  REQUIRE(fp16.exit_code == 0);
  const bool fallback =
      fp16.output.find(
          "note: fp16: this LibTorch's CPU autocast computes in "
          "bfloat16 only") != std::string::npos;
  CHECK(fp16.output.find(fallback
                             ? "effective batch 8, bf16 autocast"
                             : "effective batch 8, fp16 autocast with dynamic "
                               "loss scaling") != std::string::npos);
  auto m = ReadMetrics(out + "/fp16");
  REQUIRE(m.size() == 1);
  CHECK(std::isfinite(m[0]["train_loss"].get<double>()));
  CHECK(std::isfinite(m[0]["val_dice"].get<double>()));

  CommandResult bf16 = RunCommand(base + " --output_dir " + out +
                                      "/bf16 --mixed_precision bf16 "
                                      "--grad_accum_steps 2 --batch_size 4",
                                  180);
  INFO(bf16.output);
  REQUIRE(bf16.exit_code == 0);
  CHECK(bf16.output.find("batch 4 per rank x accumulation 2, lr 0.001000 "
                         "(--learning_rate x world 1), effective batch 8, "
                         "bf16 autocast") != std::string::npos);
  m = ReadMetrics(out + "/bf16");
  REQUIRE(m.size() == 1);
  CHECK(m[0]["step"] == 2);  // 16 images, 8 per optimizer step
  CHECK(std::isfinite(m[0]["train_loss"].get<double>()));
}

}  // namespace
}  // namespace ddprun::examples::testing

#ifdef DDPRUN_LAUNCHER_BIN
namespace ddprun::examples::testing {
namespace {

// torchrun -> ddprun (--standalone: a free port instead of 29500; --no_python
// before the C++ trainer), train_prs_med.py -> segmentation_trainer.
std::string Ddprun(const std::string& flags) {
  return std::string(DDPRUN_LAUNCHER_BIN) + " " + flags + " --no_python " +
         Trainer();
}

// "Training on 4 GPUs with custom settings": the LR is scaled by 4, the
// batch is per process, checkpoints go to ./checkpoints.
TEST_CASE("segmentation_trainer: the guide's torchrun lines under ddprun",
          "[segmentation][guide][ddprun]") {
  const std::string cwd = FreshDir("seg_guide_torchrun");
  CommandResult r =
      RunIn(cwd,
            Ddprun("--standalone --nproc_per_node=4") + " --data_root " +
                GuideRoot() +
                " --batch_size 4 --learning_rate 5e-5 --num_epochs 50 "
                "--num_workers 4 --checkpoint_dir ./checkpoints",
            600);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("world 4, batch 4 per rank, lr 0.000200 "
                      "(--learning_rate x world 4), effective batch 16") !=
        std::string::npos);
  auto metrics = ReadMetrics(cwd + "/runs/segmentation");
  REQUIRE(metrics.size() == 50);
  CHECK(metrics.back()["world_size"] == 4);
  CHECK(metrics.back()["val_images"] == 4);  // 1 per rank, summed
  CHECK(metrics.back()["step"] == 50);       // 4 images per rank: 1 step
  CHECK(fs::exists(cwd + "/checkpoints/best.pt"));
  CHECK(NewestCheckpointStep(cwd + "/checkpoints") == 50);

  // Option 2 as written.
  const std::string plain = FreshDir("seg_guide_torchrun2");
  CommandResult two = RunIn(
      plain,
      Ddprun("--standalone --nproc_per_node=4") + " --data_root " +
          GuideRoot() + " --batch_size 8 --learning_rate 1e-4 --num_epochs 20",
      600);
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  CHECK(two.output.find("lr 0.000400 (--learning_rate x world 4), effective "
                        "batch 32") != std::string::npos);
  CHECK(ReadMetrics(plain + "/runs/segmentation").size() == 20);
}

// "python -m torch.distributed.launch --nproc_per_node=4 train_prs_med.py
// --data_root ... --batch_size 8": a compiled trainer needs --no_python,
// which torch's legacy launcher (and ddprun-launch) accepts only with
// --use_env: the ranks read LOCAL_RANK instead of --local_rank=N.
TEST_CASE("segmentation_trainer: the guide's torch.distributed.launch line",
          "[segmentation][guide][ddprun]") {
  const std::string cwd = FreshDir("seg_guide_launch");
  CommandResult r =
      RunIn(cwd,
            std::string(DDPRUN_LAUNCHER_BIN) +
                "-launch --standalone --nproc_per_node=4 --no_python --use_env " +
                Trainer() + " --data_root " + GuideRoot() + " --batch_size 8",
            600);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("world 4, batch 8 per rank") != std::string::npos);
  auto metrics = ReadMetrics(cwd + "/runs/segmentation");
  REQUIRE(metrics.size() == 8);
  CHECK(metrics.back()["world_size"] == 4);
}

// "Training on 8 GPUs (multi-node)": both nodes' lines, on this machine
// (master_addr 127.0.0.1, a free port instead of 29500).
TEST_CASE("segmentation_trainer: the guide's two-node lines",
          "[segmentation][guide][ddprun]") {
  const std::string cwd = FreshDir("seg_guide_nodes");
  const std::string port = std::to_string(FreeLoopbackPort());
  auto node = [&](int rank) {
    return Ddprun("--nproc_per_node=4 --nnodes=2 --node_rank=" +
                  std::to_string(rank) +
                  " --master_addr=127.0.0.1 --master_port=" + port) +
           " --data_root " + GuideRoot();
  };
  CommandResult r =
      RunIn(cwd,
            "{ " + node(0) + " > node0.log 2>&1 & p=$!; " + node(1) +
                " > node1.log 2>&1; n1=$?; wait $p; n0=$?; cat node0.log "
                "node1.log; exit $((n0 | n1)); }",
            600);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("world 8, batch 8 per rank, lr 0.008000") !=
        std::string::npos);
  auto metrics = ReadMetrics(cwd + "/runs/segmentation");
  REQUIRE(metrics.size() == 8);
  CHECK(metrics.back()["world_size"] == 8);
  CHECK(metrics.back()["val_images"] == 4);
}

// "./run_multi_gpu_train.sh /path/to/data 4": the guide's script, ours.
TEST_CASE("segmentation_trainer: the guide's run_multi_gpu_train.sh",
          "[segmentation][guide][ddprun]") {
  const std::string cwd = FreshDir("seg_guide_script");
  const std::string script = std::string(DDPRUN_SOURCE_DIR) +
                             "/examples/segmentation/run_multi_gpu_train.sh";
  CommandResult r = RunIn(cwd,
                          std::string("DDPRUN_BIN=") + DDPRUN_LAUNCHER_BIN +
                              " TRAINER=" + Trainer() + " " + script + " " +
                              GuideRoot() + " 4",
                          600);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("Starting training with 4 processes") !=
        std::string::npos);
  CHECK(r.output.find("world 4, batch 8 per rank, lr 0.000400") !=
        std::string::npos);
  CHECK(r.output.find("Training completed!") != std::string::npos);
  CHECK(ReadMetrics(cwd + "/runs/segmentation").size() == 20);
  CHECK(fs::exists(cwd + "/checkpoints/best.pt"));

  CommandResult bad = RunCommand(script + " " + GuideRoot() + " four", 30);
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("num_procs must be a positive number, got 'four'") !=
        std::string::npos);
}

}  // namespace
}  // namespace ddprun::examples::testing
#endif  // DDPRUN_LAUNCHER_BIN
