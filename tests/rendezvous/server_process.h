#pragma once

// ServerProcess: the ddprun-rendezvous executable as a user runs it, with
// its stderr read through a pipe. Test code only; every wait is bounded.

#include "ddprun_catch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace ddprun::rendezvous {

// ddprun-rendezvous started with `args` (and `env` set, run through the
// `wrapper` command if any); stderr read through a pipe.
class ServerProcess {
 public:
  explicit ServerProcess(
      const std::vector<std::string>& args,
      const std::vector<std::pair<std::string, std::string>>& env = {},
      const std::vector<std::string>& wrapper = {}) {
    int fds[2];
    REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(fds[1], 2);
      for (const auto& [key, value] : env)
        setenv(key.c_str(), value.c_str(), 1);
      std::vector<std::string> copy = wrapper;
      copy.push_back(std::string(DDPRUN_BIN_DIR) + "/ddprun-rendezvous");
      copy.insert(copy.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    err_ = fds[0];
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(err_);
  }

  // Reads stderr until `pattern` matches (group 1 returned) or timeout.
  std::string WaitFor(const std::string& pattern, Clock::Duration timeout) {
    const std::regex re(pattern);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::smatch m;
    while (std::chrono::steady_clock::now() < deadline) {
      if (std::regex_search(log_, m, re)) return m[1];
      pollfd p{err_, POLLIN, 0};
      if (poll(&p, 1, 100) > 0) {
        char buf[1024];
        const ssize_t n = read(err_, buf, sizeof(buf));
        if (n <= 0) break;
        log_.append(buf, n);
      }
    }
    return "";
  }

  // SIGTERM, then the exit code (or -1 if it did not exit within 5 s).
  int Terminate() {
    kill(pid_, SIGTERM);
    return WaitExit();
  }

  // The exit code, or -1 if it did not exit within 5 s (or by a signal).
  int WaitExit() {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        WaitFor("(\\n)$",
                std::chrono::milliseconds(200));  // drain what it wrote
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

  const std::string& log() const { return log_; }

 private:
  pid_t pid_ = -1;
  int err_ = -1;
  std::string log_;
};

}  // namespace ddprun::rendezvous
