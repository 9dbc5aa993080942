// Config files the fuzz target (tests/fuzz/yaml_config_fuzz_target.cc)
// found to crash a trainer or take its memory: a long line (std::regex
// recursed per character), YAML aliases of aliases (a few lines that
// flatten to millions of entries), a chain of aliases nested without end.
#include <string>

#include "ddprun_catch.h"

#include "examples/formats/yaml_config.h"

namespace ddprun::examples {
namespace {

TEST_CASE("ParseConfigText: a line of 200 000 characters is read, not a crash",
          "[config][hostile]") {
  const std::string value(200000, '7');
  auto assignment = ParseConfigText("batch_size = " + value + "\n", "a.py");
  REQUIRE(assignment.ok());
  CHECK((*assignment)[0].values.at(0) == value);
  // The first line of any config is tried as an assignment first.
  auto yaml = ParseConfigText(
      "note: " + std::string(200000, 'x') + "\nepochs: 3\n", "a.yaml");
  REQUIRE(yaml.ok());
  CHECK(yaml->size() == 2);
  auto word =
      ParseConfigText("name = '" + std::string(200000, 'w') + "'\n", "b.py");
  REQUIRE(word.ok());
  CHECK((*word)[0].values.at(0).size() == 200000);
}

TEST_CASE(
    "ParseConfigText: YAML aliases that would flatten to millions of "
    "entries are refused",
    "[config][hostile]") {
  // Six levels of ten aliases each: 10^6 entries from 7 lines.
  std::string text =
      "l0: &l0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, "
      "h: 8, i: 9, j: 10}\n";
  for (int level = 1; level <= 6; ++level) {
    const std::string prev = "*l" + std::to_string(level - 1);
    text += "l" + std::to_string(level) + ": &l" + std::to_string(level) + " {";
    for (char k = 'a'; k <= 'j'; ++k) {
      text += std::string(k == 'a' ? "" : ", ") + k + ": " + prev;
    }
    text += "}\n";
  }
  auto entries = ParseConfigText(text, "bomb.yaml");
  REQUIRE_FALSE(entries.ok());
  CHECK_THAT(entries.status().message(),
             Catch::Matchers::StartsWith("bomb.yaml:") &&
                 Catch::Contains("YAML aliases of aliases"));
  // An alias used a few times, as the guides' stage settings do, is fine.
  auto stages = ParseConfigText(
      "base: &base {lr: 0.001, epochs: 5}\nstage_configs:\n  - *base\n"
      "  - *base\n",
      "stages.yaml");
  REQUIRE(stages.ok());
  CHECK(stages->size() == 6);
}

TEST_CASE("ParseConfigText: mappings nested past 64 levels are refused",
          "[config][hostile]") {
  std::string text = "k0: &k0 {v: 1}\n";
  for (int i = 1; i <= 70; ++i) {
    text += "k" + std::to_string(i) + ": &k" + std::to_string(i) + " {n: *k" +
            std::to_string(i - 1) + "}\n";
  }
  auto entries = ParseConfigText(text, "deep.yaml");
  REQUIRE_FALSE(entries.ok());
  CHECK_THAT(entries.status().message(), Catch::Contains("nested deeper"));
}

}  // namespace
}  // namespace ddprun::examples
