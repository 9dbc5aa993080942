// The process harness itself (process.h): what every process test relies
// on, checked on /bin/sh children.
#include "ddprun_catch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "tests/support/process.h"

namespace ddprun::testing {
namespace {

using namespace std::chrono_literals;

ProcessOptions Shell(const std::string& script) {
  ProcessOptions o;
  o.argv = {"/bin/sh", "-c", script};
  return o;
}

TEST_CASE("FreeLoopbackPort: a port that can be bound on 127.0.0.1",
          "[support]") {
  const int port = FreeLoopbackPort();
  REQUIRE(port > 0);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  CHECK_FALSE(WaitForPort(port, 50ms));  // bound, not listening
  REQUIRE(::listen(fd, 1) == 0);
  CHECK(WaitForPort(port, 1s));
  ::close(fd);
}

TEST_CASE("Process: exit code, output files, env, cwd", "[support]") {
  TempDir dir;
  ProcessOptions o = Shell("echo out $A $HOME; echo err >&2; pwd; exit 3");
  o.env = {{"A", "a1"}, {"-HOME", ""}};
  o.cwd = dir.path();
  o.output_dir = dir.path();
  o.name = "sh";
  Process p(o);
  CHECK(p.Wait(10s) == 3);
  CHECK(p.exit_code() == 3);
  CHECK_FALSE(p.killed_by_signal());
  CHECK(p.Stdout() == "out a1\n" + dir.path() + "\n");
  CHECK(p.Stderr() == "err\n");
  CHECK(ReadFile(dir.path() + "/sh.out") == p.Stdout());
  CHECK(FileExists(dir.path() + "/sh.err"));
}

TEST_CASE("Process: merged stderr, a missing executable exits 127",
          "[support]") {
  ProcessOptions o = Shell("echo a; echo b >&2");
  o.merge_stderr = true;
  Process p(o);
  REQUIRE(p.Wait(10s) == 0);
  CHECK(p.Stdout() == "a\nb\n");
  CHECK(p.Stderr().empty());
  ProcessOptions none;
  none.argv = {"/nonexistent/ddprun_no_such_binary"};
  Process missing(none);
  CHECK(missing.Wait(10s) == 127);
}

TEST_CASE("Process: Wait's deadline, signals to the child and its group",
          "[support]") {
  // The child starts a grandchild in its group and prints its pid.
  Process p(Shell("sleep 60 & echo child $!; wait"));
  CHECK(p.Wait(100ms) == -1);
  CHECK(p.Running());
  REQUIRE(p.WaitForOutput("child ", 10s));
  const pid_t grandchild = std::stoi(p.Stdout().substr(6));
  p.SignalGroup(SIGKILL);
  CHECK(p.Wait(10s) == 128 + SIGKILL);
  CHECK(p.killed_by_signal());
  CHECK(WaitDead({grandchild}, 10s));
  CHECK_FALSE(p.Running());
}

TEST_CASE("Process: WaitForOutput gives up when the child exits without it",
          "[support]") {
  Process p(Shell("echo something else"));
  const auto start = SteadyClock::now();
  CHECK_FALSE(p.WaitForOutput("never printed", 30s));
  CHECK(SteadyClock::now() - start < 20s);
}

TEST_CASE("RunShell: output and exit code, the deadline stops the group",
          "[support]") {
  CommandResult ok = RunShell("echo $X; echo e >&2; exit 4", 10s, {{"X", "x"}});
  CHECK(ok.exit_code == 4);
  CHECK(ok.output == "x\ne\n");
  CHECK(ok.error.empty());
  CommandResult apart = RunShell("echo o; echo e >&2", 10s, {}, false);
  CHECK(apart.exit_code == 0);
  CHECK(apart.output == "o\n");
  CHECK(apart.error == "e\n");
  const auto start = SteadyClock::now();
  CommandResult slow = RunShell("echo begun; sleep 60", 500ms);
  CHECK(slow.exit_code == 124);
  CHECK(slow.output == "begun\n");
  CHECK(SteadyClock::now() - start < 20s);
}

TEST_CASE("WaitUntil / WaitForFiles / WaitForText keep their deadlines",
          "[support]") {
  TempDir dir;
  const std::string f = dir.path() + "/f";
  CHECK_FALSE(WaitForFiles({f}, 50ms));
  CHECK_FALSE(WaitForText(f, "x", 50ms));
  Process writer(Shell("sleep 0.2; echo hello > " + f));
  CHECK(WaitForText(f, "hello", 10s));
  CHECK(WaitForFiles({f}, 0ms));
  int calls = 0;
  CHECK(WaitUntil([&] { return ++calls == 3; }, 10s, 1ms));
  CHECK_FALSE(WaitUntil([] { return false; }, 20ms));
}

}  // namespace
}  // namespace ddprun::testing
