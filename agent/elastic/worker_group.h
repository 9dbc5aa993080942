#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/elastic/agent_options.h"
#include "agent/elastic/failure_report.h"
#include "agent/elastic/standby_worker.h"
#include "agent/elastic/worker_env.h"
#include "agent/elastic/worker_logs.h"
#include "agent/process/console.h"
#include "agent/process/process_launcher.h"
#include "agent/process/worker_output.h"
#include "agent/watch/stack_collector.h"
#include "agent/watch/straggler_watch.h"
#include "agent/watch/worker_watchdog.h"
#include "common/event_loop.h"
#include "ddprun/common/status.h"
#include "rendezvous/client/rendezvous_client.h"

namespace ddprun::agent {

// The agent's current worker group: the nproc_per_node workers of one
// round, each a process in a process group of its own, from their launch to
// their exits. It launches them (argv and environment from worker_env.h,
// streams from WorkerLogs, --numa_binding's CPUs, a terminal where the
// console is one), has the watchdog watch each from its launch to its exit,
// stops them (Stop: the signal to every running worker's process group,
// then SIGKILL to those still running when --shutdown_timeout passes) and
// keeps their failures for the failure table. What an exit, a failure or a
// stop means for the job is the agent's (ElasticAgent): this class tells it
// of every exit and does what it is told.
//
// Reset() ends a group and begins the next: exits of the old processes
// that arrive later are dropped, as is the deadline of its stop.
//
// Confined to the agent's loop thread; nothing blocks (a launch is the
// launcher's fork and exec). Errors are Status values. `options`, `loop`,
// `launcher`, `console` and `watchdog` (null: --watchdog_timeout=0) must
// outlive it; the workers' streams write to the WorkerLogs that opened
// them, which must outlive the group or its next Reset().
class WorkerGroup {
 public:
  // One local rank of the group. The agent reads these and writes the two
  // fields marked as its own.
  struct Worker {
    int local_rank = 0;
    int global_rank = 0;
    int pid = -1;
    bool running = false;
    // The generation it started in (restart scope failed): 0 for a group
    // start, a replacement's DDPRUN_GENERATION.
    int64_t generation = 0;
    ExitStatus exit;
    std::string error_file;  // TORCHELASTIC_ERROR_FILE, "" without log files
    WorkerWatchFiles watch;  // ddprun's files for it, "" where off
    // The agent's: why it was killed (the watchdog, a FileTimer scope), ""
    // if it was not; the traceback of its failure when it wrote no error
    // file.
    std::string watchdog_kill;
    // The agent's: the watchdog found it stopped (state T).
    bool stopped_hang = false;
    std::unique_ptr<Process> process;
    std::unique_ptr<WorkerOutput> out;
    std::unique_ptr<WorkerOutput> err;
  };
  // A worker of the current group exited; its streams have ended.
  using ExitCallback = std::function<void(int local_rank, ExitStatus status)>;

  WorkerGroup(const AgentOptions* options, EventLoop* loop,
              ProcessLauncher* launcher, Console* console,
              WorkerWatchdog* watchdog, ExitCallback on_exit);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Ends the current group (its workers are forgotten, not signalled: the
  // agent stopped them) and begins an empty one for `round`.
  void Reset(const rendezvous::RendezvousResult& round);
  // Opens every local rank's streams in `logs`' current attempt, then
  // launches them all. `stacks`: each gets a stacks file (with log files);
  // `timer_file`: torch's FileTimer pipe, "" = none. `generation` >= 1:
  // every rank starts as a replacement in that generation (a node that
  // takes a lost node's place, AddReplacementEnv); < 0: a group start.
  // Errors: a rank's files cannot be opened, or a launch fails (the workers
  // launched before it run: stop them).
  Status Start(WorkerLogs* logs, bool stacks, const std::string& timer_file,
               int64_t generation = -1);
  // Starts local rank `local_rank` again alone, as the same rank, with
  // DDPRUN_GENERATION=`generation` (AddReplacementEnv); its output goes on
  // in the rank's files. With a ready `standby` (--standby_workers) the
  // standby's process takes the rank with exactly that environment instead
  // of a new process (not for a rank bound to CPUs or given a terminal: a
  // standby has neither), and `*by_standby` says so. Errors: no such rank,
  // its streams cannot be reopened, or the launch fails (a standby that
  // cannot take the rank is not an error: a new process starts).
  Status Relaunch(int local_rank, int64_t generation,
                  StandbyWorker* standby = nullptr, bool* by_standby = nullptr);

  // Stops the group: `sig` to every running worker's process group (after
  // SIGTERM also SIGCONT: a stopped worker, SIGSTOP or Ctrl-Z, acts on
  // SIGTERM only once continued and would sit out --shutdown_timeout), the
  // watchdog forgets them all, and those still running once
  // --shutdown_timeout passes get SIGKILL.
  void Stop(int sig);
  // SIGKILL now to every running worker's process group (the deadline
  // need not be waited for).
  void KillRunning();
  // SIGKILL to every worker's process group, exited or not, and the stop's
  // deadline is dropped: what a worker started in its group ends with it.
  void KillLeftovers();
  // `sig` to every running worker's process group.
  void Signal(int sig);
  // `sig` to every running worker's process group that started in a
  // generation before `generation`.
  void SignalOlderThan(int sig, int64_t generation);
  // SIGKILL to worker `local_rank`'s process group.
  void Kill(int local_rank);
  // Watches worker `local_rank` again, from its next heartbeat on.
  void Watch(int local_rank);

  const rendezvous::RendezvousResult& round() const { return round_; }
  // How many groups began (Reset calls): 1 for the first.
  int starts() const { return starts_; }
  int size() const { return static_cast<int>(workers_.size()); }
  // Worker `local_rank`, or null when there is none.
  Worker* worker(int local_rank);
  const Worker* worker(int local_rank) const;
  bool AnyRunning() const;
  // The local rank of the running worker whose pid is `pid`, or -1.
  int RunningWorker(int pid) const;
  // A worker other than `local_rank` that is not running (the highest
  // local rank), or null.
  const Worker* NotRunningBesides(int local_rank) const;
  // A running worker the watchdog found stopped, or null.
  const Worker* StoppedWorker() const;
  // Worker `local_rank`'s step count now (its step file), -1 if unknown.
  int64_t Steps(int local_rank) const;
  // Pids by local rank.
  std::vector<int> pids() const;
  // What the watchers are handed: every worker (straggler watch), the
  // running ones with a stacks file (hang response), the step files.
  std::vector<StragglerWatch::Target> StragglerTargets() const;
  std::vector<StackTarget> StackTargets() const;
  std::vector<std::string> StepFiles() const;

  // What worker `local_rank`'s failed exit reports: its error file, else
  // why it was killed.
  ProcessFailure FailureOf(int local_rank) const;
  // The group's failures, in the order they were seen.
  const std::vector<ProcessFailure>& failures() const { return failures_; }
  void AddFailure(ProcessFailure failure);
  // A rank replaced alone: its failure is held (the newest per rank), and
  // becomes the group's only if its replacement gives up (AddHeldFailure).
  void HoldFailure(int local_rank, ProcessFailure failure);
  void AddHeldFailure(int local_rank);
  // Local rank `local_rank`'s held failure, or null (the agent may change
  // it: where its error file was moved).
  ProcessFailure* HeldFailure(int local_rank);

 private:
  // What `w` is started with; `generation` < 0 for a group start, else a
  // replacement's.
  ProcessSpec SpecFor(const Worker& w, int64_t generation) const;
  // Launches `w` from `spec`.
  Status Launch(Worker* w, const ProcessSpec& spec, int64_t generation);
  // `w` runs as `process` from now on (launched, or a standby's), its
  // streams and exit bound through `route`.
  void Started(Worker* w, std::unique_ptr<Process> process,
               StandbyWorker::Route* route, int64_t generation);
  void OnExit(int starts, int local_rank, ExitStatus status);

  // Constant after construction.
  const AgentOptions* const options_;
  EventLoop* const loop_;
  ProcessLauncher* const launcher_;
  Console* const console_;
  WorkerWatchdog* const watchdog_;
  const ExitCallback on_exit_;

  // State below is confined to the loop thread.
  rendezvous::RendezvousResult round_;
  int starts_ = 0;  // exits of older groups' processes are dropped
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<ProcessFailure> failures_;
  std::map<int, ProcessFailure> held_failures_;  // by local rank
  // The stop's deadline (Stop until KillRunning or KillLeftovers).
  EventLoop::TimerId stop_timer_ = 0;
  bool stop_timer_armed_ = false;
};

}  // namespace ddprun::agent
