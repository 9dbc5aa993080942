#include "agent/cli/log_line_prefix.h"

#include <cctype>

namespace ddprun::agent {
namespace {

constexpr char kVariable[] = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE";

bool IsNameStart(char c) {
  return c == '_' || std::isalpha(static_cast<unsigned char>(c));
}

bool IsNameChar(char c) {
  return c == '_' || std::isalnum(static_cast<unsigned char>(c));
}

Status Invalid(const std::string& templ, const std::string& why) {
  return InvalidArgumentError(std::string(kVariable) + "='" + templ +
                              "': " + why);
}

}  // namespace

StatusOr<std::string> LogLinePrefix(const std::string& templ,
                                    const PrefixValues& values) {
  if (templ.empty()) {
    return "[" + values.role + std::to_string(values.local_rank) + "]:";
  }
  std::string out;
  std::string::size_type i = 0;
  while (i < templ.size()) {
    const char c = templ[i];
    if (c != '$' || i + 1 == templ.size()) {
      out += c;
      ++i;
      continue;
    }
    std::string name;
    const char next = templ[i + 1];
    if (next == '$') {
      out += '$';
      i += 2;
      continue;
    }
    if (next == '{') {
      const auto close = templ.find('}', i + 2);
      if (close == std::string::npos) {
        return Invalid(templ, "'${' without a closing '}'");
      }
      name = templ.substr(i + 2, close - i - 2);
      bool valid = !name.empty() && IsNameStart(name[0]);
      for (char n : name) valid = valid && IsNameChar(n);
      if (!valid) return Invalid(templ, "bad placeholder '${" + name + "}'");
      i = close + 1;
    } else if (IsNameStart(next)) {
      auto end = i + 1;
      while (end < templ.size() && IsNameChar(templ[end])) ++end;
      name = templ.substr(i + 1, end - i - 1);
      i = end;
    } else {
      out += c;  // "$ " or "$1": not a placeholder, as Python's Template
      ++i;
      continue;
    }
    if (name == "role_name") {
      out += values.role;
    } else if (name == "rank") {
      out += std::to_string(values.rank);
    } else if (name == "local_rank") {
      out += std::to_string(values.local_rank);
    } else if (name == "hostname") {
      out += values.hostname;
    } else if (name == "node_rank") {
      out += std::to_string(values.node_rank);
    } else if (name == "local_world_size") {
      out += std::to_string(values.local_world_size);
    } else {
      return Invalid(templ, "unknown placeholder '" + name +
                                "' (known: ${role_name}, ${rank}, "
                                "${local_rank}, ${hostname}, ${node_rank}, "
                                "${local_world_size})");
    }
  }
  return out;
}

}  // namespace ddprun::agent
