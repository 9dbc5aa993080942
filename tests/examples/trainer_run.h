#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddprun::examples::testing {

// Output and exit code of a shell command run under `timeout`.
struct CommandResult {
  int exit_code = -1;  // 124 when the timeout killed it
  std::string output;  // stdout and stderr interleaved
};

// Runs `command` through /bin/sh with a wall-clock limit of `timeout_s`.
CommandResult RunCommand(const std::string& command, int timeout_s);

// A fresh empty directory under /tmp, unique to this process and `tag`.
std::string FreshDir(const std::string& tag);

// Path of a built binary (DDPRUN_BIN_DIR/name).
std::string Bin(const std::string& name);

// Every line of <dir>/metrics.jsonl as JSON (empty if missing).
std::vector<nlohmann::json> ReadMetrics(const std::string& output_dir);

// Writes `text` to `path`.
void WriteText(const std::string& path, const std::string& text);

}  // namespace ddprun::examples::testing

namespace ddprun::examples::testing {

// Pid of the live process whose command line contains `marker` and whose
// environment has RANK=<rank> (a worker started by a launcher), or -1.
int FindWorkerPid(const std::string& marker, int rank);

// Largest step among <dir>/ckpt-<step>.pt files, or -1 when none.
long long NewestCheckpointStep(const std::string& dir);

}  // namespace ddprun::examples::testing
