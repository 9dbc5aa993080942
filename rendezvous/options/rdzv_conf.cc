#include "rendezvous/options/rdzv_conf.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace ddprun::rendezvous {
namespace {

using Kind = RdzvConfKind;

std::vector<RdzvConfKey> MakeKeys() {
  return {
      // ddprun's rendezvous (rendezvous/README.md has their defaults).
      {"join_timeout", Kind::kSeconds, false},
      {"last_call_timeout", Kind::kSeconds, false},
      {"heartbeat_interval", Kind::kSeconds, false},
      {"heartbeat_timeout", Kind::kSeconds, false},
      {"connection_lost_timeout", Kind::kSeconds, false},
      {"bad_host_failures", Kind::kCount, false},
      {"bad_host_window", Kind::kSeconds, false},
      {"bad_host_cooldown", Kind::kSeconds, false},
      {"is_host", Kind::kBool, false},
      {"token", Kind::kText, false},
      {"token_file", Kind::kFile, false},
      {"tls_ca", Kind::kFile, false},
      {"tls_cert", Kind::kFile, false},
      {"tls_key", Kind::kFile, false},
      {"standby_port", Kind::kPort, false},
      // torchrun's c10d/static keys that ddprun's rendezvous has no use for.
      {"close_timeout", Kind::kSeconds, true},
      {"read_timeout", Kind::kSeconds, true},
      {"timeout", Kind::kSeconds, true},
      {"keep_alive_interval", Kind::kSeconds, true},
      {"keep_alive_max_attempt", Kind::kCount, true},
      {"store_type", Kind::kText, true},
      {"use_libuv", Kind::kBool, true},
  };
}

const RdzvConfKey* FindKey(const std::string& name) {
  for (const RdzvConfKey& k : RdzvConfKeys()) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

Status Bad(const std::string& source, const std::string& key,
           const std::string& value, const std::string& expected) {
  return InvalidArgumentError(source + " " + key + "=" + value + ": expected " +
                              expected);
}

StatusOr<double> ParseSeconds(const std::string& source, const std::string& key,
                              const std::string& value) {
  char* end = nullptr;
  const double seconds = std::strtod(value.c_str(), &end);
  if (value.empty() || std::isspace(static_cast<unsigned char>(value[0])) ||
      *end != '\0' || !(seconds >= 0.001) || seconds > 1e6) {
    // Under 1 ms, a timeout or interval would be 0 ms: a heartbeat loop
    // that never waits.
    return Bad(source, key, value, "a number of seconds in 0.001..1000000");
  }
  return seconds;
}

StatusOr<long> ParseCount(const std::string& source, const std::string& key,
                          const std::string& value) {
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || std::isspace(static_cast<unsigned char>(value[0])) ||
      *end != '\0' || n < 0 || n > 1000) {
    return Bad(source, key, value, "a count in 0..1000");
  }
  return n;
}

StatusOr<int> ParsePort(const std::string& source, const std::string& key,
                        const std::string& value) {
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || !std::isdigit(static_cast<unsigned char>(value[0])) ||
      *end != '\0' || n < 1 || n > 65535) {
    return Bad(source, key, value, "a TCP port in 1..65535");
  }
  return static_cast<int>(n);
}

StatusOr<bool> ParseBool(const std::string& source, const std::string& key,
                         const std::string& value) {
  std::string v = value;
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  for (const char* yes : {"1", "true", "t", "yes", "y", "on"}) {
    if (v == yes) return true;
  }
  for (const char* no : {"0", "false", "f", "no", "n", "off"}) {
    if (v == no) return false;
  }
  return Bad(source, key, value, "true or false");
}

Status CheckValue(const std::string& source, const RdzvConfKey& key,
                  const std::string& value) {
  switch (key.kind) {
    case Kind::kSeconds:
      return ParseSeconds(source, key.name, value).status();
    case Kind::kCount:
      return ParseCount(source, key.name, value).status();
    case Kind::kBool:
      return ParseBool(source, key.name, value).status();
    case Kind::kPort:
      return ParsePort(source, key.name, value).status();
    case Kind::kText:
      if (value.empty()) return Bad(source, key.name, value, "a value");
      return Status::Ok();
    case Kind::kFile:
      if (::access(value.c_str(), R_OK) != 0) {
        return Bad(source, key.name, value, "a readable file");
      }
      return Status::Ok();
  }
  return Status::Ok();
}

// The value of `key` in `conf` as `parse` reads it; nullopt when absent.
template <typename T>
StatusOr<std::optional<T>> Get(const RdzvConf& conf, const std::string& key,
                               StatusOr<T> (*parse)(const std::string&,
                                                    const std::string&,
                                                    const std::string&)) {
  auto it = conf.find(key);
  if (it == conf.end()) return std::optional<T>();
  DDP_ASSIGN_OR_RETURN(T value, parse("rdzv_conf", key, it->second));
  return std::optional<T>(std::move(value));
}

}  // namespace

const std::vector<RdzvConfKey>& RdzvConfKeys() {
  static const std::vector<RdzvConfKey>* keys =
      new std::vector<RdzvConfKey>(MakeKeys());
  return *keys;
}

Status ValidateRdzvConf(const std::string& source, const RdzvConf& conf,
                        std::vector<std::string>* warnings) {
  for (const auto& [name, value] : conf) {
    const RdzvConfKey* key = FindKey(name);
    if (key == nullptr) {
      std::string known;
      for (const RdzvConfKey& k : RdzvConfKeys()) {
        known += (known.empty() ? "" : ", ") + std::string(k.name);
      }
      return InvalidArgumentError(source + ": unknown key '" + name +
                                  "' (known keys: " + known + ")");
    }
    DDP_RETURN_IF_ERROR(CheckValue(source, *key, value));
    if (key->no_effect && warnings != nullptr) {
      warnings->push_back(source + " " + name + "=" + value +
                          " is accepted for torchrun compatibility but has "
                          "no effect in ddprun");
    }
  }
  return Status::Ok();
}

StatusOr<std::optional<std::chrono::milliseconds>> RdzvConfSeconds(
    const RdzvConf& conf, const std::string& key) {
  DDP_ASSIGN_OR_RETURN(std::optional<double> seconds,
                       Get(conf, key, ParseSeconds));
  if (!seconds.has_value()) return std::optional<std::chrono::milliseconds>();
  return std::optional<std::chrono::milliseconds>(
      std::chrono::milliseconds(static_cast<int64_t>(*seconds * 1000)));
}

StatusOr<std::optional<long>> RdzvConfCount(const RdzvConf& conf,
                                            const std::string& key) {
  return Get(conf, key, ParseCount);
}

StatusOr<std::optional<bool>> RdzvConfBool(const RdzvConf& conf,
                                           const std::string& key) {
  return Get(conf, key, ParseBool);
}

StatusOr<std::optional<int>> RdzvConfPort(const RdzvConf& conf,
                                          const std::string& key) {
  return Get(conf, key, ParsePort);
}

}  // namespace ddprun::rendezvous
