#pragma once

#include <functional>
#include <map>
#include <string>

namespace ddprun::worker::testing {

// A getenv over a fixed map, for the worker's env-parsing functions that
// take one: a missing name reads as unset (nullptr). `vars` must outlive
// the returned function.
inline std::function<const char*(const char*)> MapGetenv(
    const std::map<std::string, std::string>& vars) {
  return [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace ddprun::worker::testing
