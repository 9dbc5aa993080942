// The C++ workers' stack dump handler (worker/src/stack_dump.cc, plain C++:
// built here without LibTorch) in a child process with three threads: the
// dump lists every thread's native frames and what the rank was doing, and
// the process runs on.

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "ddprun/worker/stack_dump.h"

namespace ddprun::worker {
namespace {

using namespace std::chrono_literals;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t Count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos;
       at = s.find(part, at + 1)) {
    ++n;
  }
  return n;
}

// A worker: two helper threads and a main thread "in" an all_reduce at
// step 3, until `release` has a byte to read; exits 0 if the handler was
// installed.
[[noreturn]] void Child(const std::string& file, int release) {
  ::setenv("DDPRUN_STACKS_FILE", file.c_str(), 1);
  ::setenv("DDPRUN_STACKS_SIGNAL", std::to_string(SIGRTMAX - 2).c_str(), 1);
  const bool installed = InstallStackDumpHandler();
  std::atomic<bool> stop{false};
  auto spin = [&stop] {
    while (!stop.load()) std::this_thread::sleep_for(5ms);
  };
  std::thread a(spin), b(spin);
  for (int i = 0; i < 3; ++i) NoteStep();
  {
    ActivityScope scope("all_reduce");
    char byte;
    while (::read(release, &byte, 1) < 0) {
    }
  }
  stop = true;
  a.join();
  b.join();
  std::_Exit(installed ? 0 : 3);
}

TEST_CASE("Native stack dump: every thread, the collective and the step",
          "[worker][stacks]") {
  char tmpl[] = "/tmp/ddprun_native_stacks_XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string file = std::string(tmpl) + "/stacks.txt";
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[1]);
    Child(file, fds[0]);
  }
  ::close(fds[0]);
  // The handler is installed once the file exists and SigCgt shows it.
  bool ready = false;
  for (int i = 0; i < 500 && !ready; ++i) {
    std::this_thread::sleep_for(10ms);
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("SigCgt:", 0) == 0) {
        unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
        ready = (mask >> (SIGRTMAX - 3)) & 1ULL;
      }
    }
  }
  REQUIRE(ready);
  // The threads and the scope are up: the child shows no sign of it after
  // its handler (checked above), so a fixed pause.
  std::this_thread::sleep_for(50ms);
  REQUIRE(::syscall(SYS_tgkill, pid, pid, SIGRTMAX - 2) == 0);
  std::string dump;
  for (int i = 0; i < 300; ++i) {
    dump = ReadAll(file);
    if (dump.find("# end of native stacks") != std::string::npos) break;
    std::this_thread::sleep_for(10ms);
  }
  INFO(dump);
  CHECK(dump.find("# ddprun native stacks: pid " + std::to_string(pid) +
                  ", doing all_reduce, step 3\n") == 0);
  CHECK(dump.find("# end of native stacks\n") != std::string::npos);
  CHECK(Count(dump, "\nThread ") == 3);
  CHECK(Count(dump, " (current):\n") == 1);
  CHECK(Count(dump, "did not answer") == 0);
  // backtrace_symbols_fd lines: "<object>(<symbol>+0x..)[0x...]".
  CHECK(Count(dump, ")[0x") >= 6);
  // The worker runs on and finishes normally.
  REQUIRE(::write(fds[1], "x", 1) == 1);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  (void)!std::system(("rm -rf " + std::string(tmpl)).c_str());
}

TEST_CASE("Native stack dump: nothing installed without the environment",
          "[worker][stacks]") {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::unsetenv("DDPRUN_STACKS_FILE");
    std::_Exit(InstallStackDumpHandler() ? 1 : 0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace ddprun::worker
