#pragma once

// ServerProcess: the ddprun-rendezvous executable as a user runs it, with
// its stderr read back from a file (tests/support/process.h's Process).
// Test code only; every wait is bounded.

#include "ddprun_catch.h"

#include <signal.h>

#include <chrono>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "tests/support/process.h"

namespace ddprun::rendezvous {

// ddprun-rendezvous started with `args` (and `env` set, run through the
// `wrapper` command if any); its stderr kept for WaitFor and log().
class ServerProcess {
 public:
  explicit ServerProcess(
      const std::vector<std::string>& args,
      const std::vector<std::pair<std::string, std::string>>& env = {},
      const std::vector<std::string>& wrapper = {})
      : process_(Options(args, env, wrapper)) {}

  // Waits until stderr matches `pattern` (group 1 returned); "" when
  // `timeout` passes or the server exits without printing it.
  std::string WaitFor(const std::string& pattern, Clock::Duration timeout) {
    const std::regex re(pattern);
    std::string found;
    auto match = [&] {
      log_ = process_.Stderr();
      std::smatch m;
      if (!std::regex_search(log_, m, re)) return false;
      found = m[1];
      return true;
    };
    bool exited = false;
    ddprun::testing::WaitUntil(
        [&] {
          exited = !process_.Running();
          return match() || exited;
        },
        std::chrono::duration_cast<std::chrono::milliseconds>(timeout),
        std::chrono::milliseconds(20));
    if (found.empty() && exited) match();  // what it wrote before it exited
    return found;
  }

  // SIGTERM, then the exit code (or -1 if it did not exit within 5 s).
  int Terminate() {
    process_.Signal(SIGTERM);
    return WaitExit();
  }

  // The exit code, or -1 if it did not exit within 5 s (or by a signal).
  int WaitExit() {
    const int code = process_.Wait(std::chrono::seconds(5));
    log_ = process_.Stderr();
    return code < 0 || process_.killed_by_signal() ? -1 : code;
  }

  const std::string& log() const { return log_; }

 private:
  static ddprun::testing::ProcessOptions Options(
      const std::vector<std::string>& args,
      const std::vector<std::pair<std::string, std::string>>& env,
      const std::vector<std::string>& wrapper) {
    ddprun::testing::ProcessOptions o;
    o.argv = wrapper;
    o.argv.push_back(std::string(DDPRUN_BIN_DIR) + "/ddprun-rendezvous");
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    for (const auto& [key, value] : env) o.env[key] = value;
    o.name = "ddprun-rendezvous";
    o.own_process_group = false;
    return o;
  }

  ddprun::testing::Process process_;
  std::string log_;
};

}  // namespace ddprun::rendezvous
