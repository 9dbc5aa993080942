#include "examples/formats/jsonl_reader.h"

#include <fstream>
#include <sstream>

namespace ddprun::examples {
namespace {

std::string Where(const std::string& path, const JsonlRecord& r) {
  return path + ":" + std::to_string(r.line) + ": ";
}

}  // namespace

StatusOr<std::vector<JsonlRecord>> ReadJsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open JSONL file " + path);
  std::stringstream text;
  text << in.rdbuf();
  return ParseJsonl(text.str(), path);
}

StatusOr<std::vector<JsonlRecord>> ParseJsonl(const std::string& text,
                                              const std::string& name) {
  std::vector<JsonlRecord> records;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    JsonlRecord record;
    record.line = number;
    record.value =
        nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.value.is_discarded()) {
      return InvalidArgumentError(Where(name, record) + "invalid JSON");
    }
    if (!record.value.is_object()) {
      return InvalidArgumentError(Where(name, record) +
                                  "expected a JSON object per line");
    }
    records.push_back(std::move(record));
  }
  return records;
}

StatusOr<std::string> JsonlString(const std::string& path,
                                  const JsonlRecord& record,
                                  const std::string& key) {
  auto it = record.value.find(key);
  if (it == record.value.end() || !it->is_string()) {
    return InvalidArgumentError(Where(path, record) +
                                "missing or non-string field '" + key + "'");
  }
  return it->get<std::string>();
}

StatusOr<std::vector<double>> JsonlNumbers(const std::string& path,
                                           const JsonlRecord& record,
                                           const std::string& key) {
  auto it = record.value.find(key);
  if (it == record.value.end() || !it->is_array()) {
    return InvalidArgumentError(Where(path, record) +
                                "missing or non-array field '" + key + "'");
  }
  std::vector<double> out;
  for (const auto& v : *it) {
    if (!v.is_number()) {
      return InvalidArgumentError(Where(path, record) + "field '" + key +
                                  "' must hold numbers only");
    }
    out.push_back(v.get<double>());
  }
  return out;
}

bool AppendJsonl(const std::string& path, const nlohmann::json& value) {
  std::ofstream out(path, std::ios::app);
  out << value.dump() << "\n";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace ddprun::examples
