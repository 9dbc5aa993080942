// The worker half of the standby worker (worker/src/standby.h): the
// message's framing, the wait on the channel, and what a standby does when
// the agent closes it or sends garbage. Torch-free; each case runs in
// milliseconds.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include "ddprun_catch.h"

#include "worker/src/standby.h"

namespace w = ddprun::worker;
using ddprun::StatusCode;

namespace {

std::string Msg(const char* bytes, size_t n) { return std::string(bytes, n); }

struct Channel {
  Channel() { REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0); }
  ~Channel() {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  std::string ReadReady() {
    char buf[16] = {0};
    const ssize_t n = ::read(agent(), buf, sizeof(buf));
    return n > 0 ? std::string(buf, n) : "";
  }
  int agent() const { return fds[0]; }
  int standby() const { return fds[1]; }
  int fds[2] = {-1, -1};
};

// Runs `fn` in a child process; its exit status and stderr.
std::pair<int, std::string> InChild(const std::function<void()>& fn) {
  int err[2];
  REQUIRE(::pipe(err) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(err[1], 2);
    ::close(err[0]);
    fn();
    std::_Exit(99);
  }
  ::close(err[1]);
  std::string text;
  char buf[512];
  for (ssize_t n; (n = ::read(err[0], buf, sizeof(buf))) > 0;) {
    text.append(buf, n);
  }
  ::close(err[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

}  // namespace

TEST_CASE("standby: a message is KEY=VALUE entries ended by an empty one",
          "[worker][standby]") {
  auto env = w::ParseStandbyEnv(Msg("RANK=1\0A=x=y\0EMPTY=\0\0", 21));
  REQUIRE(env.ok());
  REQUIRE(env->size() == 3);
  CHECK((*env)[0] == std::make_pair(std::string("RANK"), std::string("1")));
  CHECK((*env)[1] == std::make_pair(std::string("A"), std::string("x=y")));
  CHECK((*env)[2] == std::make_pair(std::string("EMPTY"), std::string()));
}

TEST_CASE("standby: malformed messages are refused, naming what is wrong",
          "[worker][standby]") {
  struct Case {
    std::string message;
    const char* why;
  };
  const Case cases[] = {
      {Msg("RANK=1\0", 7), "not ended"},
      {Msg("RANK=1", 6), "not ended"},
      {Msg("\0\0", 2), "no variable"},
      {Msg("\0", 1), "no variable"},
      {Msg("RANK=1\0\0X=2\0\0", 13), "bytes after"},
      {Msg("RANK\0\0", 6), "bad entry 'RANK'"},
      {Msg("=1\0\0", 4), "bad entry '=1'"},
      {Msg("A=1\0A=2\0\0", 9), "A given twice"},
  };
  for (const Case& c : cases) {
    INFO(c.why);
    auto env = w::ParseStandbyEnv(c.message);
    REQUIRE_FALSE(env.ok());
    CHECK(env.status().code() == StatusCode::kInvalidArgument);
    CHECK(env.status().message().find(c.why) != std::string::npos);
  }
}

TEST_CASE("standby: says it is ready, then reads a message sent in pieces",
          "[worker][standby]") {
  Channel ch;
  std::string ready;
  std::thread agent([&] {
    ready = ch.ReadReady();
    const std::string m = Msg("RANK=3\0WORLD_SIZE=4\0\0", 21);
    // Split inside an entry and between the two final zero bytes.
    for (const std::string& piece :
         {m.substr(0, 4), m.substr(4, 16), m.substr(20)}) {
      REQUIRE(::write(ch.agent(), piece.data(), piece.size()) ==
              static_cast<ssize_t>(piece.size()));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  auto env = w::ReceiveStandbyEnv(ch.standby());
  agent.join();
  CHECK(ready == "ready\n");
  REQUIRE(env.ok());
  REQUIRE(env->size() == 2);
  CHECK((*env)[1].second == "4");
}

TEST_CASE("standby: EOF before the message ends is kUnavailable",
          "[worker][standby]") {
  Channel ch;
  const std::string partial = Msg("RANK=3\0", 7);
  REQUIRE(::write(ch.agent(), partial.data(), partial.size()) == 7);
  ::shutdown(ch.agent(), SHUT_WR);
  auto env = w::ReceiveStandbyEnv(ch.standby());
  REQUIRE_FALSE(env.ok());
  CHECK(env.status().code() == StatusCode::kUnavailable);
  CHECK(ch.ReadReady() == "ready\n");
}

TEST_CASE("standby: the environment becomes exactly the message's",
          "[worker][standby]") {
  auto [code, err] = InChild([] {
    ::setenv("LEFT_OVER", "1", 1);
    w::EnvList env = {{"RANK", "2"}, {"B", "x y"}};
    if (!w::ReplaceEnvironment(env).ok()) std::_Exit(1);
    int n = 0;
    for (char** e = environ; *e != nullptr; ++e) ++n;
    const char* rank = std::getenv("RANK");
    const bool exact = n == 2 && std::getenv("LEFT_OVER") == nullptr &&
                       rank != nullptr && std::string(rank) == "2" &&
                       std::string(std::getenv("B")) == "x y";
    std::_Exit(exact ? 0 : 3);
  });
  CHECK(code == 0);
  CHECK(err.empty());
}

namespace {

// A child that is a standby on a channel to which the agent wrote
// `message` (then closed its side); `then` runs if BecomeRankIfStandby
// returns. Its exit status and stderr.
std::pair<int, std::string> AsStandby(const std::string& message,
                                      const std::function<void(int)>& then) {
  Channel ch;
  REQUIRE(::write(ch.agent(), message.data(), message.size()) ==
          static_cast<ssize_t>(message.size()));
  ::shutdown(ch.agent(), SHUT_WR);
  const int fd = ch.standby();
  return InChild([fd, &then] {
    ::setenv("DDPRUN_STANDBY_FD", std::to_string(fd).c_str(), 1);
    w::BecomeRankIfStandby();
    then(fd);
  });
}

}  // namespace

TEST_CASE("standby: BecomeRankIfStandby takes the rank, or exits clearly",
          "[worker][standby]") {
  SECTION("the rank's environment") {
    auto [code, err] = AsStandby(Msg("RANK=1\0\0", 8), [](int fd) {
      const bool closed = ::fcntl(fd, F_GETFD) < 0;
      const char* rank = std::getenv("RANK");
      std::_Exit(closed && rank != nullptr &&
                         std::getenv("DDPRUN_STANDBY_FD") == nullptr
                     ? 0
                     : 3);
    });
    CHECK(code == 0);
    CHECK(err.empty());
  }
  SECTION("the agent closed the channel: exit 0 with a line") {
    auto [code, err] = AsStandby("", [](int) {});
    CHECK(code == 0);
    CHECK(err == "[standby] the agent closed the standby channel: exiting\n");
  }
  SECTION("a malformed message: exit 2") {
    auto [code, err] = AsStandby(Msg("RANK\0\0", 6), [](int) {});
    CHECK(code == 2);
    CHECK(err.find("bad entry 'RANK'") != std::string::npos);
  }
  SECTION("not a number: exit 2") {
    auto [code, err] = InChild([] {
      ::setenv("DDPRUN_STANDBY_FD", "x", 1);
      w::BecomeRankIfStandby();
    });
    CHECK(code == 2);
    CHECK(err.find("DDPRUN_STANDBY_FD=x") != std::string::npos);
  }
  SECTION("no DDPRUN_STANDBY_FD: nothing happens") {
    auto [code, err] = InChild([] {
      ::unsetenv("DDPRUN_STANDBY_FD");
      w::BecomeRankIfStandby();
      std::_Exit(0);
    });
    CHECK(code == 0);
  }
}
