#include "examples/formats/yaml_config.h"

#include <fstream>
#include <regex>
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

// "name = value" lines: the guides' Python snippets (survival-mace-monai's
// "cache_rate = 0.3"), INI and flat TOML.
const std::regex& AssignmentLine() {
  static const std::regex kLine(
      R"(^\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*=(?!=)\s*(.*?)\s*$)");
  return kLine;
}

// Drops a '#' comment that is outside quotes.
std::string StripComment(const std::string& line) {
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '#' || c == ';') {
      return line.substr(0, i);
    }
  }
  return line;
}

bool IsBlank(const std::string& s) {
  return s.find_first_not_of(" \t\r") == std::string::npos;
}

// True when the first line with content is an assignment (a YAML mapping's
// is "name: ...", a section header "[name]" starts an INI file).
bool LooksLikeAssignments(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    line = StripComment(line);
    if (IsBlank(line)) continue;
    return std::regex_match(line, AssignmentLine()) ||
           std::regex_match(line, std::regex(R"(^\s*\[[A-Za-z_][\w.]*\]\s*$)"));
  }
  return false;
}

// One Python/INI value as a config value: numbers and bare words as they
// are, quoted strings unquoted, True/False as true/false, None as no value,
// [a, b] or (a, b) as a list. An expression is not a value.
Status ParseValue(const std::string& raw, const std::string& where,
                  const std::string& key, ConfigEntry* entry) {
  static const std::regex kWord(R"(^[A-Za-z0-9_.+\-/]+$)");
  static const std::regex kQuoted(R"re(^'([^']*)'$|^"([^"]*)"$)re");
  auto scalar = [&](const std::string& v, std::string* out) {
    std::smatch m;
    if (std::regex_match(v, m, kQuoted)) {
      *out = m[1].matched ? m[1].str() : m[2].str();
    } else if (v == "True" || v == "False") {
      *out = v == "True" ? "true" : "false";
    } else if (std::regex_match(v, kWord)) {
      *out = v;
    } else {
      return false;
    }
    return true;
  };
  auto not_a_value = [&] {
    return InvalidArgumentError(
        where + "'" + key + " = " + raw +
        "' is not a value (a number, a word, a quoted string, True/False or "
        "a list of those)");
  };
  if (raw.empty() || raw == "None") {
    entry->is_null = true;
    return Status::Ok();
  }
  const char open = raw.front();
  if ((open == '[' && raw.back() == ']') ||
      (open == '(' && raw.back() == ')')) {
    entry->is_list = true;
    std::istringstream items(raw.substr(1, raw.size() - 2));
    std::string item;
    while (std::getline(items, item, ',')) {
      const size_t b = item.find_first_not_of(" \t");
      if (b == std::string::npos) continue;  // a trailing comma
      item = item.substr(b, item.find_last_not_of(" \t") - b + 1);
      std::string v;
      if (!scalar(item, &v)) return not_a_value();
      entry->values.push_back(v);
    }
    return Status::Ok();
  }
  std::string v;
  if (!scalar(raw, &v)) return not_a_value();
  entry->values.push_back(v);
  return Status::Ok();
}

StatusOr<std::vector<ConfigEntry>> ParseAssignments(const std::string& text,
                                                    const std::string& name) {
  static const std::regex kSection(R"(^\s*\[([A-Za-z_][\w.]*)\]\s*$)");
  std::vector<ConfigEntry> entries;
  std::istringstream in(text);
  std::string line, prefix;
  for (int number = 1; std::getline(in, line); ++number) {
    line = StripComment(line);
    if (IsBlank(line)) continue;
    const std::string where = name + ":" + std::to_string(number) + ": ";
    std::smatch m;
    if (std::regex_match(line, m, kSection)) {
      prefix = m[1].str() + ".";
      continue;
    }
    if (!std::regex_match(line, m, AssignmentLine())) {
      return InvalidArgumentError(where + "expected 'name = value', got '" +
                                  line + "'");
    }
    ConfigEntry entry;
    entry.key = prefix + m[1].str();
    entry.line = number;
    DDP_RETURN_IF_ERROR(ParseValue(m[2].str(), where, m[1].str(), &entry));
    entries.push_back(std::move(entry));
  }
  return entries;
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
  if (LooksLikeAssignments(text)) return ParseAssignments(text, name);
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
