#include "examples/common/yaml_config.h"

#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace ddprun::examples {
namespace {

std::string At(const std::string& name, const YAML::Mark& mark) {
  return name + ":" + std::to_string(mark.line + 1) + ": ";
}

// Appends the entries under `node` (a mapping) with keys prefixed by
// `prefix` ("" at the top level).
Status Flatten(const YAML::Node& node, const std::string& prefix,
               const std::string& name, std::vector<ConfigEntry>* out) {
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) {
      return InvalidArgumentError(At(name, kv.first.Mark()) +
                                  "keys must be plain names");
    }
    ConfigEntry entry;
    entry.key = prefix + kv.first.as<std::string>();
    entry.line = kv.first.Mark().line + 1;
    const YAML::Node& v = kv.second;
    if (v.IsMap()) {
      DDP_RETURN_IF_ERROR(Flatten(v, entry.key + ".", name, out));
      continue;
    }
    if (v.IsSequence() && v.size() > 0 && v[0].IsMap()) {
      // A list of mappings (a guide's per-stage settings): each mapping's
      // keys under "key[i].".
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].IsMap()) {
          return InvalidArgumentError(At(name, v[i].Mark()) + "key '" +
                                      entry.key +
                                      "' mixes mappings with other values");
        }
        DDP_RETURN_IF_ERROR(Flatten(
            v[i], entry.key + "[" + std::to_string(i) + "].", name, out));
      }
      continue;
    }
    if (v.IsSequence()) {
      entry.is_list = true;
      for (const auto& e : v) {
        if (!e.IsScalar()) {
          return InvalidArgumentError(
              At(name, kv.first.Mark()) + "key '" + entry.key +
              "' must hold a value, a list of values or a list of "
              "mappings");
        }
        entry.values.push_back(e.as<std::string>());
      }
    } else if (v.IsScalar()) {
      entry.values.push_back(v.as<std::string>());
    } else {
      entry.is_null = true;
    }
    out->push_back(std::move(entry));
  }
  return Status::Ok();
}

// JSON as the guides write it carries "// ..." comments, which neither
// JSON nor YAML allows: blanked out (line numbers kept) outside strings.
std::string WithoutSlashComments(std::string text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || text[first] != '{') return text;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n') text[i++] = ' ';
    }
  }
  return text;
}

}  // namespace

StatusOr<std::vector<ConfigEntry>> ParseConfigText(const std::string& text,
                                                   const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(WithoutSlashComments(text));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(At(name, e.mark) + e.msg);
  }
  std::vector<ConfigEntry> entries;
  if (root.IsNull()) return entries;
  if (!root.IsMap()) {
    return InvalidArgumentError(
        name + ": the top level must be a mapping of option names to values");
  }
  try {
    DDP_RETURN_IF_ERROR(Flatten(root, "", name, &entries));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(At(name, e.mark) + e.msg);
  }
  return entries;
}

StatusOr<std::vector<ConfigEntry>> ReadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot read config file " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return ParseConfigText(text.str(), path);
}

}  // namespace ddprun::examples
