#pragma once

#include <string>

#include "common/status.h"
#include "common/status_or.h"

namespace ddprun::agent {

// torchrun's run log directory: `<log_dir>/<run_id>_<random>`, where an
// empty `log_dir` means a fresh mkdtemp("$TMPDIR|/tmp/torchelastic_XXXXXX").
// Creates `log_dir` (with parents) when missing. `log_dir` "/dev/null" (as
// torchrun >= 2.3's os.devnull) returns "": no log files. Errors: the
// directory cannot be created.
StatusOr<std::string> MakeRunLogDir(const std::string& log_dir,
                                    const std::string& run_id);

// Removes `path` if present and creates it again, empty, with parents (an
// attempt directory is reused when a scaling event keeps the attempt number).
Status RecreateDir(const std::string& path);

// Creates `path` and missing parents.
Status MakeDirs(const std::string& path);

}  // namespace ddprun::agent
