#pragma once

#include <sys/types.h>

#include <map>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "agent/process/process_launcher.h"

namespace ddprun {
class ProcessGroupGuard;
}

namespace ddprun::agent {

// ProcessLauncher on Boost.Process (fork/exec, pipes, environment) and
// Boost.Asio (SIGCHLD and pipe reads; nothing polls).
//
// Every child: leads a new session and process group (setsid), gets
// PR_SET_PDEATHSIG(SIGKILL) so it dies with the agent, has stdout and stderr
// connected to pipes the agent reads, SIGPIPE at its default, and inherits no
// other descriptor of the agent. PDEATHSIG is bound to the forking thread,
// so Launch() must be called from the long-lived loop thread. With a
// `guard`, every child registers its process group there before it execs,
// and SignalGroup(SIGKILL) deregisters it: what a worker started in its
// group dies even when the agent is killed with SIGKILL.
//
// Confined to the thread that runs `io`. The launcher must outlive the
// processes it returns.
class BoostProcessLauncher : public ProcessLauncher {
 public:
  // `guard` (may be null) must outlive the launcher.
  explicit BoostProcessLauncher(boost::asio::io_context& io,
                                const ProcessGroupGuard* guard = nullptr);
  ~BoostProcessLauncher() override;

  StatusOr<std::unique_ptr<Process>> Launch(
      const ProcessSpec& spec, ProcessCallbacks callbacks) override;

 private:
  struct Child;

  void WaitForSigchld();
  // Reaps every exited child (WNOHANG) and delivers its final output and exit.
  void ReapExited();
  void StartRead(const std::shared_ptr<Child>& child, bool is_stderr);
  // Delivers on_exit once the child is reaped and both pipes hit EOF.
  void MaybeFinish(const std::shared_ptr<Child>& child);

  boost::asio::io_context& io_;
  const ProcessGroupGuard* const guard_;
  boost::asio::signal_set sigchld_;
  std::map<pid_t, std::shared_ptr<Child>> children_;
};

}  // namespace ddprun::agent
