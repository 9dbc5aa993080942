#include "agent/process/run_capture.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "common/file_util.h"

namespace ddprun::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Closes both ends of a pipe on scope exit.
struct Pipe {
  int fd[2] = {-1, -1};
  ~Pipe() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  bool Open() { return ::pipe2(fd, O_CLOEXEC) == 0; }
  void CloseRead() {
    if (fd[0] >= 0) ::close(fd[0]);
    fd[0] = -1;
  }
  void CloseWrite() {
    if (fd[1] >= 0) ::close(fd[1]);
    fd[1] = -1;
  }
};

int ExitCodeOf(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

}  // namespace

StatusOr<CaptureResult> RunAndCapture(
    const std::vector<std::string>& argv,
    const std::map<std::string, std::string>& env,
    std::chrono::milliseconds timeout, std::size_t max_bytes) {
  if (argv.empty()) return InvalidArgumentError("RunAndCapture: empty argv");
  auto path_it = env.find("PATH");
  const std::string exe = FindOnPath(
      argv[0],
      path_it != env.end() ? path_it->second : "/usr/local/bin:/usr/bin:/bin");
  if (exe.empty()) return NotFoundError("'" + argv[0] + "' not found");
  // Everything the child needs is built before fork: after it only
  // async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> c_argv, c_env;
  for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  for (auto& e : env_strings) c_env.push_back(e.data());
  c_env.push_back(nullptr);

  Pipe out, err;
  if (!out.Open() || !err.Open()) return InternalError("pipe2 failed");
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return InternalError("fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The agent blocks the signals its watcher thread handles; a helper
    // starts with none blocked.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (::getppid() != parent) ::_exit(127);
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::dup2(out.fd[1], 1);
    ::dup2(err.fd[1], 2);
    ::execve(exe.c_str(), c_argv.data(), c_env.data());
    ::_exit(127);
  }
  out.CloseWrite();
  err.CloseWrite();

  CaptureResult result;
  const auto deadline = SteadyClock::now() + timeout;
  auto remaining_ms = [&deadline] {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - SteadyClock::now());
    return left.count() < 0 ? 0 : static_cast<int>(left.count());
  };
  bool timed_out = false;
  pollfd fds[2] = {{out.fd[0], POLLIN, 0}, {err.fd[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_streams = 2;
  while (open_streams > 0) {
    int left = remaining_ms();
    if (left == 0) {
      timed_out = true;
      break;
    }
    int n = ::poll(fds, 2, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      ssize_t got = ::read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        const std::size_t room =
            max_bytes - std::min(max_bytes, sinks[i]->size());
        sinks[i]->append(buf, std::min(static_cast<std::size_t>(got), room));
      } else if (got == 0 || errno != EINTR) {
        fds[i].fd = -1;  // EOF (the Pipe closes the descriptor)
        --open_streams;
      }
    }
  }
  int status = 0;
  while (!timed_out) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      result.exit_code = ExitCodeOf(status);
      return result;
    }
    if (w < 0 && errno != EINTR) return InternalError("waitpid failed");
    if (remaining_ms() == 0) {
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return DeadlineExceededError("'" + argv[0] + "' did not finish within " +
                               std::to_string(timeout.count()) + " ms");
}

}  // namespace ddprun::agent
