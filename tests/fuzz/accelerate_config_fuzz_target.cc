// libFuzzer target over accelerate's config file as ddprun-accelerate reads
// it (agent/frontends/accelerate/accelerate_config.h): YAML with PyYAML's
// typing, or JSON, then accelerate's checks and defaults.
//
// Input: the file's text; read as default_config.json when its first
// non-blank character is '{' (what `accelerate config` writes for .json),
// else as default_config.yaml.
//
// Invariants (abort() on violation): a config that loads has accelerate's
// shape: compute_environment LOCAL_MACHINE, a known distributed_type,
// integer num_processes / machine_rank / num_machines, main_process_port
// None or an integer, every *_config section present; the values print
// within the reader's limit (256 KiB) beside the file's keys, however
// many aliases repeat them; plain YAML scalars resolve to a type and
// print.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "agent/frontends/accelerate/accelerate_config.h"
#include "fuzz_check.h"

using ddprun::fuzz::Check;

// LoadAccelerateConfig's limit on what a file's values print to in all.
constexpr size_t kPrintedLimit = size_t{256} << 10;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddprun::agent;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const size_t first = text.find_first_not_of(" \t\r\n");
  const bool json = first != std::string::npos && text[first] == '{';
  ddprun::StatusOr<AccelerateConfig> config = ParseAccelerateConfig(
      json ? "default_config.json" : "default_config.yaml", text);
  // One line of the file as a plain scalar.
  const PyValue scalar =
      ResolveYamlPlainScalar(text.substr(0, text.find('\n')));
  Check(scalar.ToString().size() <= 2 * size + 64, "a scalar prints long");
  if (!config.ok()) {
    Check(!config.status().message().empty(), "an error without a message");
    return 0;
  }
  Check(config->Get("compute_environment").ToString() == "LOCAL_MACHINE",
        "another compute_environment");
  const PyValue& dt = config->Get("distributed_type");
  Check(dt.kind == PyValue::Kind::kStr, "distributed_type is not a string");
  for (const char* key : {"num_processes", "machine_rank", "num_machines"}) {
    Check(config->Get(key).kind == PyValue::Kind::kInt,
          "an integer key is not an integer");
  }
  const PyValue& port = config->Get("main_process_port");
  Check(port.is_none() || port.kind == PyValue::Kind::kInt,
        "main_process_port is neither None nor an integer");
  for (const char* section :
       {"fp8_config", "deepspeed_config", "fsdp_config", "parallelism_config",
        "megatron_lm_config", "mpirun_config", "dynamo_config"}) {
    Check(config->sections.count(section) == 1, "a section is missing");
  }
  size_t printed = 0;
  for (const auto& [key, value] : config->values) {
    printed += key.size() + value.ToString().size();
  }
  for (const auto& [name, section] : config->sections) {
    for (const auto& [key, value] : section) {
      printed += key.size() + value.ToString().size();
    }
  }
  // Aliases may repeat a value without repeating its text, so the bound
  // is the reader's budget (256 KiB of printed values, the header's
  // contract) beside the file's own keys and the defaults accelerate
  // fills in, not a multiple of the file.
  Check(printed <= size + kPrintedLimit + 4096,
        "the values print longer than the reader's limit");
  return 0;
}
