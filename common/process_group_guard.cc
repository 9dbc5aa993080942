#include "common/process_group_guard.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>

namespace ddprun {
namespace {

// One message on the pipe: fixed size, so that each write is atomic.
struct Record {
  char op;  // '+' add, '-' remove, 'k' keep the cleanup directory
  char pad[3];
  int32_t pgid;
};
static_assert(sizeof(Record) == 8, "records are 8 bytes");

void CloseAllBut(int keep) {
  if (::syscall(SYS_close_range, 3U, static_cast<unsigned>(keep) - 1, 0U) !=
          0 ||
      ::syscall(SYS_close_range, static_cast<unsigned>(keep) + 1, ~0U, 0U) !=
          0) {
    for (int fd = 3; fd < 4096; ++fd) {
      if (fd != keep) ::close(fd);
    }
  }
}

// Drops groups with no process left: their number may be handed out again,
// and the guard must never kill a stranger's group.
void ForgetEmptyGroups(std::set<pid_t>* groups) {
  for (auto it = groups->begin(); it != groups->end();) {
    it = ::kill(-*it, 0) == 0 ? std::next(it) : groups->erase(it);
  }
}

[[noreturn]] void RunGuard(int fd, const std::string& cleanup_dir) {
  ::setsid();
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2,
                  SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU}) {
    ::signal(sig, SIG_IGN);
  }
  const int null_fd = ::open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    for (int std_fd : {0, 1, 2}) ::dup2(null_fd, std_fd);
  }
  CloseAllBut(fd);
  ::prctl(PR_SET_NAME, "ddprun-guard", 0, 0, 0);

  std::set<pid_t> groups;
  bool keep_dir = false;
  Record buf[64];
  size_t have = 0;  // bytes in buf
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, 1000);
    if (ready == 0) {
      ForgetEmptyGroups(&groups);
      continue;
    }
    if (ready < 0 && errno == EINTR) continue;
    char* bytes = reinterpret_cast<char*>(buf);
    const ssize_t n =
        ready < 0 ? -1 : ::read(fd, bytes + have, sizeof(buf) - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the owner is gone
    have += static_cast<size_t>(n);
    const size_t whole = have / sizeof(Record);
    for (size_t i = 0; i < whole; ++i) {
      if (buf[i].op == '+') groups.insert(buf[i].pgid);
      if (buf[i].op == '-') groups.erase(buf[i].pgid);
      if (buf[i].op == 'k') keep_dir = true;
    }
    have -= whole * sizeof(Record);
    std::memmove(bytes, bytes + whole * sizeof(Record), have);
  }
  for (pid_t pgid : groups) ::kill(-pgid, SIGKILL);
  if (!cleanup_dir.empty() && !keep_dir) {
    std::error_code ignored;
    std::filesystem::remove_all(cleanup_dir, ignored);
  }
  ::_exit(0);
}

}  // namespace

StatusOr<std::unique_ptr<ProcessGroupGuard>> ProcessGroupGuard::Start(
    const std::string& cleanup_dir) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return ErrnoStatus("process group guard: pipe", errno);
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return ErrnoStatus("process group guard: fork", err);
  }
  if (pid == 0) {
    ::close(fds[1]);
    RunGuard(fds[0], cleanup_dir);
  }
  ::close(fds[0]);
  return std::unique_ptr<ProcessGroupGuard>(new ProcessGroupGuard(fds[1], pid));
}

ProcessGroupGuard::~ProcessGroupGuard() { ::close(fd_); }

void ProcessGroupGuard::Send(char op, pid_t pgid) const {
  Record r{};
  r.op = op;
  r.pgid = static_cast<int32_t>(pgid);
  ssize_t n;
  do {
    n = ::write(fd_, &r, sizeof(r));
  } while (n < 0 && errno == EINTR);
}

void ProcessGroupGuard::Add(pid_t pgid) const { Send('+', pgid); }
void ProcessGroupGuard::Remove(pid_t pgid) const { Send('-', pgid); }
void ProcessGroupGuard::KeepCleanupDir() const { Send('k', 0); }

}  // namespace ddprun
