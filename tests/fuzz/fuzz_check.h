#pragma once

// A fuzz target's invariant: abort() when it does not hold, naming it.
// Both drivers report the input that aborted (libFuzzer's crash file,
// fuzz_replay_main.cc's fuzz-failure-<pid>).
#include <errno.h>

#include <cstdio>
#include <cstdlib>

namespace ddprun::fuzz {

inline void Check(bool ok, const char* invariant) {
  if (ok) return;
  std::fprintf(stderr, "%s: fuzz invariant violated: %s\n",
               program_invocation_short_name, invariant);
  std::abort();
}

}  // namespace ddprun::fuzz
