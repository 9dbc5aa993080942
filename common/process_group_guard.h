#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "ddprun/common/status_or.h"

namespace ddprun {

// Kills process groups when their owner dies, also by SIGKILL.
//
// PR_SET_PDEATHSIG reaches only a worker itself, not what the worker
// started: after `kill -9` of the agent a worker's children lived on. The
// guard is a small helper process forked from the owner (the agent) that
// holds the read end of a pipe: the owner registers each worker's process
// group (Add, also callable between fork and exec) and deregisters it once
// it has killed the group itself (Remove). When the pipe reaches EOF, i.e.
// the owner exited or was killed, the guard sends SIGKILL to every group
// still registered, removes `cleanup_dir` if one was given, and exits.
//
// The guard leads a session of its own and ignores the usual termination
// signals, so Ctrl-C or a signal to the owner's process group does not take
// it down before the owner; its stdio is /dev/null (it never holds a pipe
// of the caller's open). Processes that left the worker's process group
// (setsid, setpgid: deliberately daemonised) are not touched.
//
// Start() must run before the owner starts any thread (the guard is a fork
// of the owner and keeps running plain C++ code). Add/Remove are
// async-signal-safe (one write(2) each) and thread-safe; they are no-ops
// after the guard is gone.
class ProcessGroupGuard {
 public:
  // Forks the guard. `cleanup_dir` ("" = none): a directory the guard
  // removes (recursively) when the owner dies without calling
  // KeepCleanupDir().
  static StatusOr<std::unique_ptr<ProcessGroupGuard>> Start(
      const std::string& cleanup_dir = "");

  // Closes the pipe: the guard kills what is still registered and exits.
  ~ProcessGroupGuard();
  ProcessGroupGuard(const ProcessGroupGuard&) = delete;
  ProcessGroupGuard& operator=(const ProcessGroupGuard&) = delete;

  void Add(pid_t pgid) const;
  void Remove(pid_t pgid) const;
  // The owner keeps (or already removed) the cleanup directory.
  void KeepCleanupDir() const;

  pid_t pid() const { return pid_; }

 private:
  ProcessGroupGuard(int fd, pid_t pid) : fd_(fd), pid_(pid) {}
  void Send(char op, pid_t pgid) const;

  int fd_;
  pid_t pid_;
};

}  // namespace ddprun
