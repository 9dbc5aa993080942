#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "agent/elastic/agent_options.h"
#include "agent/process/console.h"
#include "agent/process/env_map.h"
#include "agent/process/process_launcher.h"
#include "agent/process/worker_output.h"
#include "common/event_loop.h"
#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"
#include "rendezvous/client/rendezvous_client.h"

namespace ddprun::agent {

// --standby_workers (docs/restart_scope.md, "Standby worker"): one process
// per node, started with the workers' command while the group runs, that
// loads its libraries and then waits outside the world (in
// ddprun::worker::RunMain, worker/src/standby.h) until the agent hands it a
// rank. Under --restart_scope failed a replacement then costs a message,
// not an exec and LibTorch's start-up.
//
// The standby's environment is its node's workers' less everything
// rank-specific (BuildStandbyEnv: no RANK, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT, error or watch files) plus DDPRUN_STANDBY_FD, one end of a
// stream socket whose other end this class holds: a program that does not
// know the protocol cannot join the world (WORLD_SIZE without RANK is an
// error for torch's env:// and ddprun's runtime) nor write a rank's files.
// It says "ready\n" on the socket once it waits; TakeOver() sends the
// rank's environment (KEY=VALUE, each ended by '\0', then '\0') and hands
// its process over. Before that, its output goes to
// <attempt>/standby/std{out,err}.log (to the console, prefixed
// "[standby]:", without log files).
//
// A standby that exits on its own (not killed by Kill or TakeOver) is
// started again, at most `max_restarts` times per job; then one console line
// says the node runs without one.
//
// Confined to the agent's loop thread; nothing blocks but TakeOver's send
// (bounded: 1 s). `options`, `loop`, `launcher` and `console` must outlive
// it. Its destructor kills the standby.
class StandbyWorker {
 public:
  // Where a started process's streams and exit go. The standby's own until
  // TakeOver; then the new owner rebinds them (before the loop runs again).
  struct Route {
    std::function<void(std::string_view)> out;
    std::function<void(std::string_view)> err;
    std::function<void(ExitStatus)> exit;
    // Launcher callbacks that hold `route` and call whatever it holds then.
    static ProcessCallbacks Through(const std::shared_ptr<Route>& route);
  };
  struct Handover {
    std::unique_ptr<Process> process;
    std::shared_ptr<Route> route;
  };

  StandbyWorker(const AgentOptions* options, EventLoop* loop,
                ProcessLauncher* launcher, Console* console,
                int max_restarts = 3);
  ~StandbyWorker();
  StandbyWorker(const StandbyWorker&) = delete;
  StandbyWorker& operator=(const StandbyWorker&) = delete;

  // Starts a standby for `round`'s workers (a running one is killed first).
  // Nothing once it was turned off. Errors: the socket, its log files or
  // the launch failed (the node then runs without a standby until the next
  // Start).
  Status Start(const rendezvous::RendezvousResult& round);
  // SIGKILL to the standby's process group, if one runs; its exit is not
  // counted. Idempotent.
  void Kill();
  // A standby runs and said it waits (reads the socket, never blocks).
  bool Ready();
  // Sends `env` to the ready standby and hands its process over (this
  // object then has none: Start the next). Errors: none is ready
  // (kFailedPrecondition), or the send failed or took over 1 s (the
  // standby is killed): start the rank as before.
  StatusOr<Handover> TakeOver(const EnvMap& env);

  // The running standby's pid, -1 if none.
  int pid() const;
  // False once it exited on its own more than `max_restarts` times.
  bool enabled() const { return enabled_; }

 private:
  void OnExit(uint64_t epoch, ExitStatus status);
  // Closes the socket and forgets the process (not signalled).
  void Forget();

  const AgentOptions* const options_;
  EventLoop* const loop_;
  ProcessLauncher* const launcher_;
  Console* const console_;
  const int max_restarts_;

  // State below is confined to the loop thread.
  bool enabled_ = true;
  int restarts_ = 0;
  rendezvous::RendezvousResult round_;
  uint64_t epoch_ = 0;  // counts standbys: exits of older ones are dropped
  int fd_ = -1;         // the agent's end of the socket
  std::string said_;    // what the standby wrote on it so far
  bool ready_ = false;
  std::unique_ptr<Process> process_;
  std::shared_ptr<Route> route_;
  std::shared_ptr<WorkerOutput> out_;
  std::shared_ptr<WorkerOutput> err_;
};

// The message TakeOver sends: each KEY=VALUE ended by '\0', then '\0'.
std::string EncodeStandbyEnv(const EnvMap& env);

}  // namespace ddprun::agent
