#include "agent/frontends/deepspeed/node_fanout.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <optional>

#include "common/file_util.h"
#include "common/logging.h"

namespace ddprun::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

struct Child {
  const NodeProcess* node = nullptr;
  pid_t pid = -1;
  int stdin_fd = -1;  // write end of its stdin pipe, or -1
  bool done = false;
  bool stop_asked = false;
  SteadyClock::time_point kill_at;
};

int ExitCodeOf(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

// Forks and execs one node process; -1 on failure (logged).
pid_t Start(const NodeProcess& node, int* stdin_fd) {
  auto path_it = node.env.find("PATH");
  const std::string exe =
      FindOnPath(node.exec_path.empty() ? node.argv[0] : node.exec_path,
                 path_it != node.env.end() ? path_it->second
                                           : "/usr/local/bin:/usr/bin:/bin");
  if (exe.empty()) {
    DDP_LOG(ERROR) << node.name << ": '" << node.argv[0] << "' not found";
    return -1;
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : node.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (const auto& a : node.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  int pipe_fds[2] = {-1, -1};
  if (node.stop_by_closing_stdin && ::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    DDP_LOG(ERROR) << node.name << ": pipe2 failed";
    return -1;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int in = node.stop_by_closing_stdin
                       ? pipe_fds[0]
                       : ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in >= 0) ::dup2(in, 0);
    ::execve(exe.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  if (pipe_fds[0] >= 0) ::close(pipe_fds[0]);
  if (pid < 0) {
    if (pipe_fds[1] >= 0) ::close(pipe_fds[1]);
    DDP_LOG(ERROR) << node.name << ": fork failed";
    return -1;
  }
  *stdin_fd = pipe_fds[1];
  return pid;
}

void AskToStop(Child* c, std::chrono::milliseconds grace) {
  if (c->done || c->stop_asked) return;
  c->stop_asked = true;
  c->kill_at = SteadyClock::now() + grace;
  if (c->stdin_fd >= 0) {
    ::close(c->stdin_fd);
    c->stdin_fd = -1;
  } else {
    ::kill(c->pid, SIGTERM);
  }
}

}  // namespace

int RunNodeProcesses(const std::vector<NodeProcess>& nodes,
                     const FanOutTimeouts& timeouts) {
  sigset_t waited, previous;
  sigemptyset(&waited);
  sigaddset(&waited, SIGCHLD);
  for (int sig : kStopSignals) sigaddset(&waited, sig);
  ::pthread_sigmask(SIG_BLOCK, &waited, &previous);
  // A node whose ssh connection breaks must not kill us with SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);

  std::vector<Child> children(nodes.size());
  bool start_failed = false;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    children[i].node = &nodes[i];
    children[i].pid = Start(nodes[i], &children[i].stdin_fd);
    if (children[i].pid < 0) {
      children[i].done = true;
      start_failed = true;
      break;
    }
  }
  int stop_signal = 0;
  std::optional<int> first_failure;
  SteadyClock::time_point failure_at;
  auto stop_all = [&] {
    for (Child& c : children) AskToStop(&c, timeouts.stop_grace);
  };
  if (start_failed) stop_all();
  while (true) {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (Child& c : children) {
        if (c.pid != pid || c.done) continue;
        c.done = true;
        if (c.stdin_fd >= 0) ::close(c.stdin_fd);
        c.stdin_fd = -1;
        const int code = ExitCodeOf(status);
        if (code != 0 && !first_failure) {
          first_failure = code;
          failure_at = SteadyClock::now();
          DDP_LOG(ERROR) << c.node->name << " exited with " << code;
        }
      }
    }
    bool all_done = true;
    for (const Child& c : children)
      all_done = all_done && (c.done || c.pid < 0);
    if (all_done) break;
    const auto now = SteadyClock::now();
    if (first_failure && now - failure_at > timeouts.after_failure) stop_all();
    for (Child& c : children) {
      if (!c.done && c.stop_asked && now > c.kill_at) {
        DDP_LOG(WARNING) << c.node->name << " did not stop: SIGKILL";
        ::kill(-c.pid, SIGKILL);
        ::kill(c.pid, SIGKILL);
        c.kill_at = now + std::chrono::hours(1);
      }
    }
    timespec tick{0, 100 * 1000 * 1000};
    siginfo_t info;
    const int sig = ::sigtimedwait(&waited, &info, &tick);
    if (sig > 0 && sig != SIGCHLD) {
      if (stop_signal == 0) stop_signal = sig;
      stop_all();
    }
  }
  for (Child& c : children) {
    if (c.stdin_fd >= 0) ::close(c.stdin_fd);
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (stop_signal != 0) return 128 + stop_signal;
  if (start_failed) return 127;
  return first_failure.value_or(0);
}

}  // namespace ddprun::agent
