// The trainers' command line and config files (Torch-free): nested YAML
// sections, the guides' aliases and foreign flags, unknown-option hints,
// priority of flags over the file.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "ddprun_catch.h"
#include "tests/common/remove_at_exit.h"

#include "examples/formats/flag_parser.h"
#include "examples/formats/guide_flags.h"
#include "examples/formats/yaml_config.h"

namespace ddprun::examples {
namespace {

std::string TempFile(const std::string& name, const std::string& text) {
  std::string path =
      "/tmp/ddprun_flags_test_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return ddprun::testing::RemoveAtExit(path);
}

// A trainer-like command line: a few options of each kind, the common
// tables and --amp's optional value.
struct Cli {
  CLI::App app;
  FlagParser parser{&app};
  int batch_size = 8;
  double lr = 0.1;
  int epochs = 1;
  std::vector<int> stages{32};
  std::vector<int> image_size{32, 32, 32};
  bool debug = false;
  std::string amp;
  std::string mixed_precision;
  std::string output_dir = "runs/x";
  int local_rank = -1;

  Cli() {
    parser.AddConfigOption();
    app.add_option("--batch_size", batch_size)->check(CLI::PositiveNumber);
    app.add_option("--learning_rate", lr);
    app.add_option("--epochs", epochs);
    app.add_option("--stages", stages)->delimiter(',');
    app.add_option("--image_size", image_size)->expected(3);
    app.add_flag("--debug", debug);
    app.add_option("--amp", amp)->check(CLI::IsMember({"bf16", "fp16", "no"}));
    app.add_option("--mixed_precision", mixed_precision)
        ->check(CLI::IsMember({"no", "bf16", "fp16"}));
    app.add_option("--output_dir", output_dir);
    app.add_option("--local_rank", local_rank);
    parser.AddAliases(CommonGuideAliases());
    parser.AddForeignFlags(CommonForeignFlags());
    parser.AddOptionalValue({"amp", "bf16", "no"});
  }
  StatusOr<bool> Parse(const std::vector<std::string>& args) {
    return parser.Parse(args);
  }
  // The error message of a parse that must fail ("" if it succeeded).
  std::string Error(const std::vector<std::string>& args) {
    StatusOr<bool> r = Parse(args);
    return r.ok() ? "" : r.status().message();
  }
};

TEST_CASE("Config file values apply, flags on the command line override them",
          "[config]") {
  std::string yaml = TempFile(
      "c.yaml",
      "batch_size: 16\nlearning_rate: 0.5\nstages: [32, 48, 64]\ndebug: true\n"
      "image_size: [16, 16, 8]\n");
  Cli f;
  REQUIRE(*f.Parse({"--config", yaml, "--batch_size", "4"}));
  CHECK(f.batch_size == 4);  // flag wins
  CHECK(f.lr == 0.5);        // from the file
  CHECK(f.stages == std::vector<int>{32, 48, 64});
  CHECK(f.image_size == std::vector<int>{16, 16, 8});
  CHECK(f.debug);
  CHECK(f.parser.IsSet("batch_size"));
  CHECK(f.parser.IsSet("learning_rate"));
  CHECK_FALSE(f.parser.IsSet("epochs"));

  std::string json =
      TempFile("c.json", "{\"batch_size\": 12, \"learning_rate\": 0.25}");
  Cli g;
  REQUIRE(*g.Parse({"--config", json}));
  CHECK(g.batch_size == 12);
  CHECK(g.lr == 0.25);
  for (auto* p : {&yaml, &json}) std::remove(p->c_str());
}

TEST_CASE("Config sections: nested keys apply by name, foreign ones are noted",
          "[config]") {
  // fast-ddpm-3d-brats.md's configs/fast_ddpm_3d.yml.
  std::string yaml = TempFile("nested.yaml",
                              "training:\n"
                              "    batch_size: 1                  # per GPU\n"
                              "    gradient_checkpointing_x: 1\n");
  Cli bad;
  // An unknown key names the file, its line and the dotted key.
  CHECK(bad.Error({"--config", yaml}) ==
        yaml +
            ":3: unknown key 'training.gradient_checkpointing_x' (see "
            "--help for the option names)");

  std::string guide = TempFile("guide.yaml",
                               "training:\n"
                               "    batch_size: 2\n"
                               "    num_epochs: 5\n"
                               "    multi_gpu: true\n"
                               "    distributed: false\n"
                               "    fp16: true\n"
                               "deepspeed:\n"
                               "  enabled: true\n"
                               "  stage: 2\n");
  Cli f;
  REQUIRE(*f.Parse({"--config", guide}));
  CHECK(f.batch_size == 2);
  CHECK(f.epochs == 5);                   // alias num_epochs
  CHECK(f.mixed_precision == "fp16");     // switch alias fp16: true
  REQUIRE(f.parser.notes().size() == 3);  // multi_gpu, distributed, deepspeed
  CHECK(f.parser.notes()[0] == guide + ":4: training.multi_gpu: " +
                                   CommonForeignFlags()[2].explanation);
  CHECK(f.parser.notes()[2].rfind(guide + ":8: deepspeed.enabled: no "
                                          "DeepSpeed here",
                                  0) == 0);
  for (auto* p : {&yaml, &guide}) std::remove(p->c_str());
}

TEST_CASE("Config errors name the file, the line and the key", "[config]") {
  Cli a;
  const std::string typo = TempFile("typo.yaml", "epochs: 2\nbatch_sise: 3\n");
  CHECK(a.Error({"--config", typo}) ==
        typo + ":2: unknown key 'batch_sise' (did you mean 'batch_size'?)");
  Cli b;
  const std::string value = TempFile("value.yaml", "\n\nbatch_size: -3\n");
  const std::string msg = b.Error({"--config", value});
  CHECK(msg.rfind(value + ":3: key 'batch_size': ", 0) == 0);
  CHECK(msg.find("-3") != std::string::npos);
  Cli c;
  const std::string twice =
      TempFile("twice.yaml", "learning_rate: 0.1\ntraining:\n  lr: 0.2\n");
  CHECK(c.Error({"--config", twice}) ==
        twice +
            ":3: key 'training.lr' sets --learning_rate again (already "
            "set by 'learning_rate' at line 1)");
  Cli d;
  const std::string empty = TempFile("null.yaml", "batch_size:\n");
  CHECK(d.Error({"--config", empty}) ==
        empty + ":1: key 'batch_size' has no value");
  Cli e;
  const std::string syntax = TempFile("syntax.yaml", "a: [1, 2\n");
  CHECK(e.Error({"--config", syntax}).rfind(syntax + ":", 0) == 0);
  Cli f;
  CHECK(f.Error({"--config", "/nonexistent.yaml"}) ==
        "cannot read config file /nonexistent.yaml");
  for (auto* p : {&typo, &value, &twice, &empty, &syntax})
    std::remove(p->c_str());
}

TEST_CASE("Guide aliases and --a-b spellings name our options", "[flags]") {
  Cli f;
  REQUIRE(*f.Parse({"--lr", "1e-4", "--num-epochs=7", "--log_dir", "logs/x",
                    "--batch-size", "3", "--local-rank=1", "--bf16"}));
  CHECK(f.lr == 1e-4);
  CHECK(f.epochs == 7);
  CHECK(f.output_dir == "logs/x");
  CHECK(f.batch_size == 3);
  CHECK(f.local_rank == 1);
  CHECK(f.mixed_precision == "bf16");
  CHECK(f.parser.IsSet("learning_rate"));
  CHECK(f.parser.notes().empty());

  Cli g;
  CHECK(g.Error({"--lr", "1", "--learning_rate", "2"}) ==
        "--lr and --learning_rate both set --learning_rate; give one of them");
  Cli h;
  REQUIRE(*h.Parse({"--fp16=false"}));  // a switch turned off: no effect
  CHECK(h.mixed_precision.empty());
}

TEST_CASE("Foreign flags are taken out with their values and noted once",
          "[flags]") {
  Cli f;
  REQUIRE(*f.Parse({"--use_wandb", "--wandb_project", "fast-ddpm", "--gpus",
                    "0,1,2,3", "--use_ddp", "--deepspeed", "ds.json",
                    "--compile", "--pin_memory", "--world_size", "4",
                    "--batch_size", "5", "--use_wandb"}));
  CHECK(f.batch_size == 5);
  const auto& notes = f.parser.notes();
  REQUIRE(notes.size() == 8);  // --use_wandb twice: one line
  CHECK(notes[0].rfind("--use_wandb: no Weights & Biases here", 0) == 0);
  CHECK(notes[1].rfind("--wandb_project fast-ddpm: ", 0) == 0);
  CHECK(notes[2].rfind("--gpus 0,1,2,3: GPUs are chosen by the launcher", 0) ==
        0);
  CHECK(notes[4].rfind("--deepspeed ds.json: no DeepSpeed here", 0) == 0);
  CHECK(notes[7].rfind("--world_size 4: the world size comes from the "
                       "launcher",
                       0) == 0);
  // --deepspeed's value is optional.
  Cli g;
  REQUIRE(*g.Parse({"--deepspeed", "--epochs", "2"}));
  CHECK(g.epochs == 2);
  CHECK(g.parser.notes().at(0).rfind("--deepspeed: ", 0) == 0);
  Cli h;
  CHECK(h.Error({"--world_size"}) == "--world_size needs a value");
}

TEST_CASE("An unknown option is an error with the closest name", "[flags]") {
  Cli f;
  CHECK(f.Error({"--lrr", "0.1"}) ==
        "unknown option --lrr (did you mean --lr?)");
  Cli g;
  CHECK(g.Error({"--batch_sise=3"}) ==
        "unknown option --batch_sise (did you mean --batch_size?)");
  Cli h;
  CHECK(h.Error({"--frobnicate"}) ==
        "unknown option --frobnicate (see --help)");
  Cli i;
  CHECK(i.Error({"stray"}).rfind("unexpected argument 'stray'", 0) == 0);
  Cli j;
  CHECK(j.Error({"--batch_size", "0"}).find("--batch_size") !=
        std::string::npos);
  Cli k;
  StatusOr<bool> help = k.Parse({"--help"});
  REQUIRE(help.ok());
  CHECK_FALSE(*help);
  CHECK(k.parser.help_text().find("--batch_size") != std::string::npos);
}

TEST_CASE("Flag --amp alone means bf16, a value or a config boolean sets it",
          "[flags]") {
  Cli a;
  REQUIRE(*a.Parse({"--amp", "--epochs", "2"}));
  CHECK(a.amp == "bf16");
  Cli b;
  REQUIRE(*b.Parse({"--amp", "fp16"}));
  CHECK(b.amp == "fp16");
  Cli c;
  REQUIRE(*c.Parse({"--amp"}));
  CHECK(c.amp == "bf16");
  const std::string on = TempFile("amp_on.yaml", "amp: true\n");
  const std::string off = TempFile("amp_off.yaml", "amp: false\n");
  Cli d;
  REQUIRE(*d.Parse({"--config", on}));
  CHECK(d.amp == "bf16");
  Cli e;
  REQUIRE(*e.Parse({"--config", off}));
  CHECK(e.amp == "no");
  Cli f;
  CHECK(f.Error({"--amp", "fp8"}).find("fp8") != std::string::npos);
  Cli g;
  REQUIRE(*g.Parse({"--amp=true"}));
  CHECK(g.amp == "bf16");
  Cli h;
  REQUIRE(*h.Parse({"--amp", "false"}));
  CHECK(h.amp == "no");
  for (auto* p : {&on, &off}) std::remove(p->c_str());
}

// vqa's use: DeepSpeed's JSON as a second config file beside the guide's
// YAML, read through dotted aliases; its other keys noted in one line.
struct DeepSpeedCli : Cli {
  int zero = 0;
  std::string offload = "none";
  int accumulation = 1;
  DeepSpeedCli() {
    app.add_option("--zero", zero)->check(CLI::Range(0, 2));
    app.add_option("--gradient_accumulation_steps", accumulation);
    app.add_option("--offload_optimizer", offload);
    ConfigFileOption ds;
    ds.name = "deepspeed_config";
    ds.note_unknown_keys = true;
    ds.unknown_note = "no counterpart here, ignored";
    parser.AddConfigOption(ds);
    parser.AddAliases({{"deepspeed.stage", "zero", ""},
                       {"zero_optimization.stage", "zero", ""},
                       {"zero_optimization.offload_optimizer.device",
                        "offload_optimizer", ""},
                       {"fp16.enabled", "mixed_precision", "fp16"},
                       {"bf16.enabled", "mixed_precision", "bf16"},
                       {"train_micro_batch_size_per_gpu", "batch_size", ""}});
    parser.AddForeignFlags(
        {{"deepspeed.enabled", ForeignFlag::Arity::kNone, "ZeRO here"},
         {"use_deepspeed", ForeignFlag::Arity::kNone, "ZeRO-2 here"}});
  }
};

TEST_CASE(
    "A second config file: dotted aliases, agreeing values, unknown keys "
    "noted in one line",
    "[config]") {
  const std::string yaml = TempFile("ds_guide.yaml",
                                    "training:\n"
                                    "  batch_size_per_gpu: 16\n"
                                    "  gradient_accumulation_steps: 4\n"
                                    "  fp16: true\n"
                                    "deepspeed:\n"
                                    "  enabled: true\n"
                                    "  stage: 2\n");
  const std::string json =
      TempFile("ds.json",
               "{\n"
               "  \"train_micro_batch_size_per_gpu\": 16,\n"
               "  \"zero_optimization\": {\"stage\": 2,\n"
               "    \"offload_optimizer\": {\"device\": \"cpu\"}},\n"
               "  \"fp16\": {\"enabled\": true, \"loss_scale\": 0},\n"
               "  \"bf16\": {\"enabled\": false},\n"
               "  \"steps_per_print\": 10\n"
               "}\n");
  DeepSpeedCli f;
  f.parser.AddAliases({{"batch_size_per_gpu", "batch_size", ""}});
  REQUIRE(f.Error({"--config", yaml, "--deepspeed_config", json,
                   "--use_deepspeed"}) == "");
  CHECK(f.zero == 2);  // deepspeed.stage: before the deepspeed: section
  CHECK(f.accumulation == 4);
  CHECK(f.offload == "cpu");
  CHECK(f.batch_size == 16);           // both files, the same value
  CHECK(f.mixed_precision == "fp16");  // bf16: false sets nothing
  CHECK(f.parser.ForeignValue("use_deepspeed") == std::string());
  CHECK(f.parser.ForeignValue("deepspeed.enabled") == std::string("true"));
  CHECK_FALSE(f.parser.ForeignValue("multi_gpu").has_value());
  const auto& notes = f.parser.notes();
  REQUIRE(notes.size() == 3);
  CHECK(notes[0] == "--use_deepspeed: ZeRO-2 here");
  CHECK(notes[1] == yaml + ":6: deepspeed.enabled: ZeRO here");
  CHECK(notes[2] == json +
                        ": no counterpart here, ignored: fp16.loss_scale, "
                        "steps_per_print");

  // The files disagree: an error naming both.
  const std::string other =
      TempFile("ds8.json", "{\"train_micro_batch_size_per_gpu\": 8}\n");
  DeepSpeedCli g;
  g.parser.AddAliases({{"batch_size_per_gpu", "batch_size", ""}});
  CHECK(g.Error({"--config", yaml, "--deepspeed_config", other}) ==
        other +
            ":1: key 'train_micro_batch_size_per_gpu' sets --batch_size to "
            "8, but " +
            yaml +
            " set it to 16 ('training.batch_size_per_gpu' at line 2); "
            "make them agree");
  // The command line still wins over both.
  DeepSpeedCli h;
  h.parser.AddAliases({{"batch_size_per_gpu", "batch_size", ""}});
  REQUIRE(*h.Parse(
      {"--config", yaml, "--deepspeed_config", json, "--batch_size", "2"}));
  CHECK(h.batch_size == 2);
  // --config itself still rejects an unknown key.
  DeepSpeedCli i;
  CHECK(i.Error({"--config", json})
            .rfind(json + ":5: unknown key 'fp16.loss_scale'", 0) == 0);
  for (auto* p : {&yaml, &json, &other}) std::remove(p->c_str());
}

TEST_CASE("An option of the trainer's own beats a foreign flag of its name",
          "[flags]") {
  Cli f;
  std::string ds;
  f.app.add_option("--deepspeed_config", ds);
  REQUIRE(*f.Parse({"--deepspeed_config", "ds.json"}));
  CHECK(ds == "ds.json");
  CHECK(f.parser.notes().empty());
  CHECK(f.parser.DescribeAccepted().find("--deepspeed_config") ==
        std::string::npos);
}

TEST_CASE("ParseConfigText: dotted keys, lists and lines", "[config]") {
  auto entries = ParseConfigText(
      "a: 1\nsection:\n  b: [x, y]\n  deeper:\n    c: ~\n", "t.yaml");
  REQUIRE(entries.ok());
  REQUIRE(entries->size() == 3);
  CHECK((*entries)[0].key == "a");
  CHECK((*entries)[1].key == "section.b");
  CHECK((*entries)[1].is_list);
  CHECK((*entries)[1].values == std::vector<std::string>{"x", "y"});
  CHECK((*entries)[1].line == 3);
  CHECK((*entries)[2].key == "section.deeper.c");
  CHECK((*entries)[2].is_null);
  // A list of mappings (the guides' stage_configs): indexed keys.
  auto list_of_maps =
      ParseConfigText("a:\n  - b: 1\n  - b: 2\n    c: [3]\n", "l.yaml");
  REQUIRE(list_of_maps.ok());
  REQUIRE(list_of_maps->size() == 3);
  CHECK((*list_of_maps)[0].key == "a[0].b");
  CHECK((*list_of_maps)[1].key == "a[1].b");
  CHECK((*list_of_maps)[1].line == 3);
  CHECK((*list_of_maps)[2].key == "a[1].c");
  CHECK((*list_of_maps)[2].is_list);
  auto mixed = ParseConfigText("a:\n  - b: 1\n  - 2\n", "m.yaml");
  REQUIRE_FALSE(mixed.ok());
  CHECK(mixed.status().message() ==
        "m.yaml:3: key 'a' mixes mappings with other values");
  auto nested = ParseConfigText("a:\n  - [1]\n", "n.yaml");
  REQUIRE_FALSE(nested.ok());
  CHECK(nested.status().message().rfind("n.yaml:1: key 'a' must hold", 0) == 0);
  // JSON as the guides write it, with // comments (not inside strings).
  auto json = ParseConfigText(
      "{\n  \"p\": \"a//b\",  // a comment\n  \"q\": 4  // 4 per GPU\n}\n",
      "g.json");
  REQUIRE(json.ok());
  REQUIRE(json->size() == 2);
  CHECK((*json)[0].values == std::vector<std::string>{"a//b"});
  CHECK((*json)[1].key == "q");
  CHECK((*json)[1].line == 3);
  CHECK_FALSE(ParseConfigText("[1, 2]", "top.yaml").ok());
}

}  // namespace
}  // namespace ddprun::examples
