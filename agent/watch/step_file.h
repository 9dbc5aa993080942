#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddprun::agent {

// What a worker writes to DDPRUN_STEP_FILE (ddprun_steps.step() in Python,
// ddprun::worker::Heartbeat() in C++), rewritten in place at offset 0:
//
//   <steps counted>\n
//   total_steps <count the worker will reach>\n      (optional)
//   <scalar name> <value>\n                           (optional, repeated)
//   <spaces>                                          (padding)
//
// A shorter text is padded with spaces to the length of the one before, so
// that a rewrite always covers it (one pwrite, no truncation a reader
// could see half-done). Older workers write the first line only.
struct StepFile {
  int64_t steps = -1;       // -1: no count (yet)
  int64_t total_steps = 0;  // 0: not reported
  // At most kMaxScalars, in file order; names are valid (ValidScalarName)
  // and unique, values finite.
  std::vector<std::pair<std::string, double>> scalars;
};

inline constexpr size_t kMaxScalars = 8;
inline constexpr size_t kMaxScalarNameBytes = 32;

// Reads `text` as above. Lines it cannot read (a bad name or number, a
// ninth scalar, a repeated name) are skipped: what a worker writes must
// never break its agent, and what reaches the rendezvous is within what
// the server accepts (rendezvous_state.cc, CheckProgress).
StepFile ParseStepFile(std::string_view text);

// The step file at `path`, read without blocking the caller: the worker
// owns the file, so what is not a regular file of at most kMaxStepFileBytes
// (a FIFO would block the agent's loop, a huge file stall it) reads as no
// count, as a missing file does.
inline constexpr size_t kMaxStepFileBytes = 4096;
StepFile ReadStepFile(const std::string& path);

// 1..32 bytes of [A-Za-z0-9_.:/-] (a Prometheus label value and a JSON key
// that needs no care).
bool ValidScalarName(std::string_view name);

}  // namespace ddprun::agent
