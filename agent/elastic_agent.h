#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/console.h"
#include "agent/event_loop.h"
#include "agent/failure_report.h"
#include "agent/launch_options.h"
#include "agent/process_launcher.h"
#include "agent/rendezvous_client.h"
#include "agent/worker_env.h"
#include "agent/worker_output.h"
#include "agent/worker_watchdog.h"

namespace ddprun::agent {

// torchelastic's WorkerState.
enum class WorkerState {
  kInit,
  kHealthy,
  kUnhealthy,
  kStopped,
  kSucceeded,
  kFailed
};
const char* WorkerStateName(WorkerState state);

// Everything the agent needs besides its collaborators.
struct AgentConfig {
  LaunchOptions options;
  std::string run_id;  // TORCHELASTIC_RUN_ID
  // <log_dir>/<run_id>_<rand>, already created; "" = no log files at all
  // (--log_dir /dev/null): TORCHELASTIC_ERROR_FILE is empty, -r/-t are
  // ignored (every stream goes to the console) and the watchdog has no
  // heartbeat file (it still sees stopped workers).
  std::string run_log_dir;
  EnvMap parent_env;     // the environment workers inherit
  std::string hostname;  // for the failure table; "" = getfqdn()
  std::string node_id;   // unique per agent, for the rendezvous
  // The agent's own TORCHELASTIC_ERROR_FILE ("" if unset): receives the root
  // cause's error file with errorCode added.
  std::string agent_error_file;
  Clock::Duration join_timeout = std::chrono::seconds(600);
  // Static multi-node mode: the round must give this node group rank
  // --node_rank exactly (else two nodes share a --node_rank: the job fails
  // with one clear line instead of running with surprising ranks).
  bool node_rank_exact = false;
  // What the hang watchdog (options.watchdog_timeout_s > 0) reads about
  // workers; null = the real one (/proc and stat(2)). Must outlive the agent.
  WorkerProbe* watchdog_probe = nullptr;
};

// torchrun's local elastic agent as an event-driven state machine:
// rendezvous -> start nproc_per_node workers -> wait for exits and
// rendezvous events -> on a worker failure stop the group (SIGTERM, then
// SIGKILL of every group after --shutdown_timeout) and restart while the
// rendezvous grants restarts -> once every worker succeeded, report success
// and finish with exit code 0. A failed job prints torchrun's failure table
// and finishes with 1; a handled signal is forwarded to the workers, the group
// is stopped and the agent finishes with 128+N.
//
// Worker output always flows through the agent (pipes), also without -r/-t:
// console lines get torchrun's tee prefix `[<role><local_rank>]:` (or the
// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE expansion) and are written whole, so
// lines of different workers never interleave mid-line (pytorch#75087).
// --local_ranks_filter applies to the console only.
//
// With --watchdog_timeout > 0 a worker that stays stopped (state T), or that
// touched its heartbeat file (env DDPRUN_WATCHDOG_FILE) and then stopped
// touching it, for that long is killed with SIGKILL to its process group
// (a stopped process ignores SIGTERM) and counts as a failed worker
// (exitcode -9, the failure table names the watchdog): the group restarts
// while the budget lasts. Stopping a group also sends SIGCONT after
// SIGTERM, so a stopped worker handles SIGTERM instead of waiting for
// --shutdown_timeout.
//
// Confined to the loop thread (rendezvous events are posted to it). The
// collaborators must outlive the agent. Rendezvous calls (Join,
// ReportFailure, ReportSuccess) block the loop thread; workers are stopped
// while they run.
class ElasticAgent {
 public:
  using DoneCallback = std::function<void(int exit_code)>;

  ElasticAgent(AgentConfig config, EventLoop* loop, ProcessLauncher* launcher,
               RendezvousClient* rendezvous, Console* console);
  ~ElasticAgent();

  // Begins the first rendezvous on the loop. `on_done` runs once, on the
  // loop thread, with the exit code for ddprun.
  void Start(DoneCallback on_done);

  // A signal in --signals_to_handle arrived (call on the loop thread).
  void OnSignal(int sig);

  WorkerState state() const { return state_; }
  // TORCHELASTIC_RESTART_COUNT of the current attempt.
  int restart_count() const { return round_.restart_count; }
  // How many times workers were started (rounds run).
  int starts() const { return starts_; }
  // Pids of the current attempt's workers, by local rank.
  std::vector<int> worker_pids() const;
  const std::vector<ProcessFailure>& last_failures() const { return failures_; }

 private:
  enum class StopReason {
    kNone,
    kWorkerFailure,
    kMembershipChanged,
    kRestartRequested,
    kJobFailed,
    kConnectionLost,
    kSignal,
    kLaunchError,
  };
  struct Worker;

  void RendezvousAndStart();
  Status StartWorkers();
  void OnWorkerExit(int generation, int local_rank, ExitStatus status);
  void OnWorkerStuck(const WorkerWatchdog::Stuck& stuck);
  void OnRendezvousEvent(const RendezvousEvent& event);
  void BeginStop(StopReason reason, int sig, const std::string& why);
  void OnStopDeadline();
  void MaybeFinishStop();
  // SIGKILL to every worker's process group (the workers have exited).
  void KillLeftovers();
  void AfterStop();
  void ReportFailedJob();
  void Finish(WorkerState state, int exit_code);
  bool AnyRunning() const;

  AgentConfig config_;
  EventLoop* loop_;
  ProcessLauncher* launcher_;
  RendezvousClient* rendezvous_;
  Console* console_;
  DoneCallback on_done_;

  WorkerState state_ = WorkerState::kInit;
  RendezvousResult round_;
  int generation_ = 0;
  int starts_ = 0;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<ProcessFailure> failures_;
  bool stop_pending_ = false;  // a failure was seen, BeginStop is posted
  StopReason stop_reason_ = StopReason::kNone;
  int stop_signal_ = 0;
  std::string stop_why_;
  EventLoop::TimerId stop_timer_ = 0;
  bool stop_timer_armed_ = false;
  bool finished_ = false;
  Clock::TimePoint failure_seen_at_{};
  std::unique_ptr<WorkerProbe> own_probe_;    // when config has none
  std::unique_ptr<WorkerWatchdog> watchdog_;  // null: --watchdog_timeout=0
};

}  // namespace ddprun::agent
