// libFuzzer target over the trainers' config files
// (examples/formats/yaml_config.h: YAML, JSON with // comments, and the
// guides' "name = value" / INI assignments).
//
// Input: a config file's bytes.
//
// Invariants (abort() on violation): an error names the file; every entry
// has a non-empty key and a line in the file; a null entry holds no value,
// a scalar exactly one, a list any number; no crash, no stack overflow, no
// allocation beyond the reader's limits (YAML aliases, long lines).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "examples/formats/yaml_config.h"
#include "fuzz_check.h"

using ddprun::fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddprun::examples;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ddprun::StatusOr<std::vector<ConfigEntry>> entries =
      ParseConfigText(text, "config.yaml");
  if (!entries.ok()) {
    Check(entries.status().message().rfind("config.yaml", 0) == 0,
          "an error that does not name the file");
    return 0;
  }
  const int lines =
      1 + static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  for (const ConfigEntry& e : *entries) {
    Check(!e.key.empty() || !e.values.empty() || e.is_null || e.is_list,
          "an entry of nothing");
    Check(e.line >= 1 && e.line <= lines, "an entry outside the file");
    if (e.is_null) Check(e.values.empty(), "a null entry with values");
    if (!e.is_null && !e.is_list) {
      Check(e.values.size() == 1, "a scalar entry without one value");
    }
  }
  return 0;
}
