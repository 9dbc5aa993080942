#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/elastic/agent_options.h"
#include "agent/elastic/failure_report.h"
#include "agent/elastic/file_timer_response.h"
#include "agent/elastic/generation_notice.h"
#include "agent/elastic/health_check.h"
#include "agent/elastic/progress_budget.h"
#include "agent/elastic/rank_replacement.h"
#include "agent/elastic/replacement_record.h"
#include "agent/elastic/standby_worker.h"
#include "agent/elastic/worker_env.h"
#include "agent/elastic/worker_group.h"
#include "agent/elastic/worker_logs.h"
#include "agent/process/console.h"
#include "agent/process/process_launcher.h"
#include "agent/process/worker_output.h"
#include "agent/watch/hang_response.h"
#include "agent/watch/straggler_watch.h"
#include "agent/watch/worker_watchdog.h"
#include "common/event_loop.h"
#include "rendezvous/client/rendezvous_client.h"

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
// Before the watchdog kills, the hang response (agent/watch/hang_response.h)
// collects every local worker's stacks, across nodes in a multi-node round,
// prints the diagnosis and adds it to the killed workers' failure
// traceback; DumpStacks() does the same for a running job without stopping
// anything, and stack requests from other nodes are answered there.
// DDPRUN_STACKS=0 in ddprun's environment turns stack dumps off.
//
// Under --restart_scope failed (RankReplacement, rank_replacement.h) a
// failed worker is started again alone, with the same ranks, while the
// others run, and heals from a live peer; when it cannot be (see there)
// the group restarts as above.
//
// With --standby_workers a standby process (standby_worker.h) waits beside
// each running group and takes the next rank replaced alone (the next
// standby starts once that rank healed); it dies with the group (a stop, a
// restart, the job's end).
//
// Rendezvous calls are asynchronous (rendezvous/client/rendezvous_client.h):
// each step starts one and goes on in its callback (OnJoined,
// OnFailureReported, OnBarrierPassed); nothing blocks the loop. A handled
// signal while a Join or the exit barrier is in flight (no workers run)
// leaves the job, which cancels the call, and finishes with 128+N; one that
// arrives while a failure report is in flight takes effect once it is
// answered (a restart becomes the exit). agent/README.md draws the state
// machine.
//
// The current worker group's processes, their stop and their failures are
// WorkerGroup's (worker_group.h); the agent decides what follows.
//
// Confined to the loop thread (the rendezvous client and the launcher
// deliver there). The collaborators must outlive the agent.
class ElasticAgent : public HangResponse::Workers,
                     public FileTimerResponse::Workers,
                     public RankReplacement::Agent {
 public:
  using DoneCallback = std::function<void(int exit_code)>;

  ElasticAgent(AgentOptions options, EventLoop* loop, ProcessLauncher* launcher,
               rendezvous::RendezvousClient* rendezvous, Console* console);
  ~ElasticAgent() override;

  // Begins the first rendezvous on the loop. `on_done` runs once, on the
  // loop thread, with the exit code for ddprun.
  void Start(DoneCallback on_done);

  // A signal in --signals_to_handle arrived (call on the loop thread). Also
  // before the first rendezvous: the agent then finishes without one.
  void OnSignal(int sig);

  // A dump on demand (SIGUSR2 to ddprun): every running worker's stacks to
  // its stacks.txt and the diagnosis to the console; the job goes on.
  void DumpStacks();

  // For tests only (ddprun reads none of these): what the loop did.
  WorkerState state() const { return state_; }
  // TORCHELASTIC_RESTART_COUNT of the current attempt.
  int restart_count() const { return group_.round().restart_count; }
  // How many times workers were started (rounds run).
  int starts() const { return group_.starts(); }
  // Pids of the current attempt's workers, by local rank.
  std::vector<int> worker_pids() const { return group_.pids(); }
  const std::vector<ProcessFailure>& last_failures() const {
    return group_.failures();
  }

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
  // Which rendezvous call is in flight (kJoining, kReporting, kBarrier,
  // kLeaving), or what the agent does without one.
  enum class Phase {
    kIdle,       // before Start, or between two steps
    kJoining,    // Join in flight, no workers
    kRunning,    // workers run (or are being stopped)
    kReporting,  // ReportFailure in flight, workers stopped
    kBarrier,    // ReportSuccess (exit barrier) in flight, workers done
    kLeaving,    // Leave in flight: the agent finishes when it is over
    kDone,
  };
  // Starts a Join (or, with a signal pending, leaves instead).
  void StartRendezvous();
  // Joins the next round; `unhealthy` non-empty (the health check failed)
  // reports the node to the bad-host policy instead and finishes with 1.
  void JoinRound(const std::string& unhealthy);
  void OnJoined(StatusOr<rendezvous::RendezvousResult> round);
  Status StartWorkers(const rendezvous::RendezvousResult& round);
  // Launches every local rank (group_.Start: `generation` < 0 a group
  // start, else as replacements in it) and has the straggler watch follow
  // them.
  Status LaunchGroup(int64_t generation);
  // Starts the group's standby worker (--standby_workers); a failure is a
  // warning (replacements then start afresh).
  void StartStandby();
  // WorkerGroup's exit callback.
  void OnWorkerExit(int local_rank, ExitStatus status);
  // The watchdog's hook: a running worker of this group is hung; the hang
  // response decides when it is killed (KillHung).
  void OnWorkerStuck(const WorkerWatchdog::Stuck& stuck);
  // FileTimerResponse::Workers.
  bool GroupRunning() const override;
  bool GroupStopping() const override;
  int RunningWorker(int pid) const override;
  void NoteKill(int local_rank, const std::string& why, bool replace) override;
  // RankReplacement::Agent.
  Status StartReplacement(int local_rank, int64_t generation,
                          const std::string& reason) override;
  void RestartGroup(int local_rank, const std::string& why) override;
  int64_t StepsOf(int local_rank) const override;
  void ReplacementHealed(int local_rank, int64_t generation, int source,
                         double seconds) override;
  void ReplacementGaveUp(int local_rank, int64_t generation,
                         const std::string& why) override;
  // Writes the replacement's record in the rank's directory and moves the
  // failed process's error file aside (replacement_record.h); nothing
  // without log files. A write that fails is a warning.
  void RecordReplacement(int local_rank, int64_t generation,
                         const std::string& reason);
  // Ends the record of the replacement in progress, if any: healed
  // (`source` >= 0) or not (`why`).
  void EndReplacementRecord(int local_rank, int64_t generation, int source,
                            double seconds, const std::string& why);
  // Local rank `local_rank` failed (`failure` recorded): replaced alone, or
  // the group stops.
  void OnWorkerFailed(int local_rank, ProcessFailure failure);
  // The group is to stop for a worker failure (seen now).
  void NoteGroupFailure();
  // HangResponse::Workers.
  std::vector<StackTarget> StackTargets() const override;
  void KillHung(int local_rank, const std::string& diagnosis) override;
  void OnRendezvousEvent(const rendezvous::RendezvousEvent& event);
  // `not_retried`: why the failure was reported as final ("" = retried),
  // logged after the failure table.
  void OnFailureReported(StatusOr<bool> again, const std::string& not_retried);
  void OnBarrierPassed(const Status& status);
  // Leaves the job (cancelling a call in flight), then finishes.
  void LeaveAndFinish(WorkerState state, int exit_code);
  void BeginStop(StopReason reason, int sig, const std::string& why);
  void MaybeFinishStop();
  void AfterStop();
  void ReportFailedJob();
  void Finish(WorkerState state, int exit_code);
  std::string Host();  // hostname_, resolved once
  // watchdog_ (null with --watchdog_timeout=0; sets own_probe_ when the
  // options have no probe), made in the initializer list for group_.
  std::unique_ptr<WorkerWatchdog> MakeWatchdog();

  // Constant after construction (the objects pointed to change; the
  // collaborators are confined to the loop thread, as the agent is).
  const AgentOptions options_;
  EventLoop* const loop_;
  ProcessLauncher* const launcher_;
  rendezvous::RendezvousClient* const rendezvous_;
  Console* const console_;
  std::unique_ptr<WorkerProbe> own_probe_;        // when config has none
  std::unique_ptr<WorkerWatchdog> watchdog_;      // null: --watchdog_timeout=0
  std::unique_ptr<StragglerWatch> stragglers_;    // step rates, warnings
  std::unique_ptr<HangResponse> hang_;            // stacks, hung workers
  std::unique_ptr<RankReplacement> replacement_;  // --restart_scope failed
  // DDPRUN_GENERATION_SIGNAL under --restart_scope failed, else null.
  std::unique_ptr<GenerationNotice> notice_;
  // The on-disk record of the replacement that heals now; null when none
  // is in progress or there are no log files.
  std::unique_ptr<ReplacementRecord> replacement_record_;
  // Each attempt's log folder and the workers' streams. Declared before
  // group_, whose workers' outputs write to its filtered logs.
  WorkerLogs logs_;
  WorkerGroup group_;  // the current attempt's workers
  // --standby_workers under --restart_scope failed; null: none.
  std::unique_ptr<StandbyWorker> standby_;

  // State below is confined to the loop thread.

  // The job across rounds: the phase it is in (each step sets it) and how
  // it ends.
  DoneCallback on_done_;  // set by Start, run by Finish
  WorkerState state_ = WorkerState::kInit;
  Phase phase_ = Phase::kIdle;
  bool finished_ = false;  // Finish ran: late callbacks are dropped
  // A signal that arrived while a failure report was in flight.
  int pending_signal_ = 0;
  std::string hostname_;  // for the failure table, resolved when needed
  std::unique_ptr<FileTimerResponse> file_timer_;  // from Start; null: off
  ProgressBudget progress_;  // --max_restarts_without_progress
  int health_checks_ = 0;    // the health check in flight (by number)

  // When the current group's first failure was seen (for the restart's
  // log line); none after a restart for a membership change.
  Clock::TimePoint failure_seen_at_{};

  // Stopping the group (kRunning): from the first failure, event or signal
  // (BeginStop) until every worker has exited (MaybeFinishStop).
  bool stop_pending_ = false;  // a failure was seen, BeginStop is posted
  StopReason stop_reason_ = StopReason::kNone;
  int stop_signal_ = 0;
  std::string stop_why_;
};

}  // namespace ddprun::agent
