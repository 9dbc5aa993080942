#include "agent/cli/cli_entrypoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include "common/file_util.h"

namespace ddprun::agent {

Status CheckEntrypoint(const LaunchOptions& o,
                       const std::map<std::string, std::string>& env) {
  struct stat st;
  // --run_path wins over -m and --no_python, as in torchrun.
  if (o.run_path || (!o.module && !o.no_python)) {
    if (stat(o.entrypoint.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) {
      return InvalidArgumentError("entrypoint script '" + o.entrypoint +
                                  "' not found");
    }
    return Status::Ok();
  }
  if (o.module) return Status::Ok();  // Python resolves module names.
  if (o.entrypoint.find('/') != std::string::npos) {
    if (stat(o.entrypoint.c_str(), &st) != 0) {
      return InvalidArgumentError("--no_python entrypoint '" + o.entrypoint +
                                  "' not found");
    }
    if (!IsExecutableFile(o.entrypoint)) {
      return InvalidArgumentError("--no_python entrypoint '" + o.entrypoint +
                                  "' is not an executable file");
    }
    return Status::Ok();
  }
  auto path_it = env.find("PATH");
  const std::string path =
      path_it != env.end() ? path_it->second : "/usr/local/bin:/usr/bin:/bin";
  bool found_not_executable = false;
  std::string::size_type start = 0;
  while (start <= path.size()) {
    auto colon = path.find(':', start);
    std::string dir = path.substr(start, colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + o.entrypoint;
    if (IsExecutableFile(candidate)) return Status::Ok();
    if (stat(candidate.c_str(), &st) == 0) found_not_executable = true;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return InvalidArgumentError("--no_python entrypoint '" + o.entrypoint + "' " +
                              (found_not_executable
                                   ? "is on PATH but not executable"
                                   : "not found on PATH"));
}

}  // namespace ddprun::agent
