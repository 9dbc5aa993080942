#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ddprun::worker::testing {

// A child process running a test binary with extra environment variables;
// stdout and stderr go to one temp file. The destructor kills (SIGKILL) and
// reaps a child that is still running.
class RankProcess {
 public:
  RankProcess(const std::vector<std::string>& argv,
              const std::map<std::string, std::string>& env);
  ~RankProcess();
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  // Waits up to `timeout` for exit. Returns false if still running.
  bool Wait(std::chrono::milliseconds timeout);
  void Kill(int sig = 9);
  pid_t pid() const { return pid_; }
  // Exit code, or 128+signal; -1 while running.
  int exit_code() const { return exit_code_; }
  std::string Output() const;

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string out_path_;
};

// A TCP port that was free a moment ago (bind port 0 on 127.0.0.1).
int FreePort();

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
