// accelerate config files the fuzz target
// (tests/fuzz/accelerate_config_fuzz_target.cc) found to crash
// ddprun-accelerate or take its memory: a scalar of 200 000 digits
// (std::regex recursed per character), JSON nested 100 000 deep (the
// value reader recursed per level), YAML aliases of aliases (a few lines
// that print to gigabytes).
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "ddprun_catch.h"

#include "agent/frontends/accelerate/accelerate_config.h"

namespace ddprun::agent {
namespace {

class ConfigFile {
 public:
  ConfigFile(const std::string& name, const std::string& text) {
    char tmpl[] = "/tmp/ddprun_accelerate_limits_XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/" + name;
    std::ofstream(path_) << text;
  }
  ~ConfigFile() { (void)!system(("rm -rf " + dir_).c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::string path_;
};

const char kHead[] =
    "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\n";

TEST_CASE("accelerate config: a 200 000-digit scalar is a string, not a crash",
          "[accelerate][hostile]") {
  const std::string digits(200000, '1');
  ConfigFile f("default_config.yaml",
               std::string(kHead) + "num_processes: " + digits + "\n");
  StatusOr<AccelerateConfig> c = LoadAccelerateConfig(f.path());
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(),
             Catch::Contains("num_processes must be an integer"));
  CHECK(ResolveYamlPlainScalar(digits).kind == PyValue::Kind::kStr);
  CHECK(ResolveYamlPlainScalar(std::string(200000, 'y')).kind ==
        PyValue::Kind::kStr);
}

TEST_CASE("accelerate config: JSON nested 100 000 deep is refused",
          "[accelerate][hostile]") {
  ConfigFile f("default_config.json",
               "{\"distributed_type\": \"NO\", \"gpu_ids\": " +
                   std::string(100000, '[') + std::string(100000, ']') + "}");
  StatusOr<AccelerateConfig> c = LoadAccelerateConfig(f.path());
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(), Catch::Contains("nested deeper than 64"));
}

TEST_CASE("accelerate config: YAML aliases of aliases are refused",
          "[accelerate][hostile]") {
  // Six levels of ten aliases, on keys accelerate knows: 10^6 copies of
  // the first list's text (25 MB printed) from seven lines.
  const char* keys[] = {"tpu_env",
                        "tpu_name",
                        "tpu_zone",
                        "command_file",
                        "commands",
                        "tpu_vm",
                        "main_training_function"};
  std::string text = std::string(kHead) + keys[0] + ": &a0 [x, x, x, x, x]\n";
  for (int level = 1; level <= 6; ++level) {
    text += std::string(keys[level]) + ": &a" + std::to_string(level) + " [";
    for (int k = 0; k < 10; ++k) {
      text += (k ? ", *a" : "*a") + std::to_string(level - 1);
    }
    text += "]\n";
  }
  ConfigFile f("default_config.yaml", text);
  StatusOr<AccelerateConfig> c = LoadAccelerateConfig(f.path());
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(), Catch::Contains("YAML aliases"));
}

}  // namespace
}  // namespace ddprun::agent
