// Skipping a Catch2 test case so that ctest reports it as skipped, never as
// passed. Every Catch2 binary of this tree is registered through
// ddprun_catch_discover_tests (tests/CMakeLists.txt), which gives its ctest
// tests SKIP_REGULAR_EXPRESSION "DDPRUN_SKIP: ": a case that prints that
// marker counts as skipped, whatever its exit status.
//
// Two kinds of missing prerequisite:
//   DDPRUN_SKIP(reason)          one CI may genuinely lack (docker, kubectl):
//                                always a skip.
//   DDPRUN_SKIP_UNLESS_CI(reason) one CI provides (root, network namespaces,
//                                slurm-wlm, sshd, openssl, clang, ...): a skip
//                                on a developer's machine, a failure under
//                                CI=true (or CI=1).
// `reason` is a stream expression (DDPRUN_SKIP("no " << tool)). Both return
// from the enclosing void function (a TEST_CASE body or a helper it calls
// directly).
//
// Contract: skip before the first check of the case. Since the marker
// wins over the exit status, a CHECK that failed earlier in the same case
// would be reported as skipped; a case with checks to keep and a part that
// may be skipped is two cases.
#pragma once

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>

#include "ddprun_catch.h"

namespace ddprun::test_skip {

// The marker the ctest tests' SKIP_REGULAR_EXPRESSION matches; the run's
// summary (scripts/ctest_summary.py) reads the reason after it.
inline constexpr char kMarker[] = "DDPRUN_SKIP: ";

// Whether this run is CI's: CI=true or CI=1 in the environment.
inline bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr &&
         (std::strcmp(ci, "true") == 0 || std::strcmp(ci, "1") == 0);
}

inline void PrintMarker(const std::string& reason) {
  std::cout << '\n' << kMarker << reason << std::endl;
}

}  // namespace ddprun::test_skip

#define DDPRUN_SKIP(reason)                                      \
  do {                                                           \
    std::ostringstream ddprun_skip_reason_;                      \
    ddprun_skip_reason_ << reason;                               \
    ::ddprun::test_skip::PrintMarker(ddprun_skip_reason_.str()); \
    return;                                                      \
  } while (false)

// The failure's text must not contain the marker (it would turn the failure
// into a skip).
#define DDPRUN_SKIP_UNLESS_CI(reason)                                 \
  do {                                                                \
    std::ostringstream ddprun_skip_reason_;                           \
    ddprun_skip_reason_ << reason;                                    \
    if (::ddprun::test_skip::InCi()) {                                \
      FAIL("missing prerequisite: "                                   \
           << ddprun_skip_reason_.str()                               \
           << " (CI=true: CI must provide it, so this is a failure, " \
              "not a skip)");                                         \
    }                                                                 \
    ::ddprun::test_skip::PrintMarker(ddprun_skip_reason_.str());      \
    return;                                                           \
  } while (false)
