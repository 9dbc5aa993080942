#pragma once

#include <map>
#include <string>

#include "agent/cli/launch_options.h"
#include "ddprun/common/status.h"

namespace ddprun::agent {

// Checks, before any worker starts, that options.entrypoint can be run:
//  - -m/--module: nothing (Python resolves module names);
//  - a Python script (the default) or --run_path: the file exists and is not
//    a directory (relative paths from the current directory);
//  - --no_python: a path with '/' must be an executable regular file; a bare
//    name is looked up on env["PATH"] (default /usr/local/bin:/usr/bin:/bin)
//    as execvp would.
// Errors: kInvalidArgument, one line naming the entrypoint ("... not found",
// "... not found on PATH", "... is not an executable file").
// Reads the filesystem only; thread-safe.
Status CheckEntrypoint(const LaunchOptions& options,
                       const std::map<std::string, std::string>& env);

}  // namespace ddprun::agent
