#include "tests/worker/rank_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace ddprun::worker::testing {

RankProcess::RankProcess(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env) {
  char tmpl[] = "/tmp/ddprun_rank_XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  out_path_ = tmpl;
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fd);
}

RankProcess::~RankProcess() {
  if (exit_code_ < 0 && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(5));
  }
  unlink(out_path_.c_str());
}

bool RankProcess::Wait(std::chrono::milliseconds timeout) {
  if (exit_code_ >= 0) return true;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ =
          WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void RankProcess::Kill(int sig) {
  if (exit_code_ < 0) ::kill(pid_, sig);
}

std::string RankProcess::Output() const {
  std::ifstream in(out_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int FreePort() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(s);
    throw std::runtime_error("bind(0) failed");
  }
  socklen_t len = sizeof(addr);
  getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  close(s);
  return ntohs(addr.sin_port);
}

std::map<std::string, std::string> RankEnv(int rank, int world, int port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"OMP_NUM_THREADS", "1"}};
}

std::vector<RankResult> RunRanks(
    const std::vector<std::string>& argv, int world,
    const std::map<std::string, std::string>& extra_env,
    std::chrono::milliseconds timeout, int port) {
  if (port == 0) port = FreePort();
  std::vector<std::unique_ptr<RankProcess>> procs;
  for (int r = 0; r < world; ++r) {
    auto env = RankEnv(r, world, port);
    for (auto& [k, v] : extra_env) env[k] = v;
    procs.push_back(std::make_unique<RankProcess>(argv, env));
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<RankResult> out;
  for (auto& p : procs) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (!p->Wait(std::max(left, std::chrono::milliseconds(0)))) {
      p->Kill();
      p->Wait(std::chrono::seconds(5));
    }
    out.push_back({p->exit_code(), p->Output()});
  }
  return out;
}

std::string BinPath(const std::string& name) {
  return std::string(DDPRUN_BIN_DIR) + "/" + name;
}

}  // namespace ddprun::worker::testing
