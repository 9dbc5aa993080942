#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// How a worker process ended, in torchrun's convention: `exitcode` is the
// exit status for a normal exit and -N when signal N killed the process.
struct ExitStatus {
  int exitcode = 0;
  bool signaled() const { return exitcode < 0; }
  int signal() const { return signaled() ? -exitcode : 0; }
  bool succeeded() const { return exitcode == 0; }
};

// What to start. `argv[0]` is a path or a name looked up in the PATH of
// `env` (falling back to the agent's PATH). `env` is the complete
// environment of the child (nothing else is inherited).
struct ProcessSpec {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  // Give the worker a pseudo-terminal as stdout / stderr (one each, output
  // passed through unchanged: no '\n' -> "\r\n") instead of a pipe, with
  // this window size (0 = none set). Its output arrives the same way.
  bool tty_stdout = false;
  bool tty_stderr = false;
  unsigned short tty_rows = 0;
  unsigned short tty_cols = 0;
  // --numa_binding: the CPUs the child may run on, set between fork and
  // exec (sched_setaffinity); empty = the agent's own affinity. A child
  // whose binding fails writes why to its stderr and exits 126.
  std::vector<int> cpu_affinity;
  // Open descriptors of the agent the child keeps, under the same numbers
  // (every other one is closed at exec): e.g. a standby worker's channel
  // (DDPRUN_STANDBY_FD). They stay open in the agent too.
  std::vector<int> inherit_fds;
};

// Callbacks of one process. All are invoked on the launcher's event-loop
// thread. `on_stdout`/`on_stderr` get raw chunks as the child writes them;
// `on_exit` is invoked exactly once, after the output the child wrote before
// exiting has been delivered.
struct ProcessCallbacks {
  std::function<void(std::string_view chunk)> on_stdout;
  std::function<void(std::string_view chunk)> on_stderr;
  std::function<void(ExitStatus)> on_exit;
};

// A started worker: the leader of its own process group.
class Process {
 public:
  virtual ~Process() = default;
  virtual int pid() const = 0;
  // Sends `sig` to the process group of the worker (the worker and anything
  // it started that stayed in its group). A group that already exited is not
  // an error.
  virtual Status SignalGroup(int sig) = 0;
};

// Starts worker processes. Not thread-safe: used from the agent's loop
// thread only, which must be long-lived (children are bound to the thread
// that forked them through PR_SET_PDEATHSIG).
class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts `spec`. Errors: kNotFound when argv[0] cannot be found,
  // kInternal when fork/exec fails. Returned processes must outlive neither
  // the launcher nor their on_exit callback.
  virtual StatusOr<std::unique_ptr<Process>> Launch(
      const ProcessSpec& spec, ProcessCallbacks callbacks) = 0;
};

}  // namespace ddprun::agent
