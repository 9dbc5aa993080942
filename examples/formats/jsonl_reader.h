#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// One JSON object per line (JSON Lines). Blank lines are skipped.
struct JsonlRecord {
  int line = 0;  // 1-based line in the file.
  nlohmann::json value;
};

// Reads `path`. Errors: NOT_FOUND if it cannot be opened; INVALID_ARGUMENT
// "<path>:<line>: ..." for a line that is not a JSON object.
StatusOr<std::vector<JsonlRecord>> ReadJsonl(const std::string& path);
// The same from `text`; `name` stands for the path in errors.
StatusOr<std::vector<JsonlRecord>> ParseJsonl(const std::string& text,
                                              const std::string& name);

// Field `key` of `record` as a string / number / array; INVALID_ARGUMENT
// "<path>:<line>: missing or non-string field 'question'" otherwise.
StatusOr<std::string> JsonlString(const std::string& path,
                                  const JsonlRecord& record,
                                  const std::string& key);
StatusOr<std::vector<double>> JsonlNumbers(const std::string& path,
                                           const JsonlRecord& record,
                                           const std::string& key);

// Appends `value` as one line to `path` (creating it); false on I/O error.
bool AppendJsonl(const std::string& path, const nlohmann::json& value);

}  // namespace ddprun::examples
