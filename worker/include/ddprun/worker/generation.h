// The generation keys of --restart_scope failed (docs/restart_scope.md): the
// names an agent and its workers share in the c10d store, and the record an
// agent writes for each generation. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::worker {

// Raw store keys (outside the workers' /worker/attempt_<k> prefix).
// "/ddprun/generation": the newest generation (decimal), set by the agent
// that replaced a rank after it wrote the record.
inline const char kGenerationKey[] = "/ddprun/generation";
// "/ddprun/generation/<g>": the record of generation g (JSON).
std::string GenerationRecordKey(int64_t generation);
// "/ddprun/generation/<g>/healed": "1" once every rank of g has its state.
std::string GenerationHealedKey(int64_t generation);
// The prefix of every key a worker uses in generation g, under its attempt
// store: PrefixStore("ddprun/gen/<g>", attempt store) (C++ and Python alike).
std::string GenerationPrefix(int64_t generation);

// What the agent recorded for a generation.
struct GenerationRecord {
  int64_t generation = 0;
  // The ranks started anew in this generation, ascending.
  std::vector<int> replaced;
  // The rank every other rank heals from: the lowest rank not replaced.
  int source = 0;
  std::string reason;
};

// Parses the record's JSON, {"replaced":[rank,...],"reason":"...",
// "source":s}; other keys are skipped. InvalidArgument (one line quoting the
// problem) for text that is not such an object, a "replaced" that is not an
// array of ranks in [0, world_size), a missing or out-of-range "source", or
// a source that is itself replaced.
StatusOr<GenerationRecord> ParseGenerationRecord(int64_t generation,
                                                 const std::string& json,
                                                 int world_size);

// Parses the decimal value of kGenerationKey. InvalidArgument for anything
// but a non-negative integer.
StatusOr<int64_t> ParseGenerationNumber(const std::string& text);

}  // namespace ddprun::worker
