#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "tests/support/process.h"

namespace ddprun::worker::testing {

using ddprun::testing::FreeLoopbackPort;

// A child process running a test binary with extra environment variables;
// stdout and stderr go to one temp file. The destructor kills (SIGKILL) and
// reaps a child that is still running. A thin layer over
// tests/support/process.h's Process.
class RankProcess {
 public:
  RankProcess(const std::vector<std::string>& argv,
              const std::map<std::string, std::string>& env);

  // Waits up to `timeout` for exit. Returns false if still running.
  bool Wait(std::chrono::milliseconds timeout) {
    return process_.Wait(timeout) >= 0;
  }
  void Kill(int sig = 9) { process_.Signal(sig); }
  pid_t pid() const { return process_.pid(); }
  // Exit code, or 128+signal; -1 while running.
  int exit_code() const { return process_.exit_code(); }
  std::string Output() const { return process_.Stdout(); }

 private:
  ddprun::testing::Process process_;
};

// Environment of rank `rank` of `world` on loopback with the given port.
std::map<std::string, std::string> RankEnv(int rank, int world, int port);

struct RankResult {
  int exit_code;
  std::string output;
};

// Runs `argv` as `world` ranks on `port` (0: a fresh one) and waits for all
// of them (killing stragglers after `timeout`, then exit_code is 137).
std::vector<RankResult> RunRanks(
    const std::vector<std::string>& argv, int world,
    const std::map<std::string, std::string>& extra_env = {},
    std::chrono::milliseconds timeout = std::chrono::seconds(60), int port = 0);

// Path of a binary built into DDPRUN_BIN_DIR.
std::string BinPath(const std::string& name);

}  // namespace ddprun::worker::testing
