#pragma once

#include <istream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ddprun::examples {

// A CLI11 config reader for YAML files (and therefore JSON files, which YAML
// parses). Top-level keys name long options without the dashes
// ("batch_size: 8"); sequences give several values ("stages: [32, 48]").
// CLI11 applies config values only to options not given on the command line,
// so flags override the file. AddConfigOption makes unknown keys an error.
// Throws CLI::ConfigError with the file's line on a YAML syntax error or a
// nested mapping.
class YamlConfig : public CLI::Config {
 public:
  std::string to_config(const CLI::App* app, bool default_also,
                        bool write_description,
                        std::string prefix) const override;
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
};

// Adds `--config FILE` to `app` with the YAML/JSON reader above.
void AddConfigOption(CLI::App* app);

}  // namespace ddprun::examples
