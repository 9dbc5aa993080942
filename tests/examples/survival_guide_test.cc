// survival_trainer run with the command lines, config snippets and data
// layout of its guide (../shared/seeds/survival-mace-monai.md), paths
// substituted: the guide's dataset.csv (NIFTI path, time, event, Fold_1)
// that --make_synthetic writes, and --debug (16 training subjects, one
// epoch) where the guide's line trains for 50-100 epochs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ddprun_catch.h"

#include "tests/examples/trainer_run.h"

namespace ddprun::examples::testing {
namespace {

// 128 subjects in the guide's layout: every fourth one is Fold_1 = val.
std::string GuideCsv() {
  return SyntheticData("survival", "--n 128 --seed 3", "dataset.csv");
}

std::string Trainer() { return Bin("survival_trainer"); }

// Tag -> steps, and the image tags, of an output dir's only event file.
struct Events {
  std::map<std::string, std::vector<int64_t>> scalars;
  std::map<std::string, int> images;
};
Events ReadOnlyEventFile(const std::string& dir) {
  const std::vector<std::string> files = EventFiles(dir);
  REQUIRE(files.size() == 1);
  const nlohmann::json tb = ReadEvents(files[0]);
  CHECK(!tb["truncated"].get<bool>());
  Events e;
  for (const auto& record : tb["records"]) {
    for (const auto& v : record["values"]) {
      const std::string tag = v["tag"];
      if (v.contains("image")) {
        ++e.images[tag];
        CHECK(v["image"]["png_width"] == 800);
        CHECK(v["image"]["png_height"] == 520);
      } else {
        e.scalars[tag].push_back(record["step"]);
      }
    }
  }
  return e;
}

std::vector<std::string> PicturesIn(const std::string& dir) {
  std::vector<std::string> files;
  if (!std::filesystem::is_directory(dir + "/images")) return files;
  for (const auto& f : std::filesystem::directory_iterator(dir + "/images")) {
    files.push_back(f.path().filename());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// "Advanced Configuration": ResNet-50 on 256x256x64 volumes, batch 48,
// SmartCache 0.7/0.3, and the flags that mean nothing here (--world_size,
// --compile) noted.
TEST_CASE("survival_trainer: the guide's advanced configuration line",
          "[survival][guide]") {
  const std::string out = FreshDir("survival_guide_advanced");
  CommandResult r = RunCommand(
      Trainer() + " --csv_path " + GuideCsv() +
          " --resnet resnet50 --image_size 256 256 64 --batch_size 48 "
          "--epochs 100 --lr 2e-4 --world_size 4 --amp --compile "
          "--use_smart_cache --cache_rate 0.7 --replace_rate 0.3 "
          "--num_workers 6 --debug --output_dir " +
          out,
      600);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(LinesWith(r.output, "note: --world_size 4: ").size() == 1);
  CHECK(LinesWith(r.output, "note: --compile: ").size() == 1);
  CHECK(r.output.find("split by column Fold_1: 96 rows 'train', 32 rows "
                      "'val'") != std::string::npos);
  CHECK(r.output.find("batch 48 total (48 per rank)") != std::string::npos);
  CHECK(r.output.find("6 loader threads, bf16 autocast") != std::string::npos);
  // --debug keeps 16 training subjects: 0.7 of them cached.
  CHECK(r.output.find("smart cache: 11 of 16 training subjects cached, 3 "
                      "replaced per epoch") != std::string::npos);
  const auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 1);
  CHECK(std::isfinite(metrics[0]["train_loss"].get<double>()));
  CHECK(metrics[0]["validation_subjects"] == 8);
}

#ifdef DDPRUN_LAUNCHER_BIN
// "Basic Multi-GPU Training" (launch_distributed_training.py detects the
// GPUs and spawns one process each): ddprun starts the processes.
TEST_CASE("survival_trainer: the guide's basic multi-GPU line under ddprun",
          "[survival][guide][ddprun]") {
  const std::string out = FreshDir("survival_guide_basic");
  CommandResult r = RunCommand(
      Launch("") + Trainer() + " --csv_path " + GuideCsv() +
          " --batch_size 32 --epochs 50 --amp --use_smart_cache --debug "
          "--output_dir " +
          out,
      300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("world 2, batch 32 total (16 per rank)") !=
        std::string::npos);
  CHECK(r.output.find("smart cache: 8 of 16 training subjects cached") !=
        std::string::npos);
  const auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 1);
  CHECK(metrics[0]["world_size"] == 2);
  CHECK(metrics[0]["validation_subjects"] == 8);
}

// "Quick Start" (everything else auto-detected) and "Single Node, 4 GPUs"
// (finetune_survival_distributed.py with --log_dir), on 2 CPU ranks: the
// log dir gets the metrics, the TensorBoard events with the validation
// scalars and the risk-group picture, the curves plot.
TEST_CASE(
    "survival_trainer: the guide's quick start and 4-GPU script lines under "
    "ddprun write what TensorBoard shows",
    "[survival][guide][ddprun]") {
  const std::string quick = FreshDir("survival_guide_quick");
  CommandResult q = RunCommand("cd " + quick + " && " + Launch("") + Trainer() +
                                   " --csv_path " + GuideCsv(),
                               300);
  INFO(q.output);
  REQUIRE(q.exit_code == 0);
  // The default output dir, relative to where the line ran.
  const auto quick_metrics = ReadMetrics(quick + "/runs/survival");
  REQUIRE(quick_metrics.size() == 4);
  // Beats chance and the untrained model (the same line with --lr 0 for one
  // epoch). --seed 0-4: trained 0.73-0.81, untrained 0.47-0.56, trained
  // minus untrained 0.16-0.26.
  const std::string base = FreshDir("survival_guide_untrained");
  const double untrained =
      UntrainedMetrics(Launch("") + Trainer() + " --csv_path " + GuideCsv() +
                           " --output_dir " + base + " --epochs 1",
                       base, 120)["val_cindex"]
          .get<double>();
  const double cindex = quick_metrics.back()["val_cindex"].get<double>();
  INFO("val C-index " << cindex << ", untrained " << untrained);
  CHECK(cindex > 0.6);
  CHECK(cindex > untrained + kSurvivalCindexGain);
  CHECK(quick_metrics.back()["validation_subjects"] == 32);

  const std::string out = FreshDir("survival_guide_4gpu");
  const std::string log_dir = out + "/logs/resnet50_4gpu";
  CommandResult r = RunCommand(
      "CUDA_VISIBLE_DEVICES=0,1,2,3 NCCL_DEBUG=INFO " + Launch("") + Trainer() +
          " --csv_path " + GuideCsv() +
          " --resnet resnet50 --batch_size 32 --epochs 100 --lr 1e-4 --amp "
          "--use_smart_cache --cache_rate 0.6 --replace_rate 0.4 --log_dir " +
          log_dir + " --debug",
      300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto metrics = ReadMetrics(log_dir);
  REQUIRE(metrics.size() == 1);
  CHECK(metrics[0]["world_size"] == 2);
  const int64_t step = metrics[0]["step"];
  const Events events = ReadOnlyEventFile(log_dir);
  for (const char* tag : {"train/loss", "train/lr", "train/epoch_loss",
                          "val/loss", "val/cindex"}) {
    INFO(tag);
    CHECK(events.scalars.count(tag) == 1);
  }
  // samples/s is measured from the first step's end: a run of one step has
  // no rate (not a 0), a longer one has the curve.
  CHECK(events.scalars.count("train/samples_per_s") == (step > 1 ? 1u : 0u));
  CHECK(events.scalars.at("val/cindex") == std::vector<int64_t>{step});
  // A count is not a curve.
  for (const auto& [tag, steps] : events.scalars) {
    CHECK(tag.find("subjects") == std::string::npos);
  }
  CHECK(events.images == std::map<std::string, int>{{"val/risk_groups", 1}});
  char name[64];
  std::snprintf(name, sizeof(name), "val_risk_groups_step%08lld.png",
                static_cast<long long>(step));
  CHECK(PicturesIn(log_dir) == std::vector<std::string>{name});
  CHECK(PngSize(log_dir + "/images/" + name) == std::make_pair(800, 520));
  CHECK(PngSize(log_dir + "/training_curves.png").first == 1200);
}

// "Multi-Node Training (Advanced)": python -m torch.distributed.launch
// --nnodes=2 --node_rank=N --master_addr --master_port on each node; here
// both "nodes" on this machine, one process each.
TEST_CASE(
    "survival_trainer: the guide's two-node torch.distributed.launch lines "
    "under ddprun-launch",
    "[survival][guide][ddprun]") {
  const std::string out = FreshDir("survival_guide_nodes");
  const int port = FreeLoopbackPort();
  auto node = [&](int rank) {
    return std::string(DDPRUN_LAUNCHER_BIN) +
           "-launch --nproc_per_node=1 --nnodes=2 --node_rank=" +
           std::to_string(rank) +
           " --master_addr=127.0.0.1 --master_port=" + std::to_string(port) +
           " --no_python --use_env " + Trainer() + " --csv_path " + GuideCsv() +
           " --debug --output_dir " + out;
  };
  CommandResult r = RunCommand(
      "(" + node(1) + " > " + out + "/node1.log 2>&1 &) ; " + node(0) +
          "; code=$?; wait; cat " + out + "/node1.log; exit $code",
      300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("world 2, batch 8 total (4 per rank)") !=
        std::string::npos);
  const auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 1);
  CHECK(metrics[0]["world_size"] == 2);
}

#endif  // DDPRUN_LAUNCHER_BIN

// "SmartCacheDataset Configuration": the guide's Python snippet (one preset)
// as a config file, as written; and the guide's argument tables as a
// sectioned YAML file.
TEST_CASE("survival_trainer: the guide's config snippet and a sectioned YAML",
          "[survival][guide][config]") {
  const std::string out = FreshDir("survival_guide_config");
  WriteText(out + "/conservative.py",
            "# Conservative memory usage (suitable for limited GPU memory)\n"
            "cache_rate = 0.3\n"
            "replace_rate = 0.2\n");
  CommandResult py = RunCommand(
      Trainer() + " --csv_path " + GuideCsv() + " --config " + out +
          "/conservative.py --use_smart_cache --debug --output_dir " + out +
          "/py",
      240);
  INFO(py.output);
  REQUIRE(py.exit_code == 0);
  CHECK(py.output.find("smart cache: 5 of 16 training subjects cached, 1 "
                       "replaced per epoch") != std::string::npos);

  const std::string yaml = out + "/guide.yaml";
  WriteText(yaml,
            "data:\n"
            "  csv_path: " +
                GuideCsv() +
                "\n"
                "  fold_column: Fold_1\n"
                "model:\n"
                "  resnet: resnet18\n"
                "  image_size: [32, 32, 32]\n"
                "training:\n"
                "  batch_size: 8\n"
                "  num_epochs: 1\n"
                "  lr: 2.0e-3\n"
                "  amp: true\n"
                "  gradient_checkpointing: true\n"
                "smart_cache:\n"
                "  use_smart_cache: true\n"
                "  cache_rate: 0.5\n"
                "  replace_rate: 0.5\n"
                "performance:\n"
                "  world_size: 4\n"
                "  backend: gloo\n"
                "  compile: true\n"
                "  pin_memory: true\n"
                "  num_workers: 2\n");
  CommandResult r = RunCommand(
      Trainer() + " --config " + yaml + " --debug --output_dir " + out + "/y",
      240);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("note: " + yaml + ":18: performance.world_size: ") !=
        std::string::npos);
  CHECK(r.output.find("note: " + yaml + ":20: performance.compile: ") !=
        std::string::npos);
  CHECK(r.output.find("2 loader threads, bf16 autocast, activation "
                      "checkpointing") != std::string::npos);
  CHECK(r.output.find("smart cache: 8 of 16 training subjects cached, 4 "
                      "replaced per epoch") != std::string::npos);
  CHECK(ReadMetrics(out + "/y").size() == 1);
}

// The guide's data layout: paths in the CSV relative to where the command
// runs (the guide's scripts open them as given), the data root
// (data/dataset.csv) given as --csv_path, a directory without it, a fold
// column that is not there.
TEST_CASE("survival_trainer: the guide's CSV layout and its errors",
          "[survival][guide][errors]") {
  const std::string out = FreshDir("survival_guide_layout");
  const std::filesystem::path data =
      std::filesystem::path(GuideCsv()).parent_path();
  // A CSV elsewhere whose paths are relative to data's parent (the cwd).
  std::string rows = "NIFTI path,time,event,Fold_1\n";
  for (int i = 0; i < 24; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "/images/subject_%04d.nii", i);
    rows += data.filename().string() + name + "," + std::to_string(1 + i % 7) +
            "," + std::to_string(i % 3 != 0) + "," +
            (i % 4 == 3 ? "val" : "train") + "\n";
  }
  WriteText(out + "/lists.csv", rows);
  CommandResult cwd =
      RunCommand("cd " + data.parent_path().string() + " && " + Trainer() +
                     " --csv_path " + out + "/lists.csv --debug --output_dir " +
                     out + "/cwd",
                 240);
  INFO(cwd.output);
  CHECK(cwd.exit_code == 0);
  CHECK(cwd.output.find("split by column Fold_1: 18 rows 'train', 6 rows "
                        "'val'") != std::string::npos);

  // The data root of the guide's layout: <data>/dataset.csv.
  CommandResult root = RunCommand(Trainer() + " --csv_path " + data.string() +
                                      " --debug --output_dir " + out + "/root",
                                  240);
  INFO(root.output);
  CHECK(root.exit_code == 0);
  CHECK(root.output.find("split by column Fold_1: 96 rows 'train', 32 rows "
                         "'val'") != std::string::npos);
  // A directory without it: one line naming the layout and the CSVs there.
  std::filesystem::create_directories(out + "/other");
  WriteText(out + "/other/subjects.csv", "image,time,event\n");
  CommandResult dir = RunCommand(
      Trainer() + " --csv_path " + out + "/other --output_dir " + out, 60);
  CHECK(dir.exit_code == 2);
  CHECK(LinesWith(dir.output, "ConfigError: ").size() == 1);
  CHECK(dir.output.find(out +
                        "/other is a directory without dataset.csv "
                        "(the guide's layout: <data>/dataset.csv with columns "
                        "NIFTI path,time,event,Fold_1); --csv_path takes that "
                        "directory or the CSV file that lists the volumes, "
                        "e.g. " +
                        out + "/other/subjects.csv") != std::string::npos);

  CommandResult fold =
      RunCommand(Trainer() + " --csv_path " + GuideCsv() +
                     " --fold_column Fold_2 --output_dir " + out,
                 60);
  CHECK(fold.exit_code == 2);
  CHECK(fold.output.find("dataset.csv:1: missing column 'Fold_2'") !=
        std::string::npos);

  CommandResult value = RunCommand(Trainer() + " --csv_path " + GuideCsv() +
                                       " --val_fold test --output_dir " + out,
                                   60);
  CHECK(value.exit_code == 2);
  CHECK(value.output.find("no row has Fold_1 = 'test' (--val_fold); the "
                          "column holds 'train', 'val'") != std::string::npos);
}

}  // namespace
}  // namespace ddprun::examples::testing
