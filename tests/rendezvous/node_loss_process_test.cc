// kill -9 of one agent process: the survivors re-rendezvous within the
// issue's 5 s target, with default heartbeat settings (1 s / 3 s).
#include "ddprun_catch.h"
#include "reaction_bound.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "rendezvous/server/rendezvous_server.h"

namespace ddprun::rendezvous {
namespace {

using Steady = std::chrono::steady_clock;

// One rdzv_test_agent process with its stdout on a pipe.
class AgentProcess {
 public:
  AgentProcess(const std::string& endpoint, const std::string& node, int min,
               int max) {
    int fds[2];
    REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(fds[1], 1);
      const std::string bin = std::string(DDPRUN_BIN_DIR) + "/rdzv_test_agent";
      execl(bin.c_str(), bin.c_str(), endpoint.c_str(), node.c_str(),
            std::to_string(min).c_str(), std::to_string(max).c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    out_ = fds[0];
  }
  ~AgentProcess() {
    Kill();
    close(out_);
  }
  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  // True once stdout contains `text` (read until `deadline`).
  bool WaitFor(const std::string& text, Steady::time_point deadline) {
    while (output_.find(text) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - Steady::now());
      if (left.count() <= 0) return false;
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[512];
      const ssize_t n = read(out_, buf, sizeof(buf));
      if (n <= 0) return false;
      output_.append(buf, n);
    }
    return true;
  }
  const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string output_;
};

TEST_CASE(
    "RendezvousServer: survivors of a kill -9 re-form once the heartbeat "
    "timeout drops it",
    "[rendezvous][process]") {
  // rdzv_test_agent's job config: the client's default heartbeat_timeout.
  const double heartbeat_timeout_s = 3;
  RendezvousServer server;
  auto port = server.Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  const std::string endpoint = "127.0.0.1:" + std::to_string(*port);
  AgentProcess a(endpoint, "a", 2, 3), b(endpoint, "b", 2, 3),
      c(endpoint, "c", 2, 3);
  const auto start_deadline = Steady::now() + std::chrono::seconds(20);
  for (AgentProcess* p : {&a, &b, &c}) {
    REQUIRE(p->WaitFor("JOINED round=1", start_deadline));
    CHECK_THAT(p->output(), Catch::Contains("group_world_size=3"));
  }
  const auto killed = Steady::now();
  c.Kill();
  const auto deadline =
      killed + std::chrono::milliseconds(static_cast<int>(
                   1000 * test_timing::ReactionBoundS(heartbeat_timeout_s)));
  REQUIRE(a.WaitFor("JOINED round=2 ", deadline));
  REQUIRE(b.WaitFor("JOINED round=2 ", deadline));
  const double took =
      std::chrono::duration<double>(Steady::now() - killed).count();
  INFO("survivors re-formed " << took << " s after kill -9");
  CHECK(took <= test_timing::ReactionBoundS(heartbeat_timeout_s));
  CHECK_THAT(a.output(), Catch::Contains("'c'") &&
                             Catch::Contains("no heartbeat") &&
                             Catch::Contains("group_world_size=2"));
}

}  // namespace
}  // namespace ddprun::rendezvous
