#include "agent/watch/step_file.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "common/file_util.h"

namespace ddprun::agent {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) {
    s.remove_prefix(1);
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) {
    s.remove_suffix(1);
  }
  return s;
}

// A whole-string number; false when `text` is not one.
bool ParseNumber(std::string_view text, double* out) {
  const std::string s(text);
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*out);
}

bool ParseCount(std::string_view text, int64_t* out) {
  const std::string s(text);
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  *out = std::strtoll(s.c_str(), nullptr, 10);
  return true;
}

}  // namespace

bool ValidScalarName(std::string_view name) {
  if (name.empty() || name.size() > kMaxScalarNameBytes) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) &&
        std::string_view("_.:/-").find(c) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

StepFile ParseStepFile(std::string_view text) {
  StepFile out;
  bool first = true;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line =
        Trim(nl == std::string_view::npos ? text : text.substr(0, nl));
    text =
        nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (first) {
      first = false;
      int64_t steps = 0;
      if (ParseCount(line, &steps)) out.steps = steps;
      continue;
    }
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, sp);
    const std::string_view value = Trim(line.substr(sp + 1));
    if (name == "total_steps") {
      int64_t total = 0;
      if (ParseCount(value, &total)) out.total_steps = total;
      continue;
    }
    double v = 0;
    if (!ValidScalarName(name) || !ParseNumber(value, &v) ||
        out.scalars.size() >= kMaxScalars) {
      continue;
    }
    bool repeated = false;
    for (const auto& [seen, unused] : out.scalars) repeated |= seen == name;
    if (!repeated) out.scalars.emplace_back(std::string(name), v);
  }
  return out;
}

StepFile ReadStepFile(const std::string& path) {
  if (path.empty()) return {};
  StatusOr<std::string> text = ReadRegularFile(path, kMaxStepFileBytes);
  if (!text.ok()) return {};
  return ParseStepFile(*text);
}

}  // namespace ddprun::agent
