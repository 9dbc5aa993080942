#include "examples/common/yaml_config.h"

#include <memory>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace ddprun::examples {

std::string YamlConfig::to_config(const CLI::App* app, bool default_also,
                                  bool write_description,
                                  std::string prefix) const {
  // TOML's "key=value" lines are valid YAML once '=' becomes ': '.
  std::string toml =
      CLI::ConfigTOML().to_config(app, default_also, write_description, prefix);
  std::istringstream in(toml);
  std::ostringstream out;
  std::string line;
  while (std::getline(in, line)) {
    size_t eq = line.find('=');
    if (!line.empty() && line[0] != '#' && eq != std::string::npos) {
      line = line.substr(0, eq) + ": " + line.substr(eq + 1);
    }
    out << line << "\n";
  }
  return out.str();
}

std::vector<CLI::ConfigItem> YamlConfig::from_config(
    std::istream& input) const {
  YAML::Node root;
  try {
    root = YAML::Load(input);
  } catch (const YAML::Exception& e) {
    throw CLI::ConfigError("config file: " + std::string(e.what()));
  }
  std::vector<CLI::ConfigItem> items;
  if (root.IsNull()) return items;
  if (!root.IsMap()) {
    throw CLI::ConfigError(
        "config file: top level must be a mapping of option names");
  }
  for (const auto& kv : root) {
    CLI::ConfigItem item;
    item.name = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (v.IsSequence()) {
      for (const auto& e : v) item.inputs.push_back(e.as<std::string>());
    } else if (v.IsScalar()) {
      item.inputs.push_back(v.as<std::string>());
    } else if (v.IsNull()) {
      item.inputs.push_back("");
    } else {
      throw CLI::ConfigError("config file: key '" + item.name + "' at line " +
                             std::to_string(v.Mark().line + 1) +
                             " must be a scalar or a list, not a mapping");
    }
    items.push_back(std::move(item));
  }
  return items;
}

void AddConfigOption(CLI::App* app) {
  app->config_formatter(std::make_shared<YamlConfig>());
  // A misspelt key must not be silently ignored (CLI11's default).
  app->allow_config_extras(false);
  app->set_config("--config", "",
                  "YAML or JSON file of option values (keys are long option "
                  "names); flags on the command line override it");
}

}  // namespace ddprun::examples
