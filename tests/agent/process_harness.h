#pragma once

// Helpers of the agent's process tests: run a ddprun binary (or one of its
// aliases) with its output captured in a temporary directory, and read what
// the workers wrote there. A thin layer over tests/support/process.h.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/process.h"

namespace ddprun::test {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline const std::string kBin = DDPRUN_BIN_DIR "/ddprun";
inline const std::string kData = DDPRUN_SOURCE_DIR "/tests/agent/data";

using testing::FreeLoopbackPort;
using testing::IsDead;
using testing::ReadFile;
using testing::TempDir;

inline bool Exists(const std::string& path) {
  return testing::FileExists(path);
}

// ddprun started with stdout/stderr captured to <dir>/ddprun.out|.err, with
// `extra_env` added to the test's environment (a key "-NAME" unsets NAME)
// and DDPRUN_TEST_OUT = dir, in `cwd` ("" = the test's directory). It stays
// in the test's process group: ddprun's own signal and group handling is
// what these tests check.
class Ddprun : public testing::Process {
 public:
  Ddprun(const TempDir& dir, std::vector<std::string> args,
         std::map<std::string, std::string> extra_env = {},
         const std::string& exe = kBin, const std::string& cwd = "")
      : testing::Process(
            Options(dir, std::move(args), std::move(extra_env), exe, cwd)) {}

  // Exit code (128+N when killed by signal N); -1 when `timeout` passes.
  int Wait(std::chrono::milliseconds timeout = 15s) {
    return testing::Process::Wait(timeout);
  }

 private:
  static testing::ProcessOptions Options(
      const TempDir& dir, std::vector<std::string> args,
      std::map<std::string, std::string> extra_env, const std::string& exe,
      const std::string& cwd) {
    testing::ProcessOptions o;
    o.argv = {exe};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    extra_env["DDPRUN_TEST_OUT"] = dir.path();
    o.env = std::move(extra_env);
    o.cwd = cwd;
    o.output_dir = dir.path();
    o.name = "ddprun";
    o.own_process_group = false;
    return o;
  }
};

// Waits until every file exists (deadline `timeout`).
inline bool WaitForFiles(const std::vector<std::string>& paths,
                         std::chrono::milliseconds timeout = 10s) {
  return testing::WaitForFiles(paths, timeout);
}

// Waits until every pid is dead (deadline `timeout`).
inline bool WaitDead(const std::vector<int>& pids,
                     std::chrono::milliseconds timeout = 5s) {
  return testing::WaitDead(pids, timeout);
}

// Stdout of `sh -c command` (its stderr goes to the test's stderr), with a
// deadline of `timeout`.
inline std::string ShellStdout(const std::string& command,
                               std::chrono::milliseconds timeout = 120s) {
  const testing::CommandResult r =
      testing::RunShell(command, timeout, {}, /*merge_stderr=*/false);
  if (!r.error.empty()) std::fputs(r.error.c_str(), stderr);
  return r.output;
}

inline std::map<std::string, std::string> ParseEnv(const std::string& text) {
  std::map<std::string, std::string> env;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

// Field `n` (1-based, as in proc(5)) of /proc/<pid>/stat, for n >= 4.
inline long StatField(int pid, int n) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::stringstream rest(stat.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= n && rest >> field; ++i) {
  }
  return std::atol(field.c_str());
}

}  // namespace ddprun::test
