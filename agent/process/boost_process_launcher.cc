#include "agent/process/boost_process_launcher.h"

#include <fcntl.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/process/args.hpp>
#include <boost/process/async_pipe.hpp>
#include <boost/process/child.hpp>
#include <boost/process/env.hpp>
#include <boost/process/environment.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/extend.hpp>
#include <boost/process/io.hpp>
#include <boost/process/search_path.hpp>

#include "common/logging.h"
#include "common/process_group_guard.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace ddprun::agent {
namespace bp = boost::process;

struct BoostProcessLauncher::Child {
  Child(boost::asio::io_context& io, ProcessCallbacks cb)
      : out(io), err(io), out_tty(io), err_tty(io), callbacks(std::move(cb)) {}
  pid_t pid = -1;
  bp::async_pipe out;
  bp::async_pipe err;
  // The master sides of the pseudo-terminals a tty stream uses instead of
  // its pipe (closed when the stream uses the pipe).
  boost::asio::posix::stream_descriptor out_tty;
  boost::asio::posix::stream_descriptor err_tty;
  ProcessCallbacks callbacks;
  bool out_eof = false;
  bool err_eof = false;
  bool reaped = false;    // waitpid() returned its status
  bool finished = false;  // on_exit delivered
  bool grace_expired = false;
  ExitStatus status;
  // After the exit, how long the pipes may stay open (a grandchild holding
  // them) before the remaining reads are cancelled.
  std::unique_ptr<boost::asio::steady_timer> grace;
  std::array<char, 16384> out_buf;
  std::array<char, 16384> err_buf;
};

namespace {

class BoostProcess : public Process {
 public:
  BoostProcess(pid_t pid, const ProcessGroupGuard* guard)
      : pid_(pid), guard_(guard) {}
  int pid() const override { return pid_; }
  Status SignalGroup(int sig) override {
    if (::killpg(pid_, sig) == 0 || errno == ESRCH) {
      // SIGKILL ends the whole group: the guard need not watch it any more.
      if (sig == SIGKILL && guard_ != nullptr) guard_->Remove(pid_);
      return Status::Ok();
    }
    return ErrnoStatus("killpg(" + std::to_string(pid_) + ")", errno);
  }

 private:
  pid_t pid_;
  const ProcessGroupGuard* guard_;
};

// argv[0] as given when it has a slash, else looked up in PATH (the child's
// PATH first, as execvpe would, then the agent's).
std::string ResolveExecutable(const std::string& name,
                              const std::map<std::string, std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  std::vector<boost::filesystem::path> dirs;
  auto it = env.find("PATH");
  std::string path = it != env.end() ? it->second : "";
  if (const char* own = ::getenv("PATH")) path += ":" + std::string(own);
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    if (end > start) dirs.emplace_back(path.substr(start, end - start));
    start = end + 1;
  }
  return bp::search_path(name, dirs).string();
}

// Runs in the child between fork and exec: async-signal-safe calls only.
void SetUpChild(pid_t parent, const ProcessGroupGuard* guard) {
  // A new session (hence a new process group), as torchrun's
  // Popen(start_new_session=True): killpg reaches the worker's whole group,
  // and a worker reading the terminal gets EIO instead of stopping on SIGTTIN.
  ::setsid();
  // Registered before anything runs in the group (one write(2)).
  if (guard != nullptr) guard->Add(::getpid());
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died before prctl: then nobody would kill us.
  if (::getppid() != parent) ::_exit(137);
  ::signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Other workers' pipes and the agent's files must not leak into workers
  // (a leaked pipe end delays EOF; a leaked file stays open).
  if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = 3; fd < 4096; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
}

// --numa_binding's CPU set, allocated before the fork (CPU_ALLOC: any
// CPU number) so that the child only calls sched_setaffinity(2).
class CpuAffinity {
 public:
  explicit CpuAffinity(const std::vector<int>& cpus) {
    if (cpus.empty()) return;
    const int count = *std::max_element(cpus.begin(), cpus.end()) + 1;
    set_ = CPU_ALLOC(count);
    size_ = CPU_ALLOC_SIZE(count);
    CPU_ZERO_S(size_, set_);
    for (int c : cpus) CPU_SET_S(c, size_, set_);
  }
  ~CpuAffinity() {
    if (set_ != nullptr) CPU_FREE(set_);
  }
  CpuAffinity(const CpuAffinity&) = delete;
  CpuAffinity& operator=(const CpuAffinity&) = delete;

  // In the child between fork and exec: async-signal-safe calls only.
  void ApplyInChild() const {
    if (set_ == nullptr || ::sched_setaffinity(0, size_, set_) == 0) return;
    static const char kMsg[] =
        "ddprun: --numa_binding: sched_setaffinity failed\n";
    (void)!::write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
    ::_exit(126);
  }

 private:
  cpu_set_t* set_ = nullptr;
  std::size_t size_ = 0;
};

// A pseudo-terminal for one worker stream: the master (non-blocking, close
// on exec) and the slave, whose output is passed through unchanged (no
// OPOST: '\n' stays '\n'). Errors: openpty or tcsetattr failed.
Status OpenPty(unsigned short rows, unsigned short cols, int* master,
               int* slave) {
  winsize ws{};
  ws.ws_row = rows;
  ws.ws_col = cols;
  if (::openpty(master, slave, nullptr, nullptr, rows > 0 ? &ws : nullptr) !=
      0) {
    return ErrnoStatus("openpty", errno);
  }
  termios t{};
  if (::tcgetattr(*slave, &t) == 0) {
    t.c_oflag &= ~static_cast<tcflag_t>(OPOST);
    if (::tcsetattr(*slave, TCSANOW, &t) != 0) {
      const int e = errno;
      ::close(*master);
      ::close(*slave);
      return ErrnoStatus("tcsetattr", e);
    }
  }
  ::fcntl(*master, F_SETFD, FD_CLOEXEC);
  ::fcntl(*master, F_SETFL, ::fcntl(*master, F_GETFL) | O_NONBLOCK);
  ::fcntl(*slave, F_SETFD, FD_CLOEXEC);
  return Status::Ok();
}

ExitStatus FromWaitStatus(int status) {
  if (WIFSIGNALED(status)) return ExitStatus{-WTERMSIG(status)};
  return ExitStatus{WEXITSTATUS(status)};
}

// How long the pipes of an exited worker may stay open (a grandchild still
// holding them) before its exit is delivered without waiting for EOF.
constexpr std::chrono::milliseconds kPipeGrace{100};

}  // namespace

BoostProcessLauncher::BoostProcessLauncher(boost::asio::io_context& io,
                                           const ProcessGroupGuard* guard)
    : io_(io), guard_(guard), sigchld_(io, SIGCHLD) {
  WaitForSigchld();
}

BoostProcessLauncher::~BoostProcessLauncher() {
  boost::system::error_code ignored;
  sigchld_.cancel(ignored);
}

void BoostProcessLauncher::WaitForSigchld() {
  sigchld_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;
    ReapExited();
    WaitForSigchld();
  });
}

StatusOr<std::unique_ptr<Process>> BoostProcessLauncher::Launch(
    const ProcessSpec& spec, ProcessCallbacks callbacks) {
  if (spec.argv.empty()) return InvalidArgumentError("empty command line");
  std::string exe = ResolveExecutable(spec.argv[0], spec.env);
  if (exe.empty()) {
    return NotFoundError("cannot find executable '" + spec.argv[0] +
                         "' in PATH");
  }
  auto child = std::make_shared<Child>(io_, std::move(callbacks));
  bp::environment env;
  for (const auto& [key, value] : spec.env) env[key] = value;
  std::vector<std::string> args(spec.argv.begin() + 1, spec.argv.end());
  pid_t parent = ::getpid();
  // A tty stream: the child's fd 1 / 2 become the pseudo-terminal's slave
  // (after boost set them to the pipes, which the child then drops).
  int slave_out = -1, slave_err = -1;
  for (bool is_err : {false, true}) {
    if (!(is_err ? spec.tty_stderr : spec.tty_stdout)) continue;
    int master = -1;
    int& slave = is_err ? slave_err : slave_out;
    Status s = OpenPty(spec.tty_rows, spec.tty_cols, &master, &slave);
    if (!s.ok()) {
      DDP_LOG(WARNING) << "no terminal for a worker (a pipe instead): "
                       << s.message();
      continue;
    }
    (is_err ? child->err_tty : child->out_tty).assign(master);
  }
  // Built before the fork: the child only makes the system call.
  CpuAffinity affinity(spec.cpu_affinity);
  std::error_code ec;
  bp::child proc(
      bp::exe = exe, bp::args = args, env, bp::std_out > child->out,
      bp::std_err > child->err,
      bp::extend::on_exec_setup([parent, guard = guard_, slave_out, slave_err,
                                 &affinity, &spec](auto&) {
        if (slave_out >= 0) ::dup2(slave_out, STDOUT_FILENO);
        if (slave_err >= 0) ::dup2(slave_err, STDERR_FILENO);
        SetUpChild(parent, guard);
        affinity.ApplyInChild();
        for (int fd : spec.inherit_fds) ::fcntl(fd, F_SETFD, 0);
      }),
      ec);
  // The slaves live on in the child only: EOF (EIO) comes when it and
  // everything it started have closed them.
  if (slave_out >= 0) ::close(slave_out);
  if (slave_err >= 0) ::close(slave_err);
  if (ec) {
    return InternalError("cannot start '" + exe + "': " + ec.message());
  }
  // A stream on a terminal: its pipe carries nothing, so it ends at once.
  boost::system::error_code ignored;
  if (child->out_tty.is_open()) child->out.close(ignored);
  if (child->err_tty.is_open()) child->err.close(ignored);
  child->pid = proc.id();
  // Exits are reaped by ReapExited (SIGCHLD), not by bp::child.
  proc.detach();
  children_[child->pid] = child;
  StartRead(child, false);
  StartRead(child, true);
  // A child that exited before the SIGCHLD handler saw its pid.
  boost::asio::post(io_, [this] { ReapExited(); });
  return std::unique_ptr<Process>(new BoostProcess(child->pid, guard_));
}

void BoostProcessLauncher::StartRead(const std::shared_ptr<Child>& child,
                                     bool is_stderr) {
  auto& buf = is_stderr ? child->err_buf : child->out_buf;
  auto on_read = [this, child, is_stderr](const boost::system::error_code& ec,
                                          size_t n) {
    auto& sink =
        is_stderr ? child->callbacks.on_stderr : child->callbacks.on_stdout;
    auto& data = is_stderr ? child->err_buf : child->out_buf;
    if (n > 0 && sink && !child->finished) {
      sink(std::string_view(data.data(), n));
    }
    if (!ec && !child->grace_expired) {
      StartRead(child, is_stderr);
      return;
    }
    // EOF (a terminal: EIO), or cancelled after the grace period.
    (is_stderr ? child->err_eof : child->out_eof) = true;
    MaybeFinish(child);
  };
  auto& tty = is_stderr ? child->err_tty : child->out_tty;
  if (tty.is_open()) {
    tty.async_read_some(boost::asio::buffer(buf), std::move(on_read));
  } else {
    (is_stderr ? child->err : child->out)
        .async_read_some(boost::asio::buffer(buf), std::move(on_read));
  }
}

void BoostProcessLauncher::MaybeFinish(const std::shared_ptr<Child>& child) {
  if (child->finished || !child->reaped) return;
  if (!child->out_eof || !child->err_eof) return;
  child->finished = true;
  if (child->grace) child->grace->cancel();
  boost::system::error_code ignored;
  child->out.close(ignored);
  child->err.close(ignored);
  child->out_tty.close(ignored);
  child->err_tty.close(ignored);
  if (child->callbacks.on_exit) child->callbacks.on_exit(child->status);
}

void BoostProcessLauncher::ReapExited() {
  std::vector<std::pair<std::shared_ptr<Child>, ExitStatus>> exited;
  for (auto it = children_.begin(); it != children_.end();) {
    int status = 0;
    pid_t r = ::waitpid(it->first, &status, WNOHANG);
    if (r == it->first) {
      exited.emplace_back(it->second, FromWaitStatus(status));
      it = children_.erase(it);
    } else if (r < 0 && errno == ECHILD) {
      DDP_LOG(WARNING) << "worker pid " << it->first << " vanished";
      exited.emplace_back(it->second, ExitStatus{-SIGKILL});
      it = children_.erase(it);
    } else {
      ++it;
    }
  }
  // The exit is delivered once both pipes reach EOF, so every byte the
  // worker wrote is delivered before it, in order.
  for (auto& [reaped, status] : exited) {
    // A named copy: C++17 lambdas cannot capture a structured binding.
    auto child = reaped;
    child->reaped = true;
    child->status = status;
    child->grace = std::make_unique<boost::asio::steady_timer>(io_, kPipeGrace);
    child->grace->async_wait([child](const boost::system::error_code& ec) {
      if (ec || child->finished) return;
      child->grace_expired = true;
      // Completions already performed still deliver their data.
      try {
        child->out.cancel();
        child->err.cancel();
        if (child->out_tty.is_open()) child->out_tty.cancel();
        if (child->err_tty.is_open()) child->err_tty.cancel();
      } catch (const boost::system::system_error& e) {
        DDP_LOG(WARNING) << "cancelling worker pipe reads: " << e.what();
      }
    });
    MaybeFinish(child);
  }
}

}  // namespace ddprun::agent
