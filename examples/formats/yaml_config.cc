#include "examples/formats/yaml_config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace ddprun::examples {
namespace {

std::string At(const std::string& name, const YAML::Mark& mark) {
  return name + ":" + std::to_string(mark.line + 1) + ": ";
}

// Beyond yaml_config.h's errors: what one config may hold, mappings
// nested this deep (YAML aliases nest without adding lines: a chain of
// them recursed without end), and this many bytes of keys and values in
// all (aliases repeat a mapping or a list without repeating its text: a
// small file of aliases of aliases would flatten to gigabytes).
constexpr int kMaxDepth = 64;
constexpr size_t kMaxBytes = size_t{1} << 20;

struct FlattenLimits {
  size_t bytes_left = kMaxBytes;
  // Takes `n` bytes (and a little for each value); false past the limit.
  bool Spend(size_t n) {
    n += 16;
    if (n > bytes_left) return false;
    bytes_left -= n;
    return true;
  }
};

Status TooLarge(const std::string& name, const YAML::Mark& mark) {
  return InvalidArgumentError(
      At(name, mark) + "mappings nested deeper than " +
      std::to_string(kMaxDepth) + " levels or over " +
      std::to_string(kMaxBytes >> 20) +
      " MiB of keys and values in all (YAML aliases of aliases?)");
}

// Appends the entries under `node` (a mapping) with keys prefixed by
// `prefix` ("" at the top level), `depth` mappings down.
Status Flatten(const YAML::Node& node, const std::string& prefix,
               const std::string& name, int depth, FlattenLimits* limits,
               std::vector<ConfigEntry>* out) {
  if (depth > kMaxDepth) return TooLarge(name, node.Mark());
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) {
      return InvalidArgumentError(At(name, kv.first.Mark()) +
                                  "keys must be plain names");
    }
    const YAML::Node& v = kv.second;
    ConfigEntry entry;
    entry.key = prefix + kv.first.as<std::string>();
    entry.line = kv.first.Mark().line + 1;
    if (!limits->Spend(entry.key.size())) {
      return TooLarge(name, kv.first.Mark());
    }
    if (v.IsMap()) {
      DDP_RETURN_IF_ERROR(
          Flatten(v, entry.key + ".", name, depth + 1, limits, out));
      continue;
    }
    if (v.IsSequence() && v.size() > 0 && v[0].IsMap()) {
      // A list of mappings (a guide's per-stage settings): each mapping's
      // keys under "key[i].".
      for (size_t i = 0; i < v.size(); ++i) {
        if (!limits->Spend(0)) return TooLarge(name, v[i].Mark());
        if (!v[i].IsMap()) {
          return InvalidArgumentError(At(name, v[i].Mark()) + "key '" +
                                      entry.key +
                                      "' mixes mappings with other values");
        }
        DDP_RETURN_IF_ERROR(Flatten(v[i],
                                    entry.key + "[" + std::to_string(i) + "].",
                                    name, depth + 1, limits, out));
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
        if (!limits->Spend(entry.values.back().size())) {
          return TooLarge(name, e.Mark());
        }
      }
    } else if (v.IsScalar()) {
      entry.values.push_back(v.as<std::string>());
      if (!limits->Spend(entry.values.back().size())) {
        return TooLarge(name, v.Mark());
      }
    } else {
      entry.is_null = true;
    }
    out->push_back(std::move(entry));
  }
  return Status::Ok();
}

// Character classes of the lines below. Matched by hand, not with
// std::regex: it recurses per character, and a config line of 100 000
// characters overflowed the stack.
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' ||
         c == '\f';
}
bool IsNameStart(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
bool IsWordChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
size_t SkipSpaces(const std::string& s, size_t i) {
  while (i < s.size() && IsSpace(s[i])) ++i;
  return i;
}

// "name = value" lines: the guides' Python snippets (survival-mace-monai's
// "cache_rate = 0.3"), INI and flat TOML. A name is [A-Za-z_][\w.-]*;
// "name == x" is not an assignment; the value is trimmed and holds no line
// break.
bool MatchAssignment(const std::string& line, std::string* name,
                     std::string* value) {
  size_t i = SkipSpaces(line, 0);
  const size_t start = i;
  if (i == line.size() || !IsNameStart(line[i])) return false;
  while (i < line.size() &&
         (IsWordChar(line[i]) || line[i] == '.' || line[i] == '-')) {
    ++i;
  }
  const size_t end = i;
  i = SkipSpaces(line, i);
  if (i == line.size() || line[i] != '=') return false;
  if (i + 1 < line.size() && line[i + 1] == '=') return false;
  const size_t b = SkipSpaces(line, i + 1);
  size_t e = line.size();
  while (e > b && IsSpace(line[e - 1])) --e;
  const std::string v = line.substr(b, e - b);
  if (v.find_first_of("\r\n") != std::string::npos) return false;
  if (name != nullptr) *name = line.substr(start, end - start);
  if (value != nullptr) *value = v;
  return true;
}

// "[section]": a name [A-Za-z_][\w.]* in brackets, blanks around.
bool MatchSection(const std::string& line, std::string* section) {
  size_t i = SkipSpaces(line, 0);
  if (i == line.size() || line[i] != '[') return false;
  const size_t start = ++i;
  if (i == line.size() || !IsNameStart(line[i])) return false;
  while (i < line.size() && (IsWordChar(line[i]) || line[i] == '.')) ++i;
  if (i == line.size() || line[i] != ']') return false;
  const size_t end = i;
  if (SkipSpaces(line, i + 1) != line.size()) return false;
  if (section != nullptr) *section = line.substr(start, end - start);
  return true;
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
    return MatchAssignment(line, nullptr, nullptr) ||
           MatchSection(line, nullptr);
  }
  return false;
}

// One Python/INI value as a config value: numbers and bare words as they
// are, quoted strings unquoted, True/False as true/false, None as no value,
// [a, b] or (a, b) as a list. An expression is not a value.
Status ParseValue(const std::string& raw, const std::string& where,
                  const std::string& key, ConfigEntry* entry) {
  // 'text' or "text" with no quote of its kind inside.
  auto quoted = [](const std::string& v) {
    return v.size() >= 2 && (v.front() == '\'' || v.front() == '"') &&
           v.back() == v.front() && v.find(v.front(), 1) == v.size() - 1;
  };
  // [A-Za-z0-9_.+-/]+
  auto word = [](const std::string& v) {
    return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) {
      return IsWordChar(c) || c == '.' || c == '+' || c == '-' || c == '/';
    });
  };
  auto scalar = [&](const std::string& v, std::string* out) {
    if (quoted(v)) {
      *out = v.substr(1, v.size() - 2);
    } else if (v == "True" || v == "False") {
      *out = v == "True" ? "true" : "false";
    } else if (word(v)) {
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
  std::vector<ConfigEntry> entries;
  std::istringstream in(text);
  std::string line, prefix;
  for (int number = 1; std::getline(in, line); ++number) {
    line = StripComment(line);
    if (IsBlank(line)) continue;
    const std::string where = name + ":" + std::to_string(number) + ": ";
    std::string section, key, value;
    if (MatchSection(line, &section)) {
      prefix = section + ".";
      continue;
    }
    if (!MatchAssignment(line, &key, &value)) {
      return InvalidArgumentError(where + "expected 'name = value', got '" +
                                  line + "'");
    }
    ConfigEntry entry;
    entry.key = prefix + key;
    entry.line = number;
    DDP_RETURN_IF_ERROR(ParseValue(value, where, key, &entry));
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
    FlattenLimits limits;
    DDP_RETURN_IF_ERROR(Flatten(root, "", name, 0, &limits, &entries));
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
