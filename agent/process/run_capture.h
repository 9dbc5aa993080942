#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// How a short helper command ended and what it printed.
struct CaptureResult {
  int exit_code = 0;  // the exit status, or 128+N when signal N killed it
  std::string out;    // its stdout (at most max_bytes)
  std::string err;    // its stderr (at most max_bytes)
};

// Runs `argv` to completion with the complete environment `env`, stdin
// /dev/null, and returns its exit code and output. For the agent's own
// helpers (asking an interpreter for its module path, `ssh host hostname -I`),
// never for workers.
//
// argv[0] is a path, or a name looked up on env["PATH"] (default
// /usr/local/bin:/usr/bin:/bin) before forking. The child leads its own
// process group and dies with the calling thread (PR_SET_PDEATHSIG).
// Blocks until the command exits, or until `timeout` passes: then the whole
// group gets SIGKILL and the result is kDeadlineExceeded. Output beyond
// max_bytes per stream is read and dropped.
// Errors: kNotFound (argv[0] not found or not executable), kInternal
// (pipe/fork failed), kDeadlineExceeded. Thread-safe.
StatusOr<CaptureResult> RunAndCapture(
    const std::vector<std::string>& argv,
    const std::map<std::string, std::string>& env,
    std::chrono::milliseconds timeout, std::size_t max_bytes = 1 << 20);

}  // namespace ddprun::agent
