#pragma once

#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// One value of a trainer config file. Nested mappings become dotted keys,
// so the guides' sectioned files read as flat option names plus their
// section:
//   training:                       {key "training.batch_size",
//     batch_size: 1            ->    values {"1"}, line 2}
//     stages: [32, 48]              {key "training.stages",
//                                    values {"32", "48"}, is_list, line 3}
//   stage_configs:                  {key "stage_configs[0].name",
//     - name: stage1                 values {"stage1"}, line 5}
// A JSON file (its first character '{') may carry "// ..." comments, as
// the guides write them.
struct ConfigEntry {
  std::string key;                  // dotted path from the top level
  std::vector<std::string> values;  // one for a scalar, n for a list
  bool is_list = false;
  bool is_null = false;  // "key:" or "key: ~" (no value)
  int line = 0;          // 1-based line of the value in the file
};

// Reads a YAML file (JSON is YAML) of option values: a mapping whose values
// are scalars, lists of scalars, lists of mappings (read as "key[i].sub")
// or nested mappings (any depth). Entries come in file order. A file whose
// first line with content is "name = value" (or an INI "[section]") is read
// as assignments instead, as the guides' Python snippets, INI and flat TOML
// write them: '#' / ';' comments, "[section]" prefixes the keys below it
// like a YAML mapping, values are numbers, words, quoted strings,
// True/False (true/false), None (no value) or [a, b] / (a, b) lists;
// anything else (an expression) is an error naming the line. JSON may carry
// "// ..." comments, as the guides write it. Errors (INVALID_ARGUMENT /
// NOT_FOUND, one line naming the file and, where known, the line):
// unreadable file, YAML syntax error, a top level that is not a mapping, a
// list holding lists or both mappings and values.
StatusOr<std::vector<ConfigEntry>> ReadConfigFile(const std::string& path);

// Same from text; `name` is used in error messages.
StatusOr<std::vector<ConfigEntry>> ParseConfigText(const std::string& text,
                                                   const std::string& name);

}  // namespace ddprun::examples
