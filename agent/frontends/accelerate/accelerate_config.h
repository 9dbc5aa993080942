#pragma once

#include <map>
#include <string>

#include "agent/frontends/py_value.h"
#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// accelerate's config file (what `accelerate config` writes), loaded and
// checked as ClusterConfig.from_yaml_file / from_json_file do
// (accelerate/commands/config/config_args.py): JSON when the name ends in
// .json, else YAML with PyYAML's safe_load typing (plain `yes` is True,
// `0755` an octal int, `1e8` a string).
struct AccelerateConfig {
  std::string path;
  // Top-level values, with process_config's and ClusterConfig's defaults
  // filled in (num_processes -1, or 1 for distributed_type NO; machine_rank
  // 0; num_machines 1; rdzv_backend static; use_cpu/debug False; the legacy
  // `fp16: true` as mixed_precision fp16; ...).
  std::map<std::string, PyValue> values;
  // The *_config sections (fsdp_config, fp8_config, dynamo_config,
  // parallelism_config, deepspeed_config, megatron_lm_config,
  // mpirun_config): key -> value; absent sections are empty. A legacy
  // top-level `dynamo_backend: X` becomes dynamo_config {dynamo_backend: X}
  // (none for NO).
  std::map<std::string, std::map<std::string, PyValue>> sections;

  const PyValue& Get(const std::string& key) const;
};

// Errors (kInvalidArgument, one line naming the file): unreadable, not a
// mapping, no distributed_type, an unknown key (as accelerate: "had unknown
// keys"), a compute_environment or distributed_type accelerate does not
// know, a value of the wrong type for a key the launch uses, values nested
// deeper than 64 levels or printing to over 256 KiB in all (YAML aliases
// of aliases).
StatusOr<AccelerateConfig> LoadAccelerateConfig(const std::string& path);
// The same on the file's `text` (JSON when `path` ends in .json).
StatusOr<AccelerateConfig> ParseAccelerateConfig(const std::string& path,
                                                 const std::string& text);

// A plain (unquoted, untagged) YAML scalar as PyYAML's loader resolves it
// (YAML 1.1, yaml/resolver.py and constructor.py): null (``, `~`, `null`),
// bool (`yes`/`no`/`on`/`off`/`true`/`false` in three casings), int (`42`,
// `0x1A`, `0b101`, octal `0755`, `1_000`, sexagesimal `1:30`), float (`1.10`
// is 1.1, `.5`, `1.0e+3`, `.inf`, `.nan`); anything else is a string: an
// IP `10.1.2.3`, `1e3`, `-.5`, `0x`, `08`, and any text over 256
// characters.
PyValue ResolveYamlPlainScalar(const std::string& text);

// accelerate's default_config_file: $HF_HOME/accelerate/default_config.yaml,
// else $XDG_CACHE_HOME/huggingface/accelerate/..., else
// $HOME/.cache/huggingface/accelerate/default_config.yaml.
std::string DefaultAccelerateConfigPath(
    const std::map<std::string, std::string>& env);

}  // namespace ddprun::agent
