#pragma once

// Helpers of the agent's process tests: run a ddprun binary (or one of its
// aliases) with its output captured in a temporary directory, and read what
// the workers wrote there.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ddprun::test {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline const std::string kBin = DDPRUN_BIN_DIR "/ddprun";
inline const std::string kData = DDPRUN_SOURCE_DIR "/tests/agent/data";

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline bool Exists(const std::string& path) {
  return access(path.c_str(), F_OK) == 0;
}

// A temporary directory removed at scope exit.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ddprun_proc_test_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { (void)!system(("rm -rf " + path_).c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ddprun started with stdout/stderr captured to files in `dir`, with
// `extra_env` added to the test's environment (a key "-NAME" unsets NAME)
// and DDPRUN_TEST_OUT = dir, in `cwd` ("" = the test's directory).
class Ddprun {
 public:
  Ddprun(const TempDir& dir, std::vector<std::string> args,
         std::map<std::string, std::string> extra_env = {},
         const std::string& exe = kBin, const std::string& cwd = "")
      : out_(dir.path() + "/ddprun.out"), err_(dir.path() + "/ddprun.err") {
    extra_env["DDPRUN_TEST_OUT"] = dir.path();
    pid_ = fork();
    if (pid_ == 0) {
      if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
      int out = open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(err, 2);
      for (const auto& [k, v] : extra_env) {
        if (!k.empty() && k[0] == '-') {
          unsetenv(k.c_str() + 1);
        } else {
          setenv(k.c_str(), v.c_str(), 1);
        }
      }
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(exe.c_str()));
      for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(exe.c_str(), argv.data());
      _exit(127);
    }
  }
  ~Ddprun() {
    if (!reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // Exit code (128+N when killed by signal N); -1 when `timeout` passes.
  int Wait(std::chrono::milliseconds timeout = 15s) {
    auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                   : WEXITSTATUS(status);
      }
      std::this_thread::sleep_for(5ms);
    }
    return -1;
  }
  pid_t pid() const { return pid_; }
  std::string Stdout() const { return ReadFile(out_); }
  std::string Stderr() const { return ReadFile(err_); }

 private:
  std::string out_, err_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// Waits until every file exists (deadline `timeout`).
inline bool WaitForFiles(const std::vector<std::string>& paths,
                         std::chrono::milliseconds timeout = 10s) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    bool all = true;
    for (const auto& p : paths) all = all && Exists(p);
    if (all) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
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

// True when the process is gone or a zombie (dead, not yet reaped by init).
inline bool IsDead(int pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return true;
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         (stat[paren + 2] == 'Z' || stat[paren + 2] == 'X');
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

// Waits until every pid is dead (deadline `timeout`).
inline bool WaitDead(const std::vector<int>& pids,
                     std::chrono::milliseconds timeout = 5s) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    bool all = true;
    for (int p : pids) all = all && IsDead(p);
    if (all) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

// A TCP port on 127.0.0.1 that was free a moment ago.
inline int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

}  // namespace ddprun::test
