// Config files written as "name = value" lines (the guides' Python
// snippets, INI, flat TOML), read by ParseConfigText beside YAML.
#include <string>
#include <vector>

#include "ddprun_catch.h"

#include "examples/formats/yaml_config.h"

namespace ddprun::examples {
namespace {

TEST_CASE("ParseConfigText: the guide's Python snippet as written",
          "[config]") {
  // survival-mace-monai.md, "SmartCacheDataset Configuration" (one preset).
  auto entries = ParseConfigText(
      "# Conservative memory usage (suitable for limited GPU memory)\n"
      "cache_rate = 0.3\n"
      "replace_rate = 0.2\n",
      "cache.py");
  INFO(entries.status());
  REQUIRE(entries.ok());
  REQUIRE(entries->size() == 2);
  CHECK((*entries)[0].key == "cache_rate");
  CHECK((*entries)[0].values == std::vector<std::string>{"0.3"});
  CHECK((*entries)[0].line == 2);
  CHECK((*entries)[1].key == "replace_rate");
  CHECK((*entries)[1].line == 3);
}

TEST_CASE("ParseConfigText: INI sections, Python literals and lists",
          "[config]") {
  auto entries = ParseConfigText(
      "lr = 2e-4  # learning rate\n"
      "[data]\n"
      "csv_path = 'data/dataset.csv'\n"
      "image_size = (256, 256, 64)\n"
      "use_smart_cache = True\n"
      "; an INI comment\n"
      "resnet = resnet50\n"
      "output = None\n",
      "run.ini");
  INFO(entries.status());
  REQUIRE(entries.ok());
  REQUIRE(entries->size() == 6);
  CHECK((*entries)[0].key == "lr");
  CHECK((*entries)[0].values == std::vector<std::string>{"2e-4"});
  CHECK((*entries)[1].key == "data.csv_path");
  CHECK((*entries)[1].values == std::vector<std::string>{"data/dataset.csv"});
  CHECK((*entries)[2].is_list);
  CHECK((*entries)[2].values == std::vector<std::string>{"256", "256", "64"});
  CHECK((*entries)[3].values == std::vector<std::string>{"true"});
  CHECK((*entries)[4].values == std::vector<std::string>{"resnet50"});
  CHECK((*entries)[4].line == 7);
  CHECK((*entries)[5].is_null);
}

TEST_CASE("ParseConfigText: an expression or a stray line names the line",
          "[config]") {
  // The guide's "Optimal Worker Configuration" is code, not a value.
  auto expression = ParseConfigText(
      "# Rule of thumb\nnum_workers = min(4 * num_gpus, cpu_count)\n", "w.py");
  REQUIRE_FALSE(expression.ok());
  CHECK(expression.status().message() ==
        "w.py:2: 'num_workers = min(4 * num_gpus, cpu_count)' is not a value "
        "(a number, a word, a quoted string, True/False or a list of those)");
  auto stray = ParseConfigText("a = 1\nb: 2\n", "mixed.cfg");
  REQUIRE_FALSE(stray.ok());
  CHECK(stray.status().message() ==
        "mixed.cfg:2: expected 'name = value', got 'b: 2'");
  // YAML stays YAML.
  auto yaml = ParseConfigText("a: b = c\n", "y.yaml");
  REQUIRE(yaml.ok());
  CHECK((*yaml)[0].values == std::vector<std::string>{"b = c"});
}

}  // namespace
}  // namespace ddprun::examples
