#include "agent/cli/cli_values.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <random>

namespace ddprun::agent {
namespace {

Status Invalid(const std::string& source, const std::string& text,
               const std::string& why) {
  return InvalidArgumentError(source + ": invalid value '" + text + "' (" +
                              why + ")");
}

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string::size_type start = 0;
  while (true) {
    auto pos = text.find(sep, start);
    parts.push_back(text.substr(start, pos - start));
    if (pos == std::string::npos) return parts;
    start = pos + 1;
  }
}

std::string Trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

bool ToLong(const std::string& text, long* out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) {
    return false;
  }
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

struct SignalName {
  const char* name;
  int number;
};

constexpr SignalName kSignals[] = {
    {"SIGHUP", SIGHUP},       {"SIGINT", SIGINT},   {"SIGQUIT", SIGQUIT},
    {"SIGILL", SIGILL},       {"SIGTRAP", SIGTRAP}, {"SIGABRT", SIGABRT},
    {"SIGBUS", SIGBUS},       {"SIGFPE", SIGFPE},   {"SIGKILL", SIGKILL},
    {"SIGUSR1", SIGUSR1},     {"SIGSEGV", SIGSEGV}, {"SIGUSR2", SIGUSR2},
    {"SIGPIPE", SIGPIPE},     {"SIGALRM", SIGALRM}, {"SIGTERM", SIGTERM},
    {"SIGCHLD", SIGCHLD},     {"SIGCONT", SIGCONT}, {"SIGSTOP", SIGSTOP},
    {"SIGTSTP", SIGTSTP},     {"SIGTTIN", SIGTTIN}, {"SIGTTOU", SIGTTOU},
    {"SIGURG", SIGURG},       {"SIGXCPU", SIGXCPU}, {"SIGXFSZ", SIGXFSZ},
    {"SIGVTALRM", SIGVTALRM}, {"SIGPROF", SIGPROF}, {"SIGWINCH", SIGWINCH},
    {"SIGIO", SIGIO},         {"SIGPWR", SIGPWR},   {"SIGSYS", SIGSYS},
};

}  // namespace

StatusOr<long> ParseIntValue(const std::string& source,
                             const std::string& text) {
  long v = 0;
  if (!ToLong(text, &v)) return Invalid(source, text, "not an integer");
  return v;
}

StatusOr<double> ParseDoubleValue(const std::string& source,
                                  const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) {
    return Invalid(source, text, "not a number");
  }
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v)) {
    return Invalid(source, text, "not a number");
  }
  return v;
}

StatusOr<bool> ParseBoolValue(const std::string& source,
                              const std::string& text) {
  long v = 0;
  if (ToLong(text, &v)) return v != 0;
  std::string lower;
  for (char c : text) {
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "no" || lower == "off") return false;
  return Invalid(source, text, "expected 0 or 1");
}

StatusOr<NodeRange> ParseNnodes(const std::string& source,
                                const std::string& text) {
  const std::vector<std::string> parts = Split(text, ':');
  long lo = 0, hi = 0;
  const char* why = "expected N or MIN:MAX with 0 < MIN <= MAX";
  if (parts.size() == 1) {
    if (!ToLong(parts[0], &lo)) return Invalid(source, text, why);
    hi = lo;
  } else if (parts.size() == 2) {
    if (!ToLong(parts[0], &lo) || !ToLong(parts[1], &hi)) {
      return Invalid(source, text, why);
    }
  } else {
    return Invalid(source, text, why);
  }
  if (lo <= 0 || lo > hi || hi > 1000000) return Invalid(source, text, why);
  return NodeRange{static_cast<int>(lo), static_cast<int>(hi)};
}

StatusOr<StdSpec> ParseStdSpec(const std::string& source,
                               const std::string& text) {
  const char* why =
      "expected 0-3 (1=stdout, 2=stderr, 3=both) or LOCAL_RANK:MASK pairs "
      "such as 0:1,1:2";
  StdSpec spec;
  long v = 0;
  if (ToLong(text, &v)) {
    if (v < 0 || v > 3) return Invalid(source, text, why);
    spec.all = static_cast<StdStreams>(v);
    return spec;
  }
  spec.is_map = true;
  for (const std::string& item : Split(text, ',')) {
    const std::vector<std::string> kv = Split(item, ':');
    long rank = 0, mask = 0;
    if (kv.size() != 2 || !ToLong(kv[0], &rank) || !ToLong(kv[1], &mask) ||
        rank < 0 || mask < 0 || mask > 3) {
      return Invalid(source, text, why);
    }
    if (!spec.per_rank
             .emplace(static_cast<int>(rank), static_cast<StdStreams>(mask))
             .second) {
      return Invalid(source, text,
                     "local rank " + std::to_string(rank) + " given twice");
    }
  }
  return spec;
}

StatusOr<std::map<std::string, std::string>> ParseRdzvConf(
    const std::string& source, const std::string& text) {
  std::map<std::string, std::string> conf;
  std::string body = Trim(text);
  // One matching pair of quotes around the whole value is its content:
  // torch's own tests pass --rdzv-conf='k=v,...' with the quotes in it.
  if (body.size() >= 2 && (body[0] == '\'' || body[0] == '"') &&
      body.back() == body[0]) {
    body = Trim(body.substr(1, body.size() - 2));
  }
  if (body.empty()) return conf;
  for (const std::string& item : Split(body, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos) {
      return Invalid(source, text, "'" + item + "' is not key=value");
    }
    std::string key = Trim(item.substr(0, eq));
    std::string value = Trim(item.substr(eq + 1));
    if (key.empty()) return Invalid(source, text, "empty key");
    if (value.empty()) {
      return Invalid(source, text, "key '" + key + "' has no value");
    }
    conf[key] = value;
  }
  return conf;
}

StatusOr<int> ParsePort(const std::string& source, const std::string& text,
                        bool allow_zero) {
  long v = 0;
  if (!ToLong(text, &v)) return Invalid(source, text, "not a port number");
  if (v < (allow_zero ? 0 : 1) || v > 65535) {
    return Invalid(source, text,
                   allow_zero ? "port must be 0..65535"
                              : "port must be "
                                "1..65535");
  }
  return static_cast<int>(v);
}

StatusOr<HostPort> ParseHostPort(const std::string& source,
                                 const std::string& text) {
  HostPort hp;
  std::string port_text;
  bool has_port = false;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    if (close == std::string::npos) {
      return Invalid(source, text, "missing ']' after IPv6 address");
    }
    hp.host = text.substr(1, close - 1);
    std::string rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':')
        return Invalid(source, text, "expected ':' after ']'");
      port_text = rest.substr(1);
      has_port = true;
    }
  } else {
    auto colon = text.find(':');
    if (colon != std::string::npos &&
        text.find(':', colon + 1) != std::string::npos) {
      return Invalid(source, text, "write IPv6 addresses as [addr]:port");
    }
    hp.host = text.substr(0, colon);
    if (colon != std::string::npos) {
      port_text = text.substr(colon + 1);
      has_port = true;
    }
  }
  if (hp.host.empty()) return Invalid(source, text, "empty host");
  if (hp.host.find_first_of("[]") != std::string::npos) {
    return Invalid(source, text, "brackets inside the host");
  }
  if (has_port) {
    auto port = ParsePort(source, port_text, true);
    if (!port.ok()) return Invalid(source, text, "port must be 0..65535");
    hp.port = *port;
  }
  return hp;
}

StatusOr<std::vector<int>> ParseSignalList(const std::string& source,
                                           const std::string& text) {
  std::vector<int> out;
  for (const std::string& raw : Split(text, ',')) {
    const std::string name = Trim(raw);
    int number = -1;
    for (const SignalName& s : kSignals) {
      if (name == s.name) number = s.number;
    }
    if (number < 0) {
      return Invalid(source, text, "unknown signal '" + name + "'");
    }
    if (number == SIGKILL || number == SIGSTOP) {
      return Invalid(source, text, name + " cannot be caught");
    }
    bool seen = false;
    for (int s : out) seen = seen || s == number;
    if (!seen) out.push_back(number);
  }
  return out;
}

StatusOr<std::set<int>> ParseRankSet(const std::string& source,
                                     const std::string& text) {
  std::set<int> ranks;
  for (const std::string& item : Split(text, ',')) {
    long v = 0;
    if (!ToLong(Trim(item), &v) || v < 0) {
      return Invalid(source, text, "expected local ranks such as 0,1");
    }
    ranks.insert(static_cast<int>(v));
  }
  return ranks;
}

StatusOr<std::vector<std::string>> ParseFilterList(const std::string& source,
                                                   const std::string& text) {
  std::vector<std::string> out;
  std::string current;
  for (std::string::size_type i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != ',') {
      current += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      current += ',';  // ",," is an escaped comma
      ++i;
    } else {
      if (current.empty()) return Invalid(source, text, "empty filter");
      out.push_back(current);
      current.clear();
    }
  }
  return out;
}

std::string RandomUuid4() {
  std::random_device rd;
  unsigned char b[16];
  for (int i = 0; i < 16; i += 4) {
    const unsigned int r = rd();
    for (int j = 0; j < 4; ++j)
      b[i + j] = static_cast<unsigned char>(r >> (8 * j));
  }
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[b[i] >> 4];
    out += kHex[b[i] & 0x0f];
  }
  return out;
}

}  // namespace ddprun::agent
