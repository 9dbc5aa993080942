#pragma once

#include <string>

#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// A run's log directory and, when ddprun made it up, the temporary root
// that holds it.
struct RunLogDir {
  std::string path;       // "" = no log files (--log_dir /dev/null)
  std::string temp_root;  // "" unless --log_dir was not given
};

// torchrun's run log directory: `<log_dir>/<run_id>_<random>`, where an
// empty `log_dir` means a fresh mkdtemp("$TMPDIR|/tmp/torchelastic_XXXXXX").
// Creates `log_dir` (with parents) when missing. `log_dir` "/dev/null" (as
// torchrun >= 2.3's os.devnull) gives no directory: no log files. Errors:
// INVALID_ARGUMENT when `log_dir` is not a directory or cannot be created
// (bad input, one line naming --log_dir); another code when the temporary
// directory cannot be made.
StatusOr<RunLogDir> MakeRunLogDir(const std::string& log_dir,
                                  const std::string& run_id);

// True when a file named error.json lies anywhere under `dir` (a worker's
// error file, which a failure table may point at).
bool HasErrorFile(const std::string& dir);

// Removes `path` and everything below it; best effort.
void RemoveTree(const std::string& path);

// Removes `path` if present and creates it again, empty, with parents (an
// attempt directory is reused when a scaling event keeps the attempt number).
Status RecreateDir(const std::string& path);

// Creates `path` and missing parents.
Status MakeDirs(const std::string& path);

}  // namespace ddprun::agent
