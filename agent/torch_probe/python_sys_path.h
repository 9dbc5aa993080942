#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// Where a Python interpreter imports from, as its workers will see it.
struct PythonSysPath {
  // sys.path without its first entry (the script's directory, or the
  // current directory for -m, which the caller adds); with safe_path (-P,
  // PYTHONSAFEPATH) there is no such entry and this is all of sys.path.
  std::vector<std::string> entries;
  bool safe_path = false;
  bool from_cache = false;
};

// Asks `interpreter` (a path, already looked up on PATH) for its sys.path by
// running it once with `env` (the workers' environment) in the current
// directory: `interpreter -c <print sys.path>`. Imports nothing but sys and
// site: no torch. Blocks at most `timeout`.
//
// With a non-empty `cache_dir` the answer is kept in
// <cache_dir>/python-<hash>.txt, keyed by the interpreter path, the current
// directory and the variables that change sys.path (PYTHONPATH, PYTHONHOME,
// PYTHONNOUSERSITE, PYTHONUSERBASE, PYTHONSAFEPATH, PYTHONPLATLIBDIR, HOME),
// and reused while the interpreter binary (size, mtime, inode) and every
// sys.path directory and the user site directory (existence and mtime: a
// package or .pth file added or removed changes it) are unchanged. Only an
// interpreter that is an ELF binary is cached: a wrapper script (a pyenv
// shim) may pick another interpreter on every run. Cache write failures are
// ignored (the next launch asks again).
// Errors: kDeadlineExceeded, kNotFound, kFailedPrecondition (the command
// failed or printed something unexpected). Thread-safe.
StatusOr<PythonSysPath> GetPythonSysPath(
    const std::string& interpreter,
    const std::map<std::string, std::string>& env, const std::string& cache_dir,
    std::chrono::milliseconds timeout);

// The cache directory: $DDPRUN_CACHE_DIR, else $XDG_CACHE_HOME/ddprun, else
// $HOME/.cache/ddprun; "" (no cache) when none of them is set.
std::string DefaultCacheDir(const std::map<std::string, std::string>& env);

}  // namespace ddprun::agent
